"""tune()'s measuring fits: :class:`Trials` serves the requests of :func:`~lightning_efficient.functional.tuning.
search` with short real fits of copies of the user's model, each run by one callback, :class:`Probe`, through a *plan*:
steps ``(candidate, tag)``, ``tag`` ``None`` for an untimed step, else the step's timing window. Between steps the
probe switches channels_last and the loader (:class:`SwitchingLoader`) in place; precision and compilation take
separate fits, as everything does under DDP. Step seconds come from :mod:`lightning_efficient.functional.timing`."""

from __future__ import annotations

import contextlib
import copy
import random
import time
import warnings
from functools import partial
from typing import Any, Callable, Generator, Iterator, Optional, Sequence, TypeVar

import numpy as np
import torch
from pytorch_lightning.utilities.data import extract_batch_size

from lightning_efficient.callbacks.base import Callback
from lightning_efficient.data.loader import can_rebuild, with_num_workers
from lightning_efficient.functional import layout, tuning
from lightning_efficient.functional.timing import CudaEventClock, HostClock, StepTimeline
from lightning_efficient.functional.tuning import Candidate, MeasurementError, Pair, Request, Window
from lightning_efficient.pipeline import add_stage, watch_fetch
from lightning_efficient.quiet import no_lightning_info, quiet_lightning

Step = tuple[Candidate, Optional[tuple]]
T = TypeVar("T")
WARMUP, WINDOW = 2, 3  #: untimed steps at the start of a fit, and steps per timing window
COMPILE_GUESS_S = 30.0  #: seconds a first compilation is assumed to take when budgeting it (unknown before it runs)
#: The measuring fits' Trainer arguments (and precision, callbacks, a DummyLogger); CONTROLLED: all those they set.
FIT_ARGS = dict(enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, max_epochs=10**4)
FIT_ARGS |= dict(limit_val_batches=0, num_sanity_val_steps=0)
CONTROLLED = {*FIT_ARGS, *"precision callbacks logger min_epochs max_steps min_steps max_time profiler".split()}
CONTROLLED |= {"limit_train_batches", "val_check_interval", "check_val_every_n_epoch", "fast_dev_run", "barebones"}
UINT8_HINT = "\n  uint8 images need the callback that makes them floats, in tune() too: callbacks=[GPUAugmentation()]."


@contextlib.contextmanager
def same_state() -> Iterator[None]:
    """Every RNG (torch and CUDA by ``torch.random.fork_rng``, Python, NumPy) and backend flag as before."""
    cudnn, det = torch.backends.cudnn, torch.are_deterministic_algorithms_enabled()
    flags = cudnn.benchmark, cudnn.deterministic, torch.is_deterministic_algorithms_warn_only_enabled()
    py, npy, matmul = random.getstate(), np.random.get_state(), torch.get_float32_matmul_precision()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices):
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
            if (key := self.side()) not in iters:  # once per loader: iter() starts its workers
                iters[key] = iter(self.loaders[key])
            if (batch := next(iters[key], StopIteration)) is StopIteration:
                return
            yield batch


def head_start(loader: Any) -> int:
    """Batches a loader's workers prepare while idle: ``prefetch_factor x num_workers`` (0 without workers)."""
    return (getattr(loader, "num_workers", 0) or 0) * (getattr(loader, "prefetch_factor", None) or 2)


