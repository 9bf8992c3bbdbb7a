"""tune()'s measuring fits: :class:`Trials` serves the requests of :func:`~lightning_efficient.functional.tuning.
search` with short real fits of copies of the user's model, each run by one callback, :class:`Probe`, through a
*plan*: steps ``(candidate, tag)``, ``tag`` ``None`` for an untimed step, else the step's timing window. Between
steps the probe switches channels_last and the loader (:class:`SwitchingLoader`) in place; precision and
compilation take separate fits, as everything does under DDP. Step seconds come from the step timeline
(:mod:`lightning_efficient.functional.timing`)."""

from __future__ import annotations

import contextlib
import copy
import random
import time
import warnings
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
from pytorch_lightning.utilities.data import extract_batch_size

from lightning_efficient.callbacks.base import Callback
from lightning_efficient.data.loader import can_rebuild, with_num_workers
from lightning_efficient.functional.layout import BatchToChannelsLast, convert_module_to_channels_last
from lightning_efficient.functional.layout import to_channels_last, to_nchw
from lightning_efficient.functional.timing import CudaEventClock, HostClock, StepTimeline
from lightning_efficient.functional.tuning import Candidate, MeasurementError, Pair, Request, Window
from lightning_efficient.functional.tuning import compile_submodules
from lightning_efficient.pipeline import add_stage, watch_fetch
from lightning_efficient.quiet import no_lightning_info, quiet_lightning

Step = tuple[Candidate, Optional[tuple]]
WARMUP, WINDOW = 2, 2  #: untimed steps at the start of a fit, and steps per timing window
COMPILE_GUESS_S = 30.0  #: seconds a first compilation is assumed to take when budgeting it (unknown before it runs)
#: Trainer arguments the measuring fits set themselves (the user's others pass through).
CONTROLLED = set(
    """max_epochs min_epochs max_steps min_steps max_time limit_train_batches logger limit_val_batches
num_sanity_val_steps val_check_interval check_val_every_n_epoch enable_checkpointing enable_progress_bar precision
enable_model_summary callbacks fast_dev_run profiler barebones""".split()
)


@contextlib.contextmanager
def same_state() -> Iterator[None]:
    """Every RNG (torch and CUDA by ``torch.random.fork_rng``, Python, NumPy) and backend flag as before."""
    cudnn, det = torch.backends.cudnn, torch.are_deterministic_algorithms_enabled()
    flags = cudnn.benchmark, cudnn.deterministic, torch.is_deterministic_algorithms_warn_only_enabled()
    py, npy, matmul = random.getstate(), np.random.get_state(), torch.get_float32_matmul_precision()
    try:
        with torch.random.fork_rng(
            devices=list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        ):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_float32_matmul_precision(matmul)
        cudnn.benchmark, cudnn.deterministic = flags[:2]
        torch.use_deterministic_algorithms(det, warn_only=flags[2])


class SwitchingLoader:
    """Training data drawn from one loader per ``num_workers`` value: each batch from the loader ``side()`` names
    when it is fetched (Lightning fetches a sized loader's batch after the previous step). Each loader's iterator
    lives through an epoch, so its workers run as they would alone."""

    def __init__(self, loaders: dict[int, Any], side: Callable[[], int]) -> None:
        self.loaders, self.side = loaders, side

    def __len__(self) -> int:
        return min(len(loader) for loader in self.loaders.values())

    def __iter__(self) -> Iterator:
        iters: dict[int, Iterator] = {}
        for _ in range(len(self)):
            key = self.side()
            try:
                yield next(iters.setdefault(key, iter(self.loaders[key])))
            except StopIteration:
                return


def head_start(loader: Any) -> int:
    """Batches a loader's workers prepare while idle: ``prefetch_factor x num_workers`` (0 without workers)."""
    return (getattr(loader, "num_workers", 0) or 0) * (getattr(loader, "prefetch_factor", None) or 2)


