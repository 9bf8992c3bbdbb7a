"""``tune()``: measure the practices on the user's own model, data and hardware, and keep what is faster.

Each candidate configuration (:class:`~lightning_efficient.functional.tuning.Candidate`) trains a copy of the
model for a few optimizer steps through a real ``Trainer`` with the user's Trainer arguments; a probe callback
times the steps after a warm-up. The decisions are made by
:func:`~lightning_efficient.functional.tuning.search` (one factor at a time, a change is kept only if it beats
the measurement noise). The user's model, callbacks and data are never trained or modified, and the global RNG
states and backend flags are restored, so ``trainer.fit`` afterwards does exactly what it would have done.
"""

from __future__ import annotations

import copy
import math
import platform
import random
import statistics
import time
import warnings
from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence, Union

import torch
from pytorch_lightning.utilities.data import extract_batch_size

from lightning_efficient.callbacks.base import LIGHTNING_PACKAGES, Callback
from lightning_efficient.callbacks.channels_last import ChannelsLast
from lightning_efficient.callbacks.efficiency_report import EfficiencyReport
from lightning_efficient.data.loader import available_cpus, can_rebuild, with_num_workers
from lightning_efficient.functional.efficiency import process_rss_bytes
from lightning_efficient.functional.layout import (
    BatchToChannelsLast,
    convert_module_to_channels_last,
    to_channels_last,
    to_nchw,
)
from lightning_efficient.functional.timing import HostClock, StepTimeline
from lightning_efficient.functional.tuning import (
    NOISY_SPREAD,
    Candidate,
    Measurement,
    TuneResult,
    compile_submodules,
    search,
    tuning_cost_note,
)
from lightning_efficient.pipeline import add_stage
from lightning_efficient.precision import cpu_has_native_bf16
from lightning_efficient.quiet import no_lightning_info, quiet_lightning
from lightning_efficient.recipe import check_trainer_kwargs

__all__ = ["Candidate", "Measurement", "Trials", "TuneResult", "tune"]

#: Trainer arguments ``tune()`` sets itself for the short measuring fits.
_CONTROLLED = (
    "max_epochs",
    "min_epochs",
    "max_steps",
    "min_steps",
    "max_time",
    "limit_train_batches",
    "limit_val_batches",
    "num_sanity_val_steps",
    "val_check_interval",
    "check_val_every_n_epoch",
    "logger",
    "enable_checkpointing",
    "enable_progress_bar",
    "enable_model_summary",
    "precision",
    "callbacks",
    "fast_dev_run",
    "profiler",
    "barebones",
)