class Probe(Callback):
    """Runs ``plan`` in one fit, then ``serve(windows)``'s further steps until it returns ``None``. ``windows`` maps
    each completed window's tag to its steps' ``(seconds, data-wait seconds, images)``, ``"elapsed"`` to the seconds
    since ``started`` (a ``time.perf_counter()`` value) and ``"steps_per_batch"`` to the optimizer steps per batch
    (under DDP: rank 0's, broadcast at the end of fit). Common random numbers: the ``j``-th steps of the two windows
    ``(serial, side, i)`` of a pair seed the torch and Python RNGs alike as the batch enters the batch pipeline, so that
    a costly random augmentation falls on both sides."""

    def __init__(self, plan: Sequence[Step], serve: Callable[[dict], Any], layouts: bool, started: float) -> None:
        self.plan, self.serve, self.layouts, self.started, self.side = list(plan), serve, layouts, started, plan[0][0]
        self.tags: list[Optional[tuple]] = []  # the tag of every step run, in order
        self.rows: list[tuple[float, float, int]] = []  # and its (seconds, data-wait seconds, images)
        self.timeline = StepTimeline(HostClock(), self)  # its timer is self.add
        self.seed, self.per_batch, self.names, self._undo = 0, 1.0, set[str](), list[Callable[[], Any]]()

    def add(self, data_wait_s: float, transform_s: float, compute_s: float, samples: int, other_s: float = 0) -> None:
        self.rows.append((data_wait_s + transform_s + compute_s + other_s, data_wait_s, samples))

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.seed = int(torch.randint(0, 2**30, ()))  # inside the fit: tune() sets the RNGs back afterwards
        stages: dict[str, tuple[Callable[[Any, int], Any], str]] = {"tune-seed": (self._seed_batch, "decode")}
        if self.layouts:
            self.names = set(layout.convert_module_to_channels_last(pl_module).converted)
            convert = layout.BatchToChannelsLast()
            stages["tune-layout"] = (lambda b, i: convert(b) if self.side.channels_last else b, "layout")
            self._layout(pl_module, [], self.side.channels_last)
        self._undo += [partial(add_stage(trainer, pl_module, n, fn, k).remove, n) for n, (fn, k) in stages.items()]

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        # No LR schedulers (a val-metric monitor would fail), except in manual optimization: the user steps them.
        trainer.strategy.lr_scheduler_configs = [] if pl_module.automatic_optimization else trainer.lr_scheduler_configs
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
        samples = 1  # an exotic batch counts as one sample
        with contextlib.suppress(Exception):
            samples = int(extract_batch_size(batch))
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
        for tag, row in zip(self.tags, self.rows, strict=False):
            if tag is not None:
                windows.setdefault(tag, []).append(row)
        return windows

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.world_size > 1:  # separate fits only: every rank decides from rank 0's windows
            self.serve(trainer.strategy.broadcast(self.results(), src=0))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        while self._undo:
            self._undo.pop()()

    def _layout(self, pl_module: Any, optimizers: Any, cl: bool) -> None:
        # to_channels_last / to_nchw, not .contiguous(): a depthwise weight [C, 1, k, k] is contiguous in both layouts.
        convert = layout.to_channels_last if cl else layout.to_nchw
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
        logger = __import__(f"{package.__name__}.loggers.logger", fromlist=["_"]).DummyLogger()
        self.fixed = {k: v for k, v in kwargs.items() if k not in CONTROLLED} | dict(FIT_ARGS, logger=logger)
        self.loaders, self.layouts, self.workers = dict[int, Any](), True, list[int]()  # tune() sets layouts, workers
        self.world_size, self.overhead_s, self.serial, self.started = 1, 0.0, 0, time.perf_counter()

    def switchable(self, req: Request) -> bool:
        """Whether one fit switches ``req``'s sides: one process and precision, no compile, rebuildable loaders."""
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

    def fit(self, plan: Sequence[Step], serve: Callable[[dict], Any], switching: bool = False) -> None:
        """Fit a model copy through ``plan``, then ``serve``'s steps (``switching``: a loader per worker count)."""
        first, net = plan[0][0], copy.deepcopy(self.model)
        probe = Probe(plan, serve, self.layouts, self.started)
        workers = {w for w in (*self.workers, first.num_workers) if w is not None} if switching else set[int]()
        loader = self._loader(first.num_workers)
        if len(workers) > 1:
            loader = SwitchingLoader({w: self._loader(w) for w in workers}, lambda: probe.side.num_workers or 0)
        if first.compile:
            tuning.compile_submodules(net)
        data = self.data
        if loader is not self.loader and "train_dataloaders" in data:
            data = {"train_dataloaders": loader}
        elif loader is not self.loader:  # train_dataloader() of a copy of the datamodule, or of the model's copy
            data = {"datamodule": copy.copy(data["datamodule"])} if data else {}
            data.get("datamodule", net).train_dataloader = lambda: loader
        callbacks = [*map(copy.deepcopy, self.kept), probe]
        with no_lightning_info(), quiet_lightning(), warnings.catch_warnings(), same_state():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"(pytorch_lightning|lightning\.pytorch)")
            trainer = self.package.Trainer(precision=first.precision, callbacks=callbacks, **self.fixed)
            self.world_size, started = trainer.world_size, time.perf_counter()
            trainer.fit(net, **data)
        if probe.plan:
            ran, needed = len(probe.tags), len(probe.tags) + len(probe.plan)
            raise MeasurementError(f"the training data ran out after {ran} batches; tune() needs {needed}")
        self.overhead_s = max(0.0, time.perf_counter() - started - sum(r[0] for r in probe.rows))

    def separate(self, req: Request) -> Pair:
        """One pair as two separate fits (``old`` first for an even ``index``), each a warm-up and a window."""
        rates, warmup_s, elapsed = {}, {}, 0.0
        for cand in (req.old, req.new)[:: 1 if req.index % 2 == 0 else -1]:
            self.serial += 1
            warm, window, got = (self.serial, "warm", 0), (self.serial, "window", 0), dict[Any, Any]()
            self.fit([(cand, warm)] * WARMUP + [(cand, window)] * WINDOW, got.update)
            rates[cand], elapsed = tuning.window_rate(got[window], req.factor), got["elapsed"]
            warmup_s[cand] = sum(r[0] for r in got[warm])
        return Pair(rates[req.new], rates[req.old], elapsed, warmup_s[req.new], warmup_s[req.old])

    def run(self, gen: Generator[Request, Any, T], planned: Callable[[float], Optional[int]]) -> T:
        """Drive :func:`search` to its end and return its value: requests that switch in place are served in one fit
        (the baseline starts one), the others as separate fits; ``planned(steps_per_batch)``: the planned batches.
        Raises RuntimeError if the current settings fail to train (the baseline's fit raised)."""
        self.gen, self.planned, self.req, self.done = gen, planned, next(gen), None
        while self.done is None:
            req = self.req
            try:
                if req.kind == "baseline" or self.switchable(req):
                    self.fit(self.plan(req, None), self._serve, switching=True)
                else:
                    self._reply(self.separate(req))
            except Exception as err:
                why = f"{type(err).__name__}: {err}".split("\n")[0][:300]
                if self.req.kind != "baseline":
                    self._reply(MeasurementError(why))
                    continue
                why += UINT8_HINT * any(word in str(err) for word in ("Byte", "uint8", "unsigned char"))
                raise RuntimeError(f"tune(): the current settings ({req.new.label()}) fail to train: {why}") from err
        return self.done

    def _serve(self, windows: dict) -> Optional[list[Step]]:
        """Answer the request just measured from ``windows``; the next one's steps if it switches in place, or None."""
        done, elapsed, steps = self.req, windows["elapsed"], windows["steps_per_batch"]  # optimizer steps per batch
        mine = {k[1]: w for k, w in windows.items() if isinstance(k, tuple) and k[0] == self.serial}
        if done.kind == "pair":
            new, old = (tuning.window_rate(mine[k], done.factor) for k in ("new", "old"))
            self._reply(Pair(new, old, elapsed))
        else:
            seconds, waits, images = zip(*mine["base"], strict=True)
            step_s, wait = sorted(seconds)[len(seconds) // 2], sum(waits) / sum(seconds)
            self._reply(Window(step_s, wait, round(sum(images) / len(seconds)), elapsed, self.planned(steps), steps))
        side = done.new if done.kind == "baseline" or done.index % 2 == 0 else done.old
        return self.plan(self.req, side) if self.done is None and self.switchable(self.req) else None

    def _reply(self, answer: Any) -> None:
        """Send ``answer`` to the search (throw it, if an exception); keep its next request, or its value at the end."""
        try:
            self.req = self.gen.throw(answer) if isinstance(answer, Exception) else self.gen.send(answer)
        except StopIteration as stop:
            self.done = stop.value
