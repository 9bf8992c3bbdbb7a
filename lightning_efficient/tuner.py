"""``tune()``: measure the practices on the user's own model, data and hardware, within a time budget.

The rule lives in :mod:`lightning_efficient.functional.tuning`; this module runs the measurements it asks for as
short real fits of copies of the user's model: channels_last and ``num_workers`` switched in place inside one fit
(:class:`~lightning_efficient.tune_probe.Probe`), precision and compilation (and everything under DDP) as
alternating separate fits. The user's model, callbacks and data are never trained or modified, and every RNG and
backend flag is restored after each fit.
"""

from __future__ import annotations

import contextlib
import copy
import random
import time
import warnings
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np
import torch
from lightning_utilities.core.rank_zero import rank_zero_only, rank_zero_warn

from lightning_efficient.callbacks.base import LIGHTNING_PACKAGES
from lightning_efficient.callbacks.channels_last import ChannelsLast
from lightning_efficient.callbacks.efficiency_report import EfficiencyReport
from lightning_efficient.callbacks.gpu_augmentation import GPUAugmentation
from lightning_efficient.callbacks.gpu_decode import GPUDecode
from lightning_efficient.callbacks.stepwise_lr import StepwiseLR
from lightning_efficient.data.loader import available_cpus, can_rebuild, suggest_loader_kwargs, with_num_workers
from lightning_efficient.functional.tuning import (
    Candidate,
    MeasurementError,
    Pair,
    Request,
    Window,
    compile_submodules,
    search,
)
from lightning_efficient.precision import check_precision, cpu_has_native_bf16, recommended_precision
from lightning_efficient.quiet import no_lightning_info, quiet_lightning
from lightning_efficient.recipe import check_trainer_kwargs
from lightning_efficient.tune_probe import Probe, Step, SwitchingLoader, head_start, rate
from lightning_efficient.tune_result import Store, TuneResult, fingerprint

__all__ = ["CALLBACKS", "TuneResult", "tune"]

WARMUP, WINDOW = 2, 2  #: untimed steps at the start of a fit, and steps per timing window
COMPILE_GUESS_S = 30.0  #: seconds a first compilation is assumed to take when budgeting it (unknown before it runs)
#: Trainer arguments of the measuring fits that tune() sets itself (the user's others pass through).
CONTROLLED = {"max_epochs", "min_epochs", "max_steps", "min_steps", "max_time", "limit_train_batches", "logger"}
CONTROLLED |= {"limit_val_batches", "num_sanity_val_steps", "val_check_interval", "check_val_every_n_epoch"}
CONTROLLED |= {"enable_checkpointing", "enable_progress_bar", "enable_model_summary", "precision", "callbacks"}
CONTROLLED |= {"fast_dev_run", "profiler", "barebones"}

#: The user's callbacks in the measuring fits, by type: the first class here that a callback is an instance of (in
#: the Lightning package of its Trainer) decides. Kept: what changes the real run's per-step cost; dropped: what
#: writes, stops, searches or logs. A callback of no listed type is kept.
CALLBACKS: tuple[tuple[Union[str, type], bool, str], ...] = (
    ("Checkpoint", False, "writes checkpoints"),  # ModelCheckpoint, OnExceptionCheckpoint
    ("EarlyStopping", False, "stops the run"),
    ("Timer", False, "stops the run"),
    ("SpikeDetection", False, "stops the run"),
    ("LearningRateFinder", False, "searches (its own range test)"),
    ("BatchSizeFinder", False, "searches (its own batch sizes)"),
    ("LearningRateMonitor", False, "logs"),
    ("ProgressBar", False, "logs"),  # TQDMProgressBar, RichProgressBar
    ("ModelSummary", False, "logs"),  # RichModelSummary
    ("DeviceStatsMonitor", False, "logs"),
    ("ThroughputMonitor", False, "logs"),
    ("BasePredictionWriter", False, "writes predictions"),
    ("StochasticWeightAveraging", False, "averages at epoch ends and replaces the LR schedule"),
    ("WeightAveraging", True, "updates an average after optimizer steps"),  # EMAWeightAveraging
    ("ModelPruning", True, "pruning masks change the step's cost"),
    ("BaseFinetuning", True, "frozen layers change the step's cost"),  # BackboneFinetuning
    ("GradientAccumulationScheduler", True, "changes the optimizer steps per batch"),
    (StepwiseLR, False, "sets learning rates, and the measuring fits leave LR schedulers out"),
    (EfficiencyReport, False, "measures and reports"),
    (GPUDecode, True, "decodes on the device"),
    (GPUAugmentation, True, "augments on the device"),
    (ChannelsLast, False, "a factor tune() measures itself"),
)