class _StepWaits:
    """The ``timer`` of a :class:`~lightning_efficient.functional.timing.StepTimeline` that keeps every step's
    data wait (seconds from the end of the step before to the start of this one), in step order."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def add(self, data_wait_s: float, transform_s: float, compute_s: float, samples: int) -> None:
        self.waits.append(max(data_wait_s + transform_s, 0.0))


class _Clock(Callback):
    """What both probes record: the time after each training step (``marks``, index 0: train start), each step's
    data wait (``timeline``, the same bookkeeping as :class:`EfficiencyReport`'s), the samples per step and the
    peak memory.

    The clock is the host's, with ``torch.cuda.synchronize()`` at window boundaries only (on CUDA, ``_now``), so
    a window covers everything the steps cost: data wait, transfers, device transforms, forward, backward,
    optimizer.
    """

    def __init__(self) -> None:
        self.marks: list[float] = []
        self.timeline = StepTimeline(HostClock(), _StepWaits())  # type: ignore[arg-type] - any add() will do
        self.samples: list[int] = []
        self.peak_rss = 0
        self.cuda = False
        self.result: Optional[dict[str, Any]] = None

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _peak_mb(self, pl_module: Any) -> float:
        return (torch.cuda.max_memory_allocated(pl_module.device) if self.cuda else self.peak_rss) / 2**20

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.cuda = pl_module.device.type == "cuda"
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        self.marks = [self._now()]
        self.timeline.restart()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.timeline.batch_started()

    def _step_ended(self, batch: Any) -> None:
        self.samples.append(_batch_size(batch))
        self.timeline.batch_ended(self.samples[-1])

    def _wait_share(self, steps: Any) -> float:
        """Share of the time of ``steps`` (0-based step indices) spent waiting for data: fetching the batch, moving
        it to the device, batch hooks."""
        waits = self.timeline.timer.waits
        steps = [i for i in steps if i < len(waits) and i + 1 < len(self.marks)]
        total = sum(self.marks[i + 1] - self.marks[i] for i in steps)
        return sum(waits[i] for i in steps) / total if total > 0 else math.nan


class _Probe(_Clock):
    """Times training steps: ``warmup`` steps, then ``repeats`` windows of ``window`` steps each."""

    def __init__(self, warmup: int, window: int, repeats: int) -> None:
        super().__init__()
        self.warmup, self.window, self.repeats = warmup, window, repeats

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = len(self.samples) + 1
        boundary = step >= self.warmup and (step - self.warmup) % self.window == 0
        self.marks.append(self._now() if boundary or step < self.warmup else time.perf_counter())
        self._step_ended(batch)
        if not self.cuda and step % self.window == 0:
            self.peak_rss = max(self.peak_rss, process_rss_bytes())

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        w, k = self.warmup, self.window
        rates = []
        for r in range(self.repeats):
            a, b = w + r * k, w + (r + 1) * k
            if b >= len(self.marks):
                break
            seconds = self.marks[b] - self.marks[a]
            rates.append(sum(self.samples[a:b]) / seconds if seconds > 0 else math.nan)
        peak = self._peak_mb(pl_module)
        end = w + len(rates) * k
        result = {
            "rates": rates,
            "data_wait": self._wait_share(range(w, end)) if rates else math.nan,
            "warmup_s": self.marks[w] - self.marks[0] if len(self.marks) > w else math.nan,
            "step_s": (self.marks[end] - self.marks[w]) / (len(rates) * k) if rates else math.nan,
            "peak_memory_mb": peak,
            "batch_size": self.samples[0] if self.samples else None,
            "steps": len(self.samples),
        }
        # Every rank decides from rank 0's figures, so that all ranks choose the same settings.
        self.result = trainer.strategy.broadcast(result, src=0)


#: The factors one fit can switch between, window by window (:class:`_InterleavedProbe`).
SWITCHABLE = ("channels_last", "num_workers")


class _SwitchingLoader:
    """The training data of an interleaved fit: one loader per ``num_workers`` value, each batch drawn from the
    loader of the side whose step it feeds (``side()``, asked at every fetch; Lightning fetches a sized loader's
    batch at the start of its step, after the previous step's ``on_train_batch_end``).

    Each loader's iterator is created when its side first draws in an epoch and then kept, so its worker
    processes (and persistent workers across epochs) run as they would alone; an epoch has as many batches as
    the loaders (rebuilt from one loader, they have the same length)."""

    def __init__(self, loaders: Mapping[int, Any], side: Any) -> None:
        self.loaders, self.side = dict(loaders), side
        self._iters: dict[int, Any] = {}

    def __len__(self) -> int:
        return min(len(loader) for loader in self.loaders.values())

    def __iter__(self) -> Any:
        self.close()
        iters = self._iters
        for _ in range(len(self)):
            key = self.side()
            if key not in iters:
                iters[key] = iter(self.loaders[key])
            try:
                yield next(iters[key])
            except StopIteration:
                return

    def close(self) -> None:
        """Drop the live iterators (their worker processes shut down)."""
        self._iters.clear()


def _head_start(loader: Any) -> int:
    """Batches a loader's workers prepare ahead while its side is idle: ``prefetch_factor x num_workers``."""
    workers = getattr(loader, "num_workers", 0) or 0
    return workers * (getattr(loader, "prefetch_factor", None) or 2) if workers > 0 else 0


class _InterleavedProbe(_Clock):
    """Measures several settings in one fit, window by window in alternation: settings that differ only in
    :data:`SWITCHABLE` factors (NCHW or channels_last, and the training loader's ``num_workers``).

    Plan: ``warmup`` steps of each side, the last side first, then ``rounds`` rounds of one ``window``-step window
    per side, in the sides' order in even rounds and in reverse in odd ones (two sides: new, old, old, new, new,
    old...; the windows of round ``r`` form pair ``r``, and a steady drift of the machine's speed favours no
    side). Before each timed window that follows a change of side come untimed steps: one (the switch itself),
    plus, where the loader changes, the batches the new side's workers prepared while idle
    (``head_start[num_workers]``, :func:`_head_start`), so that no window pays for a switch or profits from
    work done during another side's windows.

    At a change of layout the model's 4-D parameters and buffers, their gradients and the optimizer's state are
    converted; batches are converted to channels_last in the ``"layout"`` stage of the batch pipeline (as
    :class:`ChannelsLast` does) while the layout is. The loader is switched through :attr:`data_workers`, which
    :class:`_SwitchingLoader` asks at each fetch.

    Common random numbers: when the batch of the ``j``-th step of a timed window of round ``r`` enters the batch
    pipeline (its first stage, after the fetch), the torch and Python RNGs are seeded alike for every side
    (``seed + 1000 r + j``, the seed drawn once at ``setup``), so that the sides of a round train with the same
    random draws (augmentation on the device, such as TrivialAugment's choice of operation, and dropout) and a
    costly draw does not fall on one side only; the draws differ from round to round. :class:`Trials` sets the
    global RNGs back afterwards.
    """

    _STAGE = "tune-paired-layout"
    _SEED_STAGE = "tune-paired-seed"

    def __init__(
        self,
        sides: Sequence[Candidate],
        warmup: int,
        window: int,
        rounds: int,
        head_start: Optional[Mapping[Optional[int], int]] = None,
    ) -> None:
        super().__init__()
        self.sides, self.window, self.rounds = list(sides), window, rounds
        head_start = head_start or {}
        plan: list[tuple[int, Optional[int]]] = []

        def run(side: int, steps: int, window_round: Optional[int]) -> None:
            if plan and plan[-1][0] != side:
                new_loader = self.sides[plan[-1][0]].num_workers != self.sides[side].num_workers
                untimed = (head_start.get(self.sides[side].num_workers, 0) if new_loader else 0) + (
                    window_round is not None
                )
                plan.extend([(side, None)] * untimed)
            plan.extend([(side, window_round)] * steps)

        for side in reversed(range(len(self.sides))):
            run(side, warmup, None)
        for r in range(rounds):
            for side in range(len(self.sides)) if r % 2 == 0 else reversed(range(len(self.sides))):
                run(side, window, r)
        self.plan = plan
        self.steps_needed = len(plan)
        self.side = plan[0][0]
        self.cl = self.sides[self.side].channels_last
        self.names: set[str] = set()
        self._pipeline: Any = None
        self._convert: Any = None
        self._seed = 0
        #: timed step -> its offset from the fit's seed: 1000 x round + its index in the window
        self.offsets: dict[int, int] = {}
        for k, (side, r) in enumerate(plan):
            if r is not None:
                self.offsets[k] = 1000 * r + (self.offsets[k - 1] % 1000 + 1 if plan[k - 1] == (side, r) else 0)

    def data_workers(self) -> Optional[int]:
        """``num_workers`` of the side whose step the next batch feeds."""
        return self.sides[self.side].num_workers

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._seed = int(torch.randint(0, 2**31 - 1 - 1000 * (self.rounds + 1), ()))
        # The seeding runs as the first stage of the batch pipeline, after the batch is fetched (a loader draws from
        # the global RNG when it starts an epoch) and before the device transforms and the step that use it.
        self._pipeline = add_stage(trainer, pl_module, self._SEED_STAGE, self._seed_step, "decode")
        if not any(s.channels_last for s in self.sides):
            return
        report = convert_module_to_channels_last(pl_module)
        self.names = set(report.converted)
        self._convert = BatchToChannelsLast()
        self._switch(pl_module, None, self.cl)
        self._pipeline = add_stage(
            trainer, pl_module, self._STAGE, lambda batch, idx: self._convert(batch) if self.cl else batch, "layout"
        )

    def _seed_step(self, batch: Any, dataloader_idx: int) -> Any:
        offset = self.offsets.get(len(self.samples))  # the step this batch feeds
        if offset is not None:
            torch.manual_seed(self._seed + offset)
            random.seed(self._seed + offset)
        return batch

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._pipeline is not None:
            for name in (self._SEED_STAGE, self._STAGE):
                if name in self._pipeline.names():
                    self._pipeline.remove(name)
        self._pipeline = None

    def _switch(self, pl_module: Any, optimizers: Any, cl: bool) -> None:
        # to_channels_last / to_nchw, not .contiguous(memory_format=...): a depthwise weight [C, 1, k, k] counts as
        # contiguous in both layouts, and only its strides tell PyTorch's operators which one to propagate.
        convert = to_channels_last if cl else to_nchw
        tensors = dict(pl_module.named_parameters())
        tensors.update(dict(pl_module.named_buffers()))
        for name in self.names:
            t = tensors.get(name)
            if t is None:
                continue
            t.data = convert(t.data)
            if isinstance(t, torch.nn.Parameter) and t.grad is not None:
                t.grad = convert(t.grad)
            for opt in optimizers or ():
                for key, value in opt.state.get(t, {}).items():
                    if torch.is_tensor(value) and value.shape == t.shape:
                        opt.state[t][key] = convert(value)
        self.cl = cl

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        k = len(self.samples)  # this step's index in the plan
        nxt = self.plan[k + 1] if k + 1 < len(self.plan) else None
        boundary = nxt is None or nxt != self.plan[k]
        self.marks.append(self._now() if boundary else time.perf_counter())
        self._step_ended(batch)
        if not self.cuda and (boundary or k % self.window == 0):
            self.peak_rss = max(self.peak_rss, process_rss_bytes())
        if nxt is not None and nxt[0] != self.side:
            self.side = nxt[0]
            cl = self.sides[self.side].channels_last
            if cl != self.cl:
                self._switch(pl_module, [getattr(o, "optimizer", o) for o in trainer.optimizers], cl)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        windows: dict[tuple[int, int], list[int]] = {}
        for k, (side, r) in enumerate(self.plan[: len(self.samples)]):
            if r is not None:
                windows.setdefault((side, r), []).append(k)
        rates: dict[tuple[int, int], float] = {}
        waits: dict[tuple[int, int], float] = {}
        for key, steps in windows.items():
            if len(steps) < self.window:
                continue
            seconds = self.marks[steps[-1] + 1] - self.marks[steps[0]]
            rates[key] = sum(self.samples[k] for k in steps) / seconds if seconds > 0 else math.nan
            waits[key] = self._wait_share(steps)
        n = len(self.sides)
        complete = [r for r in range(self.rounds) if all((s, r) in rates for s in range(n))]
        first_window = next((k for k, x in enumerate(self.plan) if x[1] is not None), len(self.plan))
        result = {
            "rates": [[rates[(s, r)] for r in complete] for s in range(n)],
            "waits": [statistics.fmean([waits[(s, r)] for r in complete]) if complete else math.nan for s in range(n)],
            "warmup_s": self.marks[first_window] - self.marks[0] if len(self.marks) > first_window else math.nan,
            "peak_memory_mb": self._peak_mb(pl_module),
            "batch_size": self.samples[0] if self.samples else None,
            "steps": len(self.samples),
        }
        self.result = trainer.strategy.broadcast(result, src=0)


def _batch_size(batch: Any) -> int:
    try:
        return int(extract_batch_size(batch))
    except Exception:  # noqa: BLE001 - an exotic batch: count it as one sample
        return 1


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def _backend_flags() -> dict[str, Any]:
    return {
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "matmul_precision": torch.get_float32_matmul_precision(),
    }


def _set_backend_flags(flags: Mapping[str, Any]) -> None:
    torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    torch.backends.cudnn.deterministic = flags["cudnn_deterministic"]
    torch.use_deterministic_algorithms(flags["deterministic"], warn_only=flags["deterministic_warn_only"])
    torch.set_float32_matmul_precision(flags["matmul_precision"])


def _resolve_device(accelerator: Any) -> str:
    name = str(accelerator).lower() if accelerator is not None else "auto"
    if name in ("cuda", "gpu") or (name == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "cpu"


#: Precision values a Lightning ``Trainer`` accepts (``lightning_fabric``'s ``_PRECISION_INPUT``, 2.x).
PRECISIONS = (
    "32-true",
    "bf16-mixed",
    "16-mixed",
    "bf16-true",
    "16-true",
    "64-true",
    "transformer-engine",
    "transformer-engine-float16",
    "32",
    "16",
    "bf16",
    "64",
    32,
    16,
    64,
)


def check_precision(value: Any, where: str) -> None:
    """Raise ``ValueError`` naming the accepted values if ``value`` is not a precision Lightning accepts."""
    if value not in PRECISIONS or isinstance(value, bool):
        raise ValueError(
            f"{where}: precision {value!r} is not one Lightning accepts; use one of "
            f"{', '.join(repr(p) for p in PRECISIONS[:6])} (e.g. precisions=['32-true', 'bf16-mixed'])."
        )


def _precision_options(
    device: str, current: str, asked: Optional[Sequence[str]]
) -> tuple[list[str], list[Measurement]]:
    """Precisions to measure, and skipped ones with the reason."""
    if asked is not None:
        if isinstance(asked, (str, int)):
            raise TypeError(f"tune(precisions={asked!r}): expected a list of precisions, e.g. precisions=[{asked!r}].")
        for p in asked:
            check_precision(p, "tune(precisions=...)")
        if device != "cuda":
            # On a CPU Lightning runs "16-mixed" as bf16 autocast (with a warning the short fits would hide), so a
            # "16-mixed" row would measure bf16 under another name.
            fp16 = [p for p in asked if str(p) in ("16-mixed", "16")]
            if fp16:
                return [p for p in asked if p not in fp16], [
                    Measurement(
                        Candidate(precision=str(p)),
                        "precision",
                        skipped="Lightning runs 16-mixed as bf16-mixed on a CPU (float16 autocast is CUDA's); "
                        "measure 'bf16-mixed' instead",
                    )
                    for p in fp16
                ]
        return list(asked), []
    if device == "cuda":
        options = ["32-true", "16-mixed"]
        if torch.cuda.is_bf16_supported():
            options.insert(1, "bf16-mixed")
        return options, []
    if cpu_has_native_bf16():
        return ["32-true", "bf16-mixed"], []
    skipped = []
    if current != "bf16-mixed":
        skipped.append(
            Measurement(
                Candidate(precision="bf16-mixed"),
                "precision",
                skipped="this CPU has no native bf16 (AVX512-BF16/AMX): bf16 is emulated, many times slower than "
                "fp32; pass precisions=[...] to measure it",
            )
        )
    return ["32-true"], skipped


def _worker_options(loader: Any, asked: Union[None, bool, Sequence[int]]) -> tuple[list[int], Optional[str]]:
    """``num_workers`` values to measure, or why none are."""
    if asked is False:
        return [], "num_workers not tuned (num_workers=False)"
    why = can_rebuild(loader) if loader is not None else "the training loader could not be resolved"
    if why:
        return [], f"num_workers not tuned: {why}"
    if asked is not None and asked is not True:
        return sorted(set(int(n) for n in asked)), None
    cpus = available_cpus()
    return sorted({0, cpus // 4, cpus // 2, max(cpus - 1, 0)}), None


def _check_choices(channels_last: Any, compile: Any, num_workers: Any) -> None:
    """Raise ``TypeError``/``ValueError`` naming the fix for a ``channels_last``, ``compile`` or ``num_workers``
    argument of :func:`tune` of the wrong kind."""
    if not isinstance(channels_last, bool):
        raise TypeError(
            f"tune(channels_last={channels_last!r}): expected True (measure ChannelsLast on and off) "
            "or False (keep it as given)."
        )
    if compile is not None and not isinstance(compile, bool):
        raise TypeError(
            f"tune(compile={compile!r}): expected True, False or None (None: measure torch.compile on CUDA only)."
        )
    if num_workers is None or isinstance(num_workers, bool):
        return
    if isinstance(num_workers, int) or not isinstance(num_workers, (list, tuple, range, set, frozenset)):
        raise TypeError(
            f"tune(num_workers={num_workers!r}): expected a list of worker counts to measure, e.g. "
            f"num_workers=[{num_workers!r}], or False to keep the loader's, or None for the defaults."
        )
    bad = [n for n in num_workers if not isinstance(n, int) or isinstance(n, bool) or n < 0]
    if bad:
        raise ValueError(
            f"tune(num_workers={list(num_workers)!r}): worker counts must be integers >= 0; got "
            f"{', '.join(repr(n) for n in bad)}."
        )


def _training_loader(model: Any, train_dataloaders: Any, datamodule: Any) -> Any:
    """The training loader as Lightning would get it, or ``None`` (a ``CombinedLoader``, a dict...)."""
    if train_dataloaders is not None:
        return train_dataloaders
    source = datamodule if datamodule is not None else model
    hook = getattr(source, "train_dataloader", None)
    if hook is None:
        return None
    if datamodule is not None:
        datamodule.prepare_data()
        datamodule.setup("fit")
    try:
        return hook()
    except Exception:  # noqa: BLE001 - e.g. a model hook that needs self.trainer; then only Lightning builds it
        return None


def _is_one_shot(data: Any) -> bool:
    """Whether ``data`` is an iterator that a second pass would find empty (``iter(data) is data``)."""
    try:
        return data is not None and iter(data) is data
    except TypeError:
        return False


def _planned_steps(trainer_kwargs: Mapping[str, Any], loader: Any) -> Optional[int]:
    max_steps = trainer_kwargs.get("max_steps", -1)
    if max_steps is not None and max_steps > 0:
        return int(max_steps)
    epochs = trainer_kwargs.get("max_epochs")
    accumulate = trainer_kwargs.get("accumulate_grad_batches", 1) or 1
    try:
        per_epoch = len(loader)
    except TypeError:
        return None
    limit = trainer_kwargs.get("limit_train_batches")
    if isinstance(limit, int) and not isinstance(limit, bool):
        per_epoch = min(per_epoch, limit)
    elif isinstance(limit, float):
        per_epoch = int(per_epoch * limit)
    if epochs is None or epochs < 0:
        return None
    return max(1, int(epochs) * per_epoch // accumulate)


def _kept_callbacks(callbacks: Any) -> tuple[list[Any], bool]:
    """The user's callbacks that shape the training step (copied), and whether ChannelsLast was among them.

    Dropped: ChannelsLast (a factor here), EfficiencyReport, and callbacks that write files, log or stop
    (checkpoints, early stopping, LR monitors, progress bars, summaries).
    """
    if callbacks is None:
        return [], False
    if not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    kept, channels_last = [], False
    drop_names = (
        "Checkpoint",
        "EarlyStopping",
        "LearningRateMonitor",
        "ProgressBar",
        "ModelSummary",
        "DeviceStatsMonitor",
        "Timer",
    )
    for cb in callbacks:
        if isinstance(cb, ChannelsLast):
            channels_last = True
            continue
        if isinstance(cb, EfficiencyReport) or any(n in type(cb).__name__ for n in drop_names):
            continue
        try:
            kept.append(copy.deepcopy(cb))
        except Exception:  # noqa: BLE001 - an uncopyable callback: share it (it sees a few extra steps)
            kept.append(cb)
    return kept, channels_last


def _trainer_class(model: Any) -> Any:
    """The Trainer of the Lightning package the model belongs to (``lightning.pytorch`` or ``pytorch_lightning``)."""
    for package in LIGHTNING_PACKAGES:
        if isinstance(model, package.LightningModule):
            return package.Trainer
    raise TypeError(f"tune(): model must be a LightningModule, got {type(model).__name__}.")


def _with_loader(obj: Any, loader: Any) -> Any:
    """A shallow copy of a LightningModule/DataModule whose ``train_dataloader()`` returns ``loader``."""
    clone = copy.copy(obj)
    clone.train_dataloader = lambda: loader
    return clone


def tune(
    model: Any,
    train_dataloaders: Any = None,
    datamodule: Any = None,
    *,
    precisions: Optional[Sequence[str]] = None,
    channels_last: bool = True,
    compile: Optional[bool] = None,
    num_workers: Union[None, bool, Sequence[int]] = None,
    warmup_steps: int = 2,
    window_steps: int = 3,
    repeats: int = 3,
    planned_steps: Optional[int] = None,
    remeasure: bool = True,
    verbose: bool = True,
    **trainer_kwargs: Any,
) -> TuneResult:
    """Measure which settings train ``model`` fastest on this hardware, with its own data; change nothing.

    For each candidate a copy of ``model`` trains for ``warmup_steps + repeats * window_steps`` optimizer steps
    through a ``Trainer(**trainer_kwargs)`` (validation, logging and checkpoints off); training images/s is
    measured over each window of ``window_steps`` steps (data wait included). ``channels_last`` and
    ``num_workers`` are measured in pairs: one fit trains both settings, switching every window (``repeats + 1``
    pairs of adjacent windows; each switch followed by one untimed step, plus, for a switch of loader, as many as
    the batches its workers prepared while idle), and a change is kept if the pairs' geometric-mean gain is
    above 2% with a one-sided 95% lower bound above 1 (measured in pairs once more unless that holds or the
    upper bound is at most 1.02); separate short fits of the same settings differ by 10-15% on a busy CPU,
    adjacent windows share the machine's state. More ``num_workers`` than the loader has are not measured when
    the data wait of the current settings bounds their gain below 2% (unless you list them in ``num_workers``).
    The other factors are varied one at a time
    against the best so far and a change is kept only if it beats the spread of the repeated windows, or, when
    undecided (a gain above 2% but within that spread, or windows too noisy to say), if a second round measured
    back to back shows a gain
    (:func:`~lightning_efficient.functional.tuning.search`); a combination of several changes is confirmed
    against the current settings once more: in pairs when only channels_last and ``num_workers`` changed, else
    in separate fits (twice, in the reverse order the second time, when the first confirmation shows no gain but
    is not slower beyond the noise). A candidate that raises (an op unsupported in bf16, a compile
    error) is reported in the table and never chosen.

    Candidates: ``precision`` (``32-true``; ``bf16-mixed`` where the hardware runs it natively: CUDA with bf16,
    CPUs with AVX512-BF16/AMX; ``16-mixed`` on CUDA), ``channels_last`` on/off, ``torch.compile`` on/off
    (compile seconds reported and amortised over the planned run), and ``num_workers`` where the training
    loader can be rebuilt (a map-style ``DataLoader``).

    Args:
        model: your LightningModule (never trained or modified: copies are).
        train_dataloaders: the training ``DataLoader`` (or any iterable Lightning accepts), as for ``fit``.
        datamodule: a ``LightningDataModule``, as for ``fit`` (its batch hooks are used).
        precisions: precisions to try; default: those the hardware runs natively (see above).
        channels_last: try ``ChannelsLast`` on and off (``False``: keep as given).
        compile: try ``torch.compile``; ``None`` (default): on CUDA only, where compilation takes seconds and
            can pay off (on a 2-core CPU it takes ~45-60 s for ResNet-18, more than the whole tuning budget).
        num_workers: worker counts to try, each measured; ``None``: 0, a quarter, half and all but one of the
            CPUs (``[0, 1]`` on 2 CPUs), more than the loader's skipped when the data wait bounds their gain below
            2%; ``False``: keep the loader's.
        warmup_steps: untimed optimizer steps first (allocation, kernel selection, compilation).
        window_steps: optimizer steps per timed window.
        repeats: timed windows per candidate; their spread is the noise a gain must beat.
        planned_steps: optimizer steps of the real run, to amortise compilation; default: from ``max_steps`` or
            ``max_epochs`` x steps per epoch in ``trainer_kwargs``.
        remeasure: measure an undecided value (a gain above 2% but within the noise, or windows spread by more
            than 30%) once more, back to back with the settings it would replace, and keep it only if a gain
            shows again (two more short fits per such value, and per undecided confirmation); ``False``: keep
            the simpler settings at once.
        verbose: print the table when done (rank 0).
        **trainer_kwargs: the ``Trainer`` arguments of your real run (``accelerator``, ``devices``,
            ``strategy``, ``precision``, ``callbacks``, ``max_epochs``...); ``precision`` and ``ChannelsLast``
            among ``callbacks`` are the current settings that candidates are compared with.

    Returns:
        A :class:`~lightning_efficient.functional.tuning.TuneResult`: the table, the chosen settings,
        ``recipe_kwargs()``, ``prepare_model(model)``, ``dataloader(loader)`` and ``to_json()``.

    Raises:
        TypeError: ``model`` is not a LightningModule, a ``trainer_kwargs`` key no Trainer takes, or
            ``precisions`` given as one string instead of a list.
        ValueError: a step count below 1, a precision Lightning does not accept (in ``precisions`` or
            ``precision=``), or both/neither data sources with a model that has no ``train_dataloader``.
        RuntimeError: the current settings themselves fail to train (the message carries the error, and for
            uint8 batches, that the callback converting them belongs in ``callbacks=``).

    Warns:
        UserWarning: the windows of the user's own settings varied by more than 30%, or the same settings
            measured more than 30% apart in two fits (a busy machine): the choice cannot tell smaller
            differences apart; the note is also in ``TuneResult.notes``.

    Example::

        result = tune(model, train_loader, max_epochs=10)
        trainer = pl.Trainer(max_epochs=10, **recipe(tune=result))
        trainer.fit(result.prepare_model(model), result.dataloader(train_loader))
    """
    started = time.perf_counter()
    if "precision" in trainer_kwargs and trainer_kwargs["precision"] is not None:
        check_precision(trainer_kwargs["precision"], "tune()")
    _check_choices(channels_last, compile, num_workers)
    trials = Trials(
        model,
        train_dataloaders,
        datamodule,
        warmup_steps=warmup_steps,
        window_steps=window_steps,
        repeats=repeats,
        **trainer_kwargs,
    )
    precisions, skipped = _precision_options(trials.device, trials.current.precision, precisions)
    workers, workers_note = _worker_options(trials.loader, num_workers)
    if workers_note and num_workers not in (None, True, False) and _is_global_zero():
        warnings.warn(
            f"tune(num_workers={list(num_workers)!r}): the worker counts you listed are not measured "
            f"({workers_note}). Set num_workers where you build the loader.",
            UserWarning,
            stacklevel=2,
        )
    current = trials.current if workers else replace(trials.current, num_workers=None)
    if compile is None:
        compile = trials.device == "cuda"
    options: dict[str, Sequence[Any]] = {
        "precision": precisions,
        "channels_last": [False, True] if channels_last else [],
        "num_workers": workers,
        "compile": [False, True] if compile else [],
    }
    notes = [workers_note] if workers_note else []
    if not compile:
        notes.append("torch.compile not measured (compile=None measures it on CUDA only; pass compile=True).")
    planned = planned_steps if planned_steps is not None else _planned_steps(trainer_kwargs, trials.loader)
    try:
        planned_images = planned * batch_size_guess(trials.loader) if planned else None
        chosen, table, reasons = search(
            current,
            options,
            trials,
            planned_images=planned_images,
            skipped=skipped,
            remeasure=remeasure,
            measure_pair=trials.pair,
            bound_workers=num_workers is None or num_workers is True,
        )
    except RuntimeError as err:
        if any(word in str(err) for word in ("Byte", "uint8", "unsigned char")):
            raise RuntimeError(
                f"{err}\n  The batches look like uint8 images (e.g. FastImageFolder + uint8_collate): pass the "
                "callback that turns them into floats to tune() as to your Trainer, e.g. "
                "tune(model, loader, callbacks=[GPUAugmentation(...)], ...)."
            ) from err
        raise
    finally:
        trials.restore()
    text = noise_note(table, current)
    if text:
        notes.append(text)
        if _is_global_zero():
            warnings.warn(f"tune(): {text}", UserWarning, stacklevel=2)
    tuning_s = time.perf_counter() - started
    chosen_m = next((m for m in reversed(table) if m.ok and m.candidate == chosen), None)
    cost = tuning_cost_note(tuning_s, planned, trials.batch_size, chosen_m.images_per_s if chosen_m else math.nan)
    if cost:
        notes.append(cost)
    result = TuneResult(
        current=current,
        chosen=chosen,
        measurements=table,
        reasons=reasons,
        planned_steps=planned,
        batch_size=trials.batch_size,
        tuning_s=tuning_s,
        machine=machine_text(trials.device),
        notes=notes,
    )
    if verbose and _is_global_zero():
        print(result)
    return result


class Trials:
    """Measures candidate settings by short real fits on copies of the user's model (the ``measure`` of
    :func:`~lightning_efficient.functional.tuning.search`; :func:`tune` uses it, and so can a benchmark that
    measures every candidate).

    Each call ``trials(candidate, stage)`` builds a ``Trainer`` with the user's ``trainer_kwargs`` and the
    candidate's precision and ``ChannelsLast``, trains a deep copy of ``model`` (compiled in place if asked) on
    the user's data (rebuilt with the candidate's ``num_workers`` if any) for
    ``warmup_steps + repeats * window_steps`` optimizer steps, and returns a
    :class:`~lightning_efficient.functional.tuning.Measurement`; an exception becomes ``Measurement.error``.
    The global RNG states (torch, CUDA, Python, NumPy) and backend flags (cuDNN, deterministic algorithms,
    float32 matmul precision) are set back to their values at construction after every call.

    Args:
        model, train_dataloaders, datamodule: as for ``Trainer.fit``.
        warmup_steps, window_steps, repeats: as for :func:`tune`.
        **trainer_kwargs: the user's ``Trainer`` arguments (see :func:`tune`).

    Attributes:
        current: the user's settings (precision, ``ChannelsLast`` among the callbacks, the loader's workers).
        loader: the training loader as resolved (``None`` if only Lightning can build it).
        device: ``"cuda"`` or ``"cpu"``.
        batch_size: images per batch, once measured.

    Raises:
        TypeError: ``model`` is not a LightningModule, or a ``trainer_kwargs`` key no Trainer takes.
        ValueError: a step count below 1, both data sources, or none.
    """

    def __init__(
        self,
        model: Any,
        train_dataloaders: Any = None,
        datamodule: Any = None,
        *,
        warmup_steps: int = 2,
        window_steps: int = 3,
        repeats: int = 3,
        **trainer_kwargs: Any,
    ) -> None:
        self.trainer_cls = _trainer_class(model)
        for name, value in (("warmup_steps", warmup_steps), ("window_steps", window_steps), ("repeats", repeats)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"tune({name}={value!r}): expected an integer >= 1.")
        if any(isinstance(train_dataloaders, package.LightningDataModule) for package in LIGHTNING_PACKAGES):
            if datamodule is not None:
                raise ValueError(
                    "tune(): pass one LightningDataModule, as train_dataloaders or as datamodule, not "
                    "both (as for Trainer.fit)."
                )
            train_dataloaders, datamodule = None, train_dataloaders  # tune(model, dm), as trainer.fit(model, dm)
        if train_dataloaders is not None and datamodule is not None:
            raise ValueError("tune(): pass train_dataloaders or datamodule, not both (as for Trainer.fit).")
        check_trainer_kwargs(trainer_kwargs, "tune()", [self.trainer_cls])
        self.model, self.train_dataloaders, self.datamodule = model, train_dataloaders, datamodule
        self.warmup_steps, self.window_steps, self.repeats = warmup_steps, window_steps, repeats
        # Saved before the data hooks run: train_dataloader() or setup() may draw from the global RNG.
        self._rng, self._flags = _rng_state(), _backend_flags()
        try:
            self.loader = _training_loader(model, train_dataloaders, datamodule)
        finally:
            self.restore()
        if self.loader is None and train_dataloaders is None and datamodule is None:
            raise ValueError(
                "tune(): no training data: pass train_dataloaders= or datamodule=, or define "
                "train_dataloader() in the model."
            )
        if _is_one_shot(self.loader):
            raise ValueError(
                f"tune(): the training data is a one-shot iterator ({type(self.loader).__name__}): "
                "tuning would use it up before your fit; pass a DataLoader or another iterable that "
                "can be iterated again."
            )
        self.device = _resolve_device(trainer_kwargs.get("accelerator", "auto"))
        self.user_callbacks, current_cl = _kept_callbacks(trainer_kwargs.get("callbacks"))
        rebuildable = self.loader is not None and can_rebuild(self.loader) is None
        self.current = Candidate(
            precision=str(trainer_kwargs.get("precision") or "32-true"),
            channels_last=current_cl,
            num_workers=self.loader.num_workers if rebuildable else None,
        )
        self.fixed = {k: v for k, v in trainer_kwargs.items() if k not in _CONTROLLED}
        self.steps_needed = warmup_steps + repeats * window_steps
        self.batch_size: Optional[int] = None

    def restore(self) -> None:
        """Set the global RNG states and backend flags back to their values at construction."""
        _set_rng_state(self._rng)
        _set_backend_flags(self._flags)

    def _loader(self, num_workers: int) -> Any:
        """The user's training loader, rebuilt with ``num_workers`` if it has another count."""
        if num_workers == getattr(self.loader, "num_workers", None):
            return self.loader
        return with_num_workers(self.loader, num_workers)

    def _data(self, net: Any, num_workers: Optional[int], loader: Any = None) -> tuple[Any, dict[str, Any]]:
        """The model to fit and ``fit``'s data arguments: the user's data, or ``loader`` in its place, or the
        user's loader rebuilt with ``num_workers``."""
        if loader is None and num_workers is not None:
            rebuilt = self._loader(num_workers)
            loader = None if rebuilt is self.loader else rebuilt
        if loader is not None:
            if self.train_dataloaders is not None:
                return net, {"train_dataloaders": loader}
            if self.datamodule is not None:
                return net, {"datamodule": _with_loader(self.datamodule, loader)}
            return _with_loader(net, loader), {}
        if self.train_dataloaders is not None:
            return net, {"train_dataloaders": self.train_dataloaders}
        if self.datamodule is not None:
            return net, {"datamodule": self.datamodule}
        return net, {}

    def _trainer(self, precision: str, callbacks: list[Any], steps: int) -> Any:
        """A Trainer for one short measuring fit of ``steps`` optimizer steps, with the user's other arguments."""
        with no_lightning_info():
            return self.trainer_cls(
                precision=precision,
                callbacks=callbacks,
                max_steps=steps,
                # Bounded: every epoch that yields a batch ends with an optimizer step, so max_steps comes first
                # unless the data runs dry (an exhausted iterator gives empty epochs: -1 would never end).
                max_epochs=steps,
                limit_val_batches=0,
                num_sanity_val_steps=0,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                **self.fixed,
            )

    def _fit(self, trainer: Any, net: Any, data: Mapping[str, Any]) -> None:
        """``trainer.fit(net, **data)`` from the RNG state at construction, without Lightning's chatter."""
        self.restore()
        with no_lightning_info(), quiet_lightning(), warnings.catch_warnings():
            # Lightning's advice about these short fits without validation or logger is not the user's to act on;
            # their own fit shows every warning.
            warnings.filterwarnings(
                "ignore", category=UserWarning, module=r"(pytorch_lightning|lightning\.pytorch)(\.|$)"
            )
            trainer.fit(net, **data)

    def __call__(self, candidate: Candidate, stage: str) -> Measurement:
        probe = _Probe(self.warmup_steps, self.window_steps, self.repeats)
        callbacks = [copy.deepcopy(cb) for cb in self.user_callbacks] + [probe]
        if candidate.channels_last:
            callbacks.append(ChannelsLast())
        try:
            trainer = self._trainer(candidate.precision, callbacks, self.steps_needed)
            net = copy.deepcopy(self.model)
            if candidate.compile:
                compile_submodules(net)
            self._fit(trainer, *self._data(net, candidate.num_workers))
        except Exception as err:  # noqa: BLE001 - a failing candidate is reported, never chosen
            return Measurement(candidate, stage, error=_error_text(err))
        finally:
            self.restore()
        r = probe.result or {}
        rates = tuple(x for x in r.get("rates", []) if math.isfinite(x))
        if not rates or r.get("steps", 0) < self.steps_needed:  # fewer windows than asked: no noise estimate
            return Measurement(
                candidate,
                stage,
                error=f"the loader gave {r.get('steps', 0)} batches; "
                f"{self.steps_needed} are needed (warmup_steps + repeats x window_steps)",
            )
        self.batch_size = self.batch_size or r.get("batch_size")
        compile_s = max(0.0, r["warmup_s"] - self.warmup_steps * r["step_s"]) if candidate.compile else math.nan
        return Measurement(
            candidate,
            stage,
            window_images_per_s=rates,
            warmup_s=r["warmup_s"],
            peak_memory_mb=r["peak_memory_mb"],
            compile_s=compile_s,
            data_wait=r.get("data_wait", math.nan),
        )

    def interleave(
        self, candidates: Sequence[Candidate], stages: Sequence[str], rounds: Optional[int] = None
    ) -> Optional[list[Measurement]]:
        """Measure candidates that differ only in :data:`SWITCHABLE` factors (channels_last, ``num_workers``) in
        one fit, window by window in alternation (:class:`_InterleavedProbe`: ``rounds`` rounds, default
        ``repeats + 1``, of one ``window_steps``-step window each): window ``r`` of every candidate ran in round
        ``r``, side by side, so that any two of them pair up (:func:`paired_gain`).

        Different ``num_workers`` are served by one loader per worker count, rebuilt from the user's
        (:class:`_SwitchingLoader`); each switch to another loader is followed by as many untimed steps as that
        loader's workers had batches ready.

        Returns:
            One :class:`Measurement` per candidate, labelled with ``stages``, in the same order; ``None`` where
            they cannot be measured in one fit: other differences (precision needs another Trainer),
            compilation (a layout change would recompile), worker counts of a loader that cannot be rebuilt,
            or more than one process (DDP lays out its gradient buckets once). A fit that raises is reported
            as the first candidate's error, the others as not measured.
        """
        first = candidates[0]
        if any(c.compile or set(c.differences(first)) - set(SWITCHABLE) for c in candidates):
            return None
        workers = sorted({c.num_workers for c in candidates}, key=str)
        switching = len(workers) > 1
        if switching and (None in workers or self.loader is None or can_rebuild(self.loader) is not None):
            return None
        loaders = {w: self._loader(w) for w in workers} if switching else {}
        probe = _InterleavedProbe(
            candidates,
            self.warmup_steps,
            self.window_steps,
            rounds if rounds is not None else self.repeats + 1,
            {w: _head_start(loader) for w, loader in loaders.items()},
        )
        data = _SwitchingLoader(loaders, probe.data_workers) if switching else None
        callbacks = [copy.deepcopy(cb) for cb in self.user_callbacks] + [probe]
        try:
            trainer = self._trainer(first.precision, callbacks, probe.steps_needed)
            if trainer.world_size > 1:
                return None
            self._fit(trainer, *self._data(copy.deepcopy(self.model), first.num_workers, data))
        except Exception as err:  # noqa: BLE001 - a failing candidate is reported, never chosen
            return [Measurement(first, stages[0], error=_error_text(err))] + [
                Measurement(c, s, skipped="not measured: the interleaved fit failed (the row above)")
                for c, s in zip(candidates[1:], stages[1:])
            ]
        finally:
            if data is not None:
                data.close()
            self.restore()
        r = probe.result or {}
        if r.get("steps", 0) < probe.steps_needed or not all(r.get("rates") or [[]]):
            why = (
                f"the loader gave {r.get('steps', 0)} batches; {probe.steps_needed} are needed to measure "
                f"{len(candidates)} settings in one fit"
            )
            return [Measurement(c, s, error=why) for c, s in zip(candidates, stages)]
        self.batch_size = self.batch_size or r.get("batch_size")
        return [
            Measurement(
                c,
                s,
                window_images_per_s=tuple(rates),
                data_wait=wait,
                warmup_s=r["warmup_s"],
                peak_memory_mb=r["peak_memory_mb"],
            )
            for c, s, rates, wait in zip(candidates, stages, r["rates"], r["waits"])
        ]

    def pair(self, new: Candidate, old: Candidate, stage: str) -> Optional[tuple[Measurement, Measurement]]:
        """:meth:`interleave` for two candidates (``repeats + 1`` pairs of windows); the ``measure_pair`` of
        :func:`~lightning_efficient.functional.tuning.search`.

        Returns ``(new_measurement, old_measurement)`` with stages ``"<stage> (paired)"`` and
        ``"<stage> (paired baseline)"``, window ``i`` of one next to window ``i`` of the other; ``None`` where
        they cannot be measured in one fit (see :meth:`interleave`).
        """
        found = self.interleave([new, old], (f"{stage} (paired)", f"{stage} (paired baseline)"))
        return None if found is None else (found[0], found[1])


def _error_text(err: BaseException) -> str:
    """``"ExceptionType: first line of the message"``, at most 300 characters, for a failed candidate's row."""
    return f"{type(err).__name__}: {err}".split("\n")[0][:300]


def noise_note(table: Sequence[Measurement], current: Candidate) -> Optional[str]:
    """A warning text if the measurements are too noisy to trust, else ``None``: the windows of the user's own
    settings spread by more than :data:`NOISY_SPREAD`, or two measurements of the same settings (e.g. a second
    round) differ by more than that."""
    own = [m for m in table if m.ok and m.candidate == current]
    noisiest = max(own, key=lambda m: m.spread, default=None)
    spread = noisiest.spread if noisiest is not None else 0.0
    medians: dict[Candidate, list[float]] = {}
    for m in table:
        if m.ok:
            medians.setdefault(m.candidate, []).append(m.images_per_s)
    drift = max((max(v) / min(v) - 1 for v in medians.values() if len(v) > 1 and min(v) > 0), default=0.0)
    if spread <= NOISY_SPREAD and drift <= NOISY_SPREAD:
        return None
    row = f" (the {noisiest.stage!r} row)" if noisiest is not None and noisiest.stage != "current" else ""
    seen = (
        f"windows of your own settings{row} varied by {spread:.0%}"
        if spread >= drift
        else f"the same settings measured {drift + 1:.2f}x apart in two fits"
    )
    paired = any("(paired" in m.stage for m in table)
    return (
        f"the machine is noisy: {seen} (something else may be running); differences below that are not told "
        f"apart"
        + (" between separate fits (what was measured in pairs within one fit is less affected)" if paired else "")
        + ". Rerun tune() on a quiet machine, or raise window_steps/repeats."
    )


def batch_size_guess(loader: Any) -> int:
    """Images per batch of ``loader`` where it says (``batch_size`` or its batch sampler's), else 1."""
    size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return int(size) if size else 1


def machine_text(device: str) -> str:
    """E.g. ``"cpu: AMD EPYC, 2 CPUs, torch 2.9.1"`` or ``"cuda: NVIDIA H200, 16 CPUs, torch 2.9.1"``."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as cpuinfo:
                for line in cpuinfo:
                    if line.startswith("model name"):
                        name = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    return f"{device}: {name}, {available_cpus()} CPUs, torch {torch.__version__}"


def _is_global_zero() -> bool:
    return (
        not (torch.distributed.is_available() and torch.distributed.is_initialized())
        or torch.distributed.get_rank() == 0
    )