class Probe(Callback):
    """Runs ``plan`` in one fit, then ``serve(windows)``'s further steps until it returns ``None``.

    ``windows`` maps each completed window's tag to ``[images, seconds, data-wait seconds, [seconds per step]]``,
    ``"elapsed"`` to the seconds since ``started`` (a ``time.perf_counter()`` value) and ``"steps_per_batch"`` to the optimizer steps per batch (under
    DDP: rank 0's, broadcast at the end of fit). The fit runs without the LR schedulers (they do not change a step's
    cost; one that monitors a validation metric would fail without validation). Common random numbers: the ``j``-th
    steps of the two windows ``(serial, side, i)`` of a pair seed the torch and Python RNGs alike as the batch enters
    the batch pipeline, so that a costly random augmentation falls on both sides.
    """

    def __init__(self, plan: list[Step], serve: Callable[[dict], Optional[list[Step]]], loader: Any, layouts: bool):
        self.plan, self.serve, self.loader, self.layouts, self.side = list(plan), serve, loader, layouts, plan[0][0]
        self.tags: list[Optional[tuple]] = []  # the tag of every step run, in order
        self.timeline = StepTimeline(HostClock(), self)  # type: ignore[arg-type] - its timer is self.add
        self.rows: list[tuple[float, float, int]] = []
        self.names: set[str] = set()
        self.seed, self.per_batch, self.started, self._undo = 0, 1.0, time.perf_counter(), []

    def add(self, data_wait_s: float, transform_s: float, compute_s: float, samples: int, other_s: float = 0) -> None:
        self.rows.append((data_wait_s + transform_s + compute_s + other_s, data_wait_s, samples))

    def workers(self) -> int:
        """``num_workers`` of the side the next batch feeds (asked by :class:`SwitchingLoader`)."""
        return (self.plan[0][0] if self.plan else self.side).num_workers or 0

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.seed = int(torch.randint(0, 2**30, ()))  # inside the fit: tune() sets the RNGs back afterwards
        pipeline = add_stage(trainer, pl_module, "tune-seed", self._seed_batch, "decode")
        self._undo.append(lambda: pipeline.remove("tune-seed"))
        if self.layouts:
            self.names, convert = set(convert_module_to_channels_last(pl_module).converted), BatchToChannelsLast()
            add_stage(
                trainer, pl_module, "tune-layout", lambda b, i: convert(b) if self.side.channels_last else b, "layout"
            )
            self._undo.append(lambda: pipeline.remove("tune-layout"))
            self._layout(pl_module, [], self.side.channels_last)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        trainer.strategy.lr_scheduler_configs = []
        self.timeline.clock = CudaEventClock() if pl_module.device.type == "cuda" else HostClock()
        self._undo.append(watch_fetch(trainer, self.timeline))

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.timeline.restart()  # a window an epoch end cuts pays the loader's restart, as the real run does

    def _seed_batch(self, batch: Any, dataloader_idx: int) -> Any:
        if self.plan and (tag := self.plan[0][1]) is not None:
            seed = (self.seed + hash((tag[0], tag[-1], self.tags.count(tag)))) % 2**31
            torch.manual_seed(seed)
            random.seed(seed)
        return batch

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.timeline.batch_started()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        try:
            samples = int(extract_batch_size(batch))
        except Exception:  # noqa: BLE001 - an exotic batch: count it as one sample
            samples = 1
        self.timeline.batch_ended(samples)
        self.tags.append(self.plan.pop(0)[1] if self.plan else None)
        steps = trainer.global_step / len(self.tags)
        self.per_batch = 1 / trainer.accumulate_grad_batches if pl_module.automatic_optimization else steps
        if not self.plan:
            self.plan = (self.serve(self.results()) if trainer.world_size == 1 else None) or []
            trainer.should_stop = not self.plan
        if self.plan and self.plan[0][0].channels_last != self.side.channels_last:
            self._layout(pl_module, trainer.optimizers, self.plan[0][0].channels_last)
        self.side = self.plan[0][0] if self.plan else self.side

    def results(self) -> dict[Any, Any]:
        """The windows measured so far (see the class docstring); reads the step clock (CUDA: waits for it)."""
        self.timeline.drain(block=True)
        windows: dict[Any, Any] = {"elapsed": time.perf_counter() - self.started, "steps_per_batch": self.per_batch}
        for tag, (step_s, wait_s, samples) in zip(self.tags, self.rows):
            if tag is not None:
                w = windows.setdefault(tag, [0, 0.0, 0.0, []])
                w[0], w[1], w[2], _ = w[0] + samples, w[1] + step_s, w[2] + wait_s, w[3].append(step_s)
        return windows

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.world_size > 1:  # separate fits only: every rank decides from rank 0's windows
            self.serve(trainer.strategy.broadcast(self.results(), src=0))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        while self._undo:
            self._undo.pop()()

    def _layout(self, pl_module: Any, optimizers: Any, cl: bool) -> None:
        # to_channels_last / to_nchw, not .contiguous(): a depthwise weight [C, 1, k, k] is contiguous in both layouts.
        convert = to_channels_last if cl else to_nchw
        tensors = {**dict(pl_module.named_parameters()), **dict(pl_module.named_buffers())}
        for t in (tensors[n] for n in self.names if n in tensors):
            t.data = convert(t.data)
            if isinstance(t, torch.nn.Parameter) and t.grad is not None:
                t.grad = convert(t.grad)
            for state in (getattr(opt, "optimizer", opt).state.get(t, {}) for opt in optimizers):
                state.update({k: convert(v) for k, v in state.items() if torch.is_tensor(v) and v.shape == t.shape})