def kept_callbacks(callbacks: Any, package: Any) -> tuple[list[Any], list[str]]:
    """The user's callbacks for the measuring fits (:data:`CALLBACKS`), and the names of the types dropped."""
    kept, dropped = [], []
    for cb in callbacks if isinstance(callbacks, (list, tuple)) else [callbacks] if callbacks else []:
        types = [(getattr(package.callbacks, c, None) if isinstance(c, str) else c, keep) for c, keep, _ in CALLBACKS]
        keep = next((k for cls, k in types if cls is not None and isinstance(cb, cls)), True)
        if keep:
            kept.append(cb)
        elif not isinstance(cb, ChannelsLast):  # ChannelsLast is a factor, not left out
            dropped.append(type(cb).__name__)
    return kept, dropped


@contextlib.contextmanager
def _same_state() -> Iterator[None]:
    """Every RNG (torch and CUDA by ``torch.random.fork_rng``, Python, NumPy) and backend flag as before."""
    cudnn, det = torch.backends.cudnn, torch.are_deterministic_algorithms_enabled()
    flags = cudnn.benchmark, cudnn.deterministic, torch.is_deterministic_algorithms_warn_only_enabled()
    py, npy, matmul = random.getstate(), np.random.get_state(), torch.get_float32_matmul_precision()
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=cuda):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_float32_matmul_precision(matmul)
        cudnn.benchmark, cudnn.deterministic = flags[:2]
        torch.use_deterministic_algorithms(det, warn_only=flags[2])