class Trials:
    """The measurements :func:`~lightning_efficient.functional.tuning.search` asks for, as fits of copies of
    ``model`` on the user's data (as for ``Trainer.fit``) with the user's Trainer arguments; ``kept``: the user's
    callbacks that train along (copied for each fit); ``loader``: the training loader (``None``: unknown)."""

    def __init__(self, model: Any, train: Any, dm: Any, loader: Any, kwargs: dict, package: Any, kept: list) -> None:
        self.model, self.loader, self.package, self.kept = model, loader, package, kept
        self.data = {k: v for k, v in (("train_dataloaders", train), ("datamodule", dm)) if v is not None}
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
        """The steps of ``req``, after steps of ``side`` (``None``: the start of a fit, with a warm-up first)."""
        self.serial += 1
        if req.kind == "baseline":
            return [(req.new, None)] * WARMUP + [(req.new, (self.serial, "base", 0))] * (WINDOW + 1)
        order = (("old", req.old), ("new", req.new))[:: 1 if req.index % 2 == 0 else -1]
        steps: list[Step] = [] if side is not None else [(order[0][1], None)] * WARMUP
        for name, cand in order:
            if side is not None and cand != side:
                loader = self._loader(cand.num_workers) if cand.num_workers != side.num_workers else None
                steps += [(cand, None)] * (1 + head_start(loader))
            steps, side = steps + [(cand, (self.serial, name, req.index))] * WINDOW, cand
        return steps

    def fit(self, plan: list[Step], serve: Any, switching: bool = False) -> None:
        """One measuring fit of a copy of the model, through ``plan`` and ``serve``'s further steps (``switching``:
        each batch from the loader of its step's ``num_workers``)."""
        first, net = plan[0][0], copy.deepcopy(self.model)
        workers = ({*self.workers, first.num_workers} if switching else set()) - {None}
        probe = Probe(plan, serve, self._loader(first.num_workers), self.layouts)
        probe.started = self.started
        if first.compile:
            compile_submodules(net)
        loader = probe.loader
        if len(workers) > 1:
            loader = SwitchingLoader({w: self._loader(w) for w in workers}, probe.workers)
        data = self.data
        if loader is not self.loader and "train_dataloaders" in self.data:
            data = {"train_dataloaders": loader}
        elif loader is not self.loader:  # a datamodule's or the model's train_dataloader(): a copy returns ``loader``
            owner = copy.copy(self.data.get("datamodule", net))
            owner.train_dataloader = lambda: loader
            net, data = (net, {"datamodule": owner}) if "datamodule" in self.data else (owner, {})
        logger = __import__(f"{self.package.__name__}.loggers.logger", fromlist=["_"]).DummyLogger()
        with no_lightning_info(), quiet_lightning(), warnings.catch_warnings(), same_state():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"(pytorch_lightning|lightning\.pytorch)")
            off = dict(enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
            off.update(logger=logger, limit_val_batches=0, num_sanity_val_steps=0, max_epochs=10**4, **self.fixed)
            trainer = self.package.Trainer(
                precision=first.precision, callbacks=[*map(copy.deepcopy, self.kept), probe], **off
            )
            self.world_size, started = trainer.world_size, time.perf_counter()
            trainer.fit(net, **data)
        if probe.plan:
            ran = len(probe.tags)
            raise MeasurementError(
                f"the training data ran out after {ran} batches; tune() needs {ran + len(probe.plan)}"
            )
        self.overhead_s = max(0.0, time.perf_counter() - started - sum(r[0] for r in probe.rows))

    def answer(self, req: Request, windows: dict, planned: Callable[[float], Optional[int]]) -> Any:
        """The :class:`Window` or :class:`Pair` of ``req`` from a probe's windows."""
        mine = {k[1]: w for k, w in windows.items() if isinstance(k, tuple) and k[0] == self.serial}
        elapsed, per_batch = windows["elapsed"], windows["steps_per_batch"]
        if req.kind == "pair":
            return Pair(mine["new"][0] / mine["new"][1], mine["old"][0] / mine["old"][1], elapsed)
        images, seconds, wait, steps = mine["base"]
        step_s = sorted(steps)[len(steps) // 2]
        return Window(step_s, wait / seconds, round(images / len(steps)), elapsed, planned(per_batch), per_batch)

    def separate(self, req: Request) -> Pair:
        """One pair as two separate fits (``old`` first for an even ``index``), each a warm-up and a window."""
        got: dict[Candidate, dict] = {}
        for cand in (req.old, req.new)[:: 1 if req.index % 2 == 0 else -1]:
            self.serial += 1
            tags = (self.serial, "warm", 0), (self.serial, "w", 0)
            self.fit([(cand, tags[0])] * WARMUP + [(cand, tags[1])] * WINDOW, lambda w, c=cand: got.update({c: w}))
            got[cand] = {
                "rate": got[cand][tags[1]][0] / got[cand][tags[1]][1],
                "warm": got[cand][tags[0]][1],
                "end": got[cand]["elapsed"],
            }
        new, old = got[req.new], got[req.old]
        return Pair(new["rate"], old["rate"], max(new["end"], old["end"]), new["warm"], old["warm"])

    def run(self, gen: Any, planned: Callable[[float], Optional[int]]) -> Any:
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
                    req = gen.throw(MeasurementError(error_text(err)))
                else:
                    req = gen.send(answer)
        except StopIteration as stop:
            return stop.value

    def _in_fit(self, gen: Any, req: Request, planned: Callable[[float], Optional[int]]) -> Request:
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
                text = f"tune(): the current settings ({req.new.label()}) fail to train: {error_text(err)}"
                raise RuntimeError(text + uint8_hint(err)) from err
            return gen.throw(MeasurementError(error_text(err)))
        if state["stop"] is not None:
            raise state["stop"]
        return state["req"]


def error_text(err: BaseException) -> str:
    """``"ExceptionType: first line of the message"``, at most 300 characters."""
    return f"{type(err).__name__}: {err}".split("\n")[0][:300]


def uint8_hint(err: BaseException) -> str:
    """Where the converting callback goes, for an error that looks like uint8 batches reaching the model."""
    uint8 = any(word in str(err) for word in ("Byte", "uint8", "unsigned char"))
    return uint8 * (
        "\n  The batches look like uint8 images (e.g. FastImageFolder + uint8_collate): pass the callback "
        "that turns them into floats to tune() as to your Trainer: callbacks=[GPUAugmentation(...)]."
    )