class _Trials:
    """The measurements :func:`search` asks for, on copies of the user's model with the user's data."""

    def __init__(self, model: Any, data: dict[str, Any], loader: Any, kwargs: dict[str, Any], package: Any) -> None:
        self.model, self.data, self.loader, self.package = model, data, loader, package
        self.kept, self.dropped = kept_callbacks(kwargs.get("callbacks"), package)
        self.fixed = {k: v for k, v in kwargs.items() if k not in CONTROLLED}
        self.loaders: dict[int, Any] = {}
        self.layouts, self.workers = True, []  # channels_last measured or in use; the worker counts measured
        self.world_size, self.overhead_s, self.serial, self.started = 1, 0.0, 0, time.perf_counter()

    def switchable(self, req: Request) -> bool:
        """Whether one fit switches between ``req.new`` and ``req.old``: one process, one precision, no compilation,
        and a rebuildable loader where the worker counts differ."""
        new, old = req.new, req.old
        rebuild = new.num_workers == old.num_workers or (self.loader is not None and not can_rebuild(self.loader))
        return self.world_size == 1 and new.precision == old.precision and not (new.compile or old.compile) and rebuild

    def pair_cost(self, req: Request, step_s: float) -> float:
        """Estimated seconds of a first pair of ``req``'s kind."""
        if self.switchable(req):
            return (2 * WINDOW + 1 + head_start(self._loader(req.new.num_workers))) * step_s
        return 2 * (self.overhead_s + (WARMUP + WINDOW) * step_s) + COMPILE_GUESS_S * req.new.compile

    def _loader(self, workers: Optional[int]) -> Any:
        if workers is None or workers == getattr(self.loader, "num_workers", None):
            return self.loader
        return self.loaders.setdefault(workers, with_num_workers(self.loader, workers))

    def plan(self, req: Request, side: Optional[Candidate]) -> list[Step]:
        """The steps of ``req``, after steps of ``side`` (``None``: the start of a fit, so a warm-up first)."""
        self.serial += 1
        if req.kind == "baseline":
            return [(req.new, None)] * WARMUP + [(req.new, (self.serial, "base", 0))] * (WINDOW + 1)
        order = (("old", req.old), ("new", req.new))[:: 1 if req.index % 2 == 0 else -1]
        steps: list[Step] = [] if side is not None else [(order[0][1], None)] * WARMUP
        for name, cand in order:
            if side is not None and cand != side:
                switch = cand.num_workers != side.num_workers
                steps += [(cand, None)] * (1 + (head_start(self._loader(cand.num_workers)) if switch else 0))
            steps, side = steps + [(cand, (self.serial, name, req.index))] * WINDOW, cand
        return steps

    def fit(self, plan: list[Step], serve: Any, switching: bool = False) -> Probe:
        """One measuring fit of a copy of the model, through ``plan`` and ``serve``'s further steps (``switching``:
        drawing each batch from the loader of its step's ``num_workers``)."""
        first, workers = plan[0][0], ({*self.workers, plan[0][0].num_workers} if switching else set()) - {None}
        probe, net = Probe(plan, serve, self._loader(first.num_workers), self.layouts), copy.deepcopy(self.model)
        if first.compile:
            compile_submodules(net)
        loader = self._loader(first.num_workers)
        if len(workers) > 1:
            loader = SwitchingLoader({w: self._loader(w) for w in workers}, probe.workers)
        data = self.data if loader is self.loader else self._with_loader(net, loader)
        logger = __import__(f"{self.package.__name__}.loggers.logger", fromlist=["_"]).DummyLogger()
        with no_lightning_info(), quiet_lightning(), warnings.catch_warnings(), _same_state():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"(pytorch_lightning|lightning\.pytorch)")
            trainer = self.package.Trainer(
                precision=first.precision,
                callbacks=[*map(copy.deepcopy, self.kept), probe],
                max_epochs=10**4,
                logger=logger,
                limit_val_batches=0,
                num_sanity_val_steps=0,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                **self.fixed,
            )
            self.world_size, started = trainer.world_size, time.perf_counter()
            trainer.fit(data.get("model", net), **{k: v for k, v in data.items() if k != "model"})
        if probe.plan:
            raise MeasurementError(
                f"the training data ran out after {len(probe.tags)} batches; tune() needs "
                f"{len(probe.tags) + len(probe.plan)} (pass a longer loader)"
            )
        steps_s = sum(row[0] for row in probe.timeline.timer.rows)  # type: ignore[attr-defined]
        self.overhead_s = max(0.0, time.perf_counter() - started - steps_s)
        return probe

    def _with_loader(self, net: Any, loader: Any) -> dict[str, Any]:
        """``fit``'s arguments with ``loader`` as the training data, however the user gave theirs."""
        if "train_dataloaders" in self.data:
            return {"train_dataloaders": loader}
        clone = copy.copy(self.data.get("datamodule", net))
        clone.train_dataloader = lambda: loader
        return {"datamodule": clone} if "datamodule" in self.data else {"model": clone}

    def answer(self, req: Request, windows: dict, planned: Any) -> Union[Window, Pair]:
        """The :class:`Window` or :class:`Pair` of ``req`` from a probe's windows."""
        mine = {k[1]: w for k, w in windows.items() if isinstance(k, tuple) and k[0] == self.serial}
        elapsed = windows["elapsed"] - self.started
        if req.kind == "pair":
            return Pair(rate(mine["new"]), rate(mine["old"]), elapsed)
        steps, base = sorted(mine["base"][3]), mine["base"]
        batch, per_batch = round(base[0] / len(base[3])), windows["steps_per_batch"]
        return Window(steps[len(steps) // 2], base[2] / base[1], batch, elapsed, planned(per_batch), per_batch)

    def separate(self, req: Request) -> Pair:
        """One pair as two separate fits (``old`` first for an even ``index``), each a warm-up and a window."""
        rates, warm, got = {}, {}, []
        for cand in (req.old, req.new)[:: 1 if req.index % 2 == 0 else -1]:
            self.serial += 1
            tags = (self.serial, "warm", 0), (self.serial, "w", 0)
            self.fit([(cand, tags[0])] * WARMUP + [(cand, tags[1])] * WINDOW, got.append)
            rates[cand], warm[cand] = rate(got[-1][tags[1]]), got[-1][tags[0]][1]
        return Pair(rates[req.new], rates[req.old], got[-1]["elapsed"] - self.started, warm[req.new], warm[req.old])

    def run(self, gen: Any, planned: Any) -> Any:
        """Drive :func:`search` to its end: in one fit while its requests switch in place, else separate fits."""
        req = next(gen)
        try:
            while True:
                if req.kind == "baseline" or self.switchable(req):
                    req = self._in_fit(gen, req, planned)
                    continue
                try:
                    answer = self.separate(req)
                except Exception as err:  # noqa: BLE001 - a failing candidate is reported, never chosen
                    req = gen.throw(MeasurementError(_error_text(err)))
                else:
                    req = gen.send(answer)
        except StopIteration as stop:
            return stop.value

    def _in_fit(self, gen: Any, req: Request, planned: Any) -> Request:
        """Serve ``req``, and the switchable requests after it, in one fit; returns the next request."""
        state: dict[str, Any] = {"req": req, "stop": None}

        def serve(windows: dict) -> Optional[list[Step]]:
            done = state["req"]
            try:
                state["req"] = nxt = gen.send(self.answer(done, windows, planned))
            except StopIteration as stop:
                state["stop"] = stop
                return None
            last = done.new if done.kind == "baseline" or done.index % 2 == 0 else done.old
            return self.plan(nxt, last) if self.switchable(nxt) else None

        try:
            self.fit(self.plan(req, None), serve, switching=True)
        except Exception as err:  # noqa: BLE001 - a failing candidate is reported, never chosen
            if state["req"].kind == "baseline":
                raise _current_failed(err, state["req"].new) from err
            return gen.throw(MeasurementError(_error_text(err)))
        if state["stop"] is not None:
            raise state["stop"]
        return state["req"]


def _error_text(err: BaseException) -> str:
    """``"ExceptionType: first line of the message"``, at most 300 characters."""
    return f"{type(err).__name__}: {err}".split("\n")[0][:300]


def _current_failed(err: BaseException, current: Candidate) -> RuntimeError:
    text = f"tune(): the current settings ({current.label()}) fail to train: {_error_text(err)}"
    if any(word in str(err) for word in ("Byte", "uint8", "unsigned char")):
        text += (
            "\n  The batches look like uint8 images (e.g. FastImageFolder + uint8_collate): pass the callback that "
            "turns them into floats to tune() as to your Trainer, e.g. callbacks=[GPUAugmentation(...)]."
        )
    return RuntimeError(text)


def _training_loader(model: Any, train_dataloaders: Any, datamodule: Any) -> Any:
    """The training loader as Lightning would get it, or ``None`` where only the Trainer can build it."""
    if train_dataloaders is not None:
        return train_dataloaders
    if datamodule is not None:
        datamodule.prepare_data()
        datamodule.setup("fit")
    try:
        return (datamodule or model).train_dataloader()
    except Exception:  # noqa: BLE001 - e.g. a hook that needs self.trainer, or none at all
        return None


def _options(device: str, current: Candidate, asked: dict[str, Any], loader: Any) -> tuple[dict, dict, list[str]]:
    """The values to try per factor, ``recipe()``'s default of each (where it is among them), and notes."""
    notes, precisions, workers = [], asked["precisions"], asked["num_workers"]
    if precisions is None:
        native = torch.cuda.is_bf16_supported() if device == "cuda" else cpu_has_native_bf16()
        precisions = ["32-true"] + ["bf16-mixed"] * native + ["16-mixed"] * (device == "cuda")
        if not native:
            notes.append("bf16-mixed not measured: emulated on this CPU (no AVX512-BF16/AMX); list it among the precisions to measure it")
    elif device != "cuda" and {"16-mixed", "16"} & {str(p) for p in precisions}:
        notes.append("16-mixed not measured: Lightning runs it as bf16-mixed on a CPU (measure 'bf16-mixed')")
        precisions = [p for p in precisions if str(p) not in ("16-mixed", "16")]
    why = can_rebuild(loader) if loader is not None else "the training loader is built inside the Trainer"
    if workers is not False and why:
        notes.append(f"num_workers not measured: {why}")
        if workers not in (None, True):
            rank_zero_warn(f"tune(num_workers={list(workers)}): not measured ({why}); set num_workers in your loader.")
    cpus = available_cpus()
    listed = workers not in (None, True, False) and not why
    counts = (
        sorted(set(workers if listed else {0, cpus // 4, cpus // 2, max(cpus - 1, 0)}))
        if workers is not False and not why
        else []
    )
    compiled = asked["compile"] if asked["compile"] is not None else device == "cuda"
    if not compiled:
        notes.append("torch.compile not measured (by default on CUDA only; ask for compile to measure it)")
    options = {
        "precision": list(dict.fromkeys([current.precision, *precisions])),
        "num_workers": counts,
        "channels_last": [False, True] * asked["channels_last"],
        "compile": [False, True] * compiled,
    }
    defaults = {
        "precision": recommended_precision(device),
        "channels_last": True,
        "compile": False,
        "num_workers": suggest_loader_kwargs(cuda=device == "cuda").kwargs["num_workers"],
    }
    return options, {k: v for k, v in defaults.items() if v in options[k]}, notes


def _planned(kwargs: dict[str, Any], loader: Any, planned_steps: Optional[int]) -> Any:
    """``planned(optimizer_steps_per_batch)``: training batches of the planned run per process (``None``: unknown),
    from ``planned_steps`` or ``max_steps`` (optimizer steps) and ``max_epochs`` x batches per epoch."""
    devices = kwargs.get("devices", 1)
    world = (devices if isinstance(devices, int) and devices > 0 else 1) * (kwargs.get("num_nodes") or 1)

    def planned(per_batch: float) -> Optional[int]:
        steps = planned_steps or kwargs.get("max_steps") or -1
        by_steps = int(steps / (per_batch or 1 / (kwargs.get("accumulate_grad_batches") or 1))) if steps > 0 else None
        try:
            per_epoch = -(-len(loader) // world)
        except TypeError:  # no __len__, or an IterableDataset's DataLoader
            per_epoch = 0
        limit, epochs = kwargs.get("limit_train_batches"), kwargs.get("max_epochs") or 0
        per_epoch = min(per_epoch, limit) if isinstance(limit, int) else int(per_epoch * (limit or 1))
        return min([b for b in (by_steps, epochs * per_epoch if epochs > 0 else None) if b], default=None)

    return planned


def _check(asked: dict[str, Any], numbers: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Raise ``TypeError``/``ValueError`` naming the fix for an argument of :func:`tune` of the wrong kind."""
    precisions, workers = asked["precisions"], asked["num_workers"]
    if isinstance(precisions, (str, int)):
        raise TypeError(f"tune(precisions={precisions!r}): expected a list, e.g. precisions=[{precisions!r}].")
    for p in [kwargs.get("precision") or "32-true", *(precisions or [])]:
        check_precision(p, "tune()")
    if not isinstance(asked["channels_last"], bool):
        raise TypeError(f"tune(channels_last={asked['channels_last']!r}): expected True (measure it) or False.")
    if not (asked["compile"] is None or isinstance(asked["compile"], bool)):
        raise TypeError(f"tune(compile={asked['compile']!r}): expected True, False or None (None: on CUDA only).")
    if workers not in (None, True, False) and not isinstance(workers, (list, tuple, range, set)):
        raise TypeError(
            f"tune(num_workers={workers!r}): expected a list of counts to measure, e.g. "
            f"num_workers=[{workers!r}], False to keep the loader's, or None for the defaults."
        )
    if workers not in (None, True, False) and any(type(n) is not int or n < 0 for n in workers):
        raise ValueError(f"tune(num_workers={list(workers)!r}): worker counts must be integers >= 0.")
    ranges = {
        "budget": (0, 1, "in (0, 1], e.g. 0.05"),
        "max_seconds": (0, float("inf"), "> 0 (seconds)"),
        "min_gain": (-1e-12, 1, "in [0, 1), e.g. 0.02"),
        "planned_steps": (0, float("inf"), ">= 1"),
    }
    for name, value in numbers.items():
        lo, hi, text = ranges[name]
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi
        ):
            raise ValueError(f"tune({name}={value!r}): expected a number {text}.")


def tune(
    model: Any,
    train_dataloaders: Any = None,
    datamodule: Any = None,
    *,
    precisions: Optional[Sequence[str]] = None,
    channels_last: bool = True,
    compile: Optional[bool] = None,
    num_workers: Union[None, bool, Sequence[int]] = None,
    budget: float = 0.05,
    max_seconds: float = 60.0,
    planned_steps: Optional[int] = None,
    min_gain: float = 0.02,
    cache: bool = True,
    verbose: bool = True,
    **trainer_kwargs: Any,
) -> TuneResult:
    """Measure which settings train ``model`` fastest here, on its own data, within a time budget; change nothing.

    Factors: ``channels_last`` on/off and the training loader's ``num_workers`` (switched in place in one fit),
    ``precision`` (``32-true``; ``bf16-mixed`` where the hardware runs it natively; ``16-mixed`` on CUDA) and
    ``torch.compile`` (on CUDA by default) as alternating short fits. Each change is decided by the rule of
    :mod:`lightning_efficient.functional.tuning`; one the budget cannot afford takes ``recipe()``'s default. The
    budget is ``budget`` of the planned run (its training batches times the current settings' median step time,
    validation excluded), at most ``max_seconds``. A decision is stored and reused while nothing it depends on
    changed (:mod:`lightning_efficient.tune_result`). The user's callbacks are kept or dropped by type
    (:data:`CALLBACKS`); the measuring fits run without validation, checkpoints or LR schedulers, with a dummy
    logger.

    Args:
        model: your LightningModule (copies are trained, never it).
        train_dataloaders, datamodule: your training data, as for ``Trainer.fit``.
        precisions: precisions to try; default: those the hardware runs natively.
        channels_last: measure ChannelsLast on and off (``False``: keep as given).
        compile: measure ``torch.compile``; ``None``: on CUDA only.
        num_workers: worker counts to try; ``None``: 0, a quarter, half and all but one of the CPUs; ``False``: keep.
        budget: share (0-1] of the planned run's training time to spend.
        max_seconds: the budget's cap in seconds (the budget when the planned length is unknown).
        planned_steps: optimizer steps of the real run; default: from ``max_steps`` / ``max_epochs``.
        min_gain: smallest relative gain that counts.
        cache: reuse a stored decision and store this one (``False``: neither).
        verbose: print the table (rank zero).
        **trainer_kwargs: the ``Trainer`` arguments of your real run; its ``precision`` and a ChannelsLast among
            its ``callbacks`` are the current settings.

    Returns:
        A :class:`~lightning_efficient.TuneResult` (``recipe(tune=result)``, ``prepare_model``, ``dataloader``).

    Raises:
        TypeError: ``model`` is not a LightningModule, a Trainer argument no Trainer takes, a choice of the wrong
            kind.
        ValueError: an out-of-range number, a precision Lightning does not accept, both or no data sources, a
            one-shot iterator.
        RuntimeError: the current settings themselves fail to train.

    Example::

        result = tune(model, train_loader, max_epochs=10)
        trainer = pl.Trainer(max_epochs=10, **recipe(tune=result))
        trainer.fit(result.prepare_model(model), result.dataloader(train_loader))
    """
    started = time.perf_counter()
    package = next((p for p in LIGHTNING_PACKAGES if isinstance(model, p.LightningModule)), None)
    if package is None:
        raise TypeError(f"tune(): model must be a LightningModule, got {type(model).__name__}.")
    check_trainer_kwargs(trainer_kwargs, "tune()", [package.Trainer])
    asked = {"precisions": precisions, "channels_last": channels_last, "compile": compile, "num_workers": num_workers}
    numbers = {"budget": budget, "max_seconds": max_seconds, "min_gain": min_gain, "planned_steps": planned_steps}
    _check(asked, numbers, trainer_kwargs)
    if isinstance(train_dataloaders, package.LightningDataModule) and datamodule is None:
        train_dataloaders, datamodule = None, train_dataloaders  # tune(model, dm), as trainer.fit(model, dm)
    if train_dataloaders is not None and datamodule is not None:
        raise ValueError("tune(): pass train_dataloaders or one datamodule, not both (as for Trainer.fit).")
    with _same_state():  # the data hooks, the first sample and the fits may draw from the global RNGs
        return _tune(
            model,
            train_dataloaders,
            datamodule,
            package,
            asked,
            budget,
            max_seconds,
            planned_steps,
            min_gain,
            cache,
            verbose,
            started,
            trainer_kwargs,
        )


def _tune(
    model: Any,
    train_dataloaders: Any,
    datamodule: Any,
    package: Any,
    asked: dict[str, Any],
    budget: float,
    max_seconds: float,
    planned_steps: Optional[int],
    min_gain: float,
    cache: bool,
    verbose: bool,
    started: float,
    trainer_kwargs: dict[str, Any],
) -> TuneResult:
    """:func:`tune` once its arguments are checked."""
    loader = _training_loader(model, train_dataloaders, datamodule)
    if loader is None and train_dataloaders is None and datamodule is None:
        raise ValueError(
            "tune(): no training data: pass train_dataloaders= or datamodule=, or define "
            "train_dataloader() in the model."
        )
    if loader is not None and hasattr(loader, "__next__") and iter(loader) is loader:
        raise ValueError(
            f"tune(): the training data is a one-shot iterator ({type(loader).__name__}): tuning would "
            "use it up before your fit; pass a DataLoader or an iterable that restarts."
        )
    accelerator = str(trainer_kwargs.get("accelerator", "auto"))
    device = "cuda" if accelerator in ("cuda", "gpu") or accelerator == "auto" and torch.cuda.is_available() else "cpu"
    data = {"train_dataloaders": train_dataloaders, "datamodule": datamodule}
    trials = _Trials(model, {k: v for k, v in data.items() if v is not None}, loader, trainer_kwargs, package)
    callbacks = trainer_kwargs.get("callbacks") or []
    current = Candidate(
        str(trainer_kwargs.get("precision") or "32-true"),
        any(isinstance(c, ChannelsLast) for c in callbacks if isinstance(callbacks, (list, tuple))),
    )
    options, defaults, notes = _options(device, current, asked, loader)
    trials.layouts, trials.workers = bool(options["channels_last"]) or current.channels_last, options["num_workers"]
    if options["num_workers"]:
        current = Candidate(current.precision, current.channels_last, num_workers=loader.num_workers)
    planned = _planned(trainer_kwargs, loader, planned_steps)
    store = Store(
        fingerprint(model, loader, trials.kept, trainer_kwargs, [options, min_gain, repr(asked)]), enabled=cache
    )
    result = store.load(
        lambda r: min(max_seconds, budget * r.step_s * (planned(r.steps_per_batch) or 0)) or max_seconds
    )
    if result is not None:
        result.reused_from, result.tuning_s = str(store.path), time.perf_counter() - started
    else:
        gen = search(current, options, defaults, trials.pair_cost, budget, max_seconds, min_gain)
        chosen, decisions, base, budget_s = trials.run(gen, planned)
        if "BatchSizeFinder" in trials.dropped:
            notes.append(
                f"tune() measured the loader's batch size ({base.batch_size}); your BatchSizeFinder may "
                "choose another, with other step times"
            )
        if trials.dropped:
            notes.append(f"not in the measuring fits: {', '.join(sorted(set(trials.dropped)))} (see CALLBACKS)")
        fp = store.fp or {}
        result = TuneResult(current, chosen, decisions, base.step_s, base.data_wait, base.batch_size)
        result.steps_per_batch, result.planned_batches, result.budget_s = (
            base.steps_per_batch,
            base.planned_batches,
            budget_s,
        )
        result.tuning_s, result.machine, result.arch, result.notes = (
            time.perf_counter() - started,
            fp.get("machine", {}),
            fp.get("arch", ""),
            notes,
        )
        store.save(result)
    if verbose:
        rank_zero_only(print)(result)
    return result
