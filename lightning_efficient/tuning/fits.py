"""tune()'s measuring fits: :class:`Trials` serves the requests of
:func:`~lightning_efficient.tuning.policy.search` with short real fits of copies of the user's model,
each run by one :class:`~lightning_efficient.tuning.probe.Probe` through a plan of steps. Layout and a
rebuildable loader's workers switch in place in one fit; precision and compilation take separate fits, as
everything does under DDP."""

from __future__ import annotations

import contextlib
import copy
import random
import time
import warnings
from typing import Any, Callable, Generator, Iterator, Optional, Sequence, TypeVar

import numpy as np
import torch

from lightning_efficient.data.loader import can_rebuild, with_num_workers
from lightning_efficient.quiet import no_lightning_info, quiet_lightning
from lightning_efficient.tuning import policy
from lightning_efficient.tuning.probe import Probe, Step, SwitchingLoader
from lightning_efficient.tuning.records import (
    Candidate,
    Measured,
    MeasurementError,
    Pair,
    Request,
    RequestKind,
    Side,
    Tag,
    Window,
)
from lightning_efficient.tuning.result import compile_submodules

T = TypeVar("T")
WARMUP = 2  #: untimed steps at the start of a fit
WINDOW = 3  #: steps per timing window
COMPILE_GUESS_S = 30.0  #: seconds a first compilation is assumed to take (unknown before it runs)
#: The measuring fits' Trainer arguments (and precision, callbacks, a DummyLogger).
FIT_ARGS: dict[str, Any] = {
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "max_epochs": 10**4,
    "limit_val_batches": 0,
    "num_sanity_val_steps": 0,
}
#: The Trainer arguments the measuring fits set themselves: the user's are left out.
CONTROLLED = {
    *FIT_ARGS,
    *"precision callbacks logger min_epochs max_steps min_steps max_time profiler".split(),
    *"limit_train_batches val_check_interval check_val_every_n_epoch fast_dev_run barebones".split(),
}
UINT8_HINT = (
    "\n  uint8 images need the callback that makes them floats, in tune() too: "
    "callbacks=[GPUAugmentation()]."
)


@contextlib.contextmanager
def same_state() -> Iterator[None]:
    """Every RNG (torch and CUDA by ``torch.random.fork_rng``, Python, NumPy) and backend flag as
    before."""
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


def head_start(loader: Any) -> int:
    """Batches a loader's workers prepare while idle: ``prefetch_factor x num_workers`` (0 without
    workers)."""
    return (getattr(loader, "num_workers", 0) or 0) * (getattr(loader, "prefetch_factor", None) or 2)


class Trials:
    """The measurements the search asks for, as fits of copies of ``model`` on the user's data (``train``
    loaders or a datamodule ``dm``, as for ``Trainer.fit``) with the user's Trainer arguments ``kwargs``
    in the Lightning ``package``.

    Args:
        loader: the training loader (``None``: unknown).
        kept: the user's callbacks that train along (copied for each fit).
        layouts: switch channels_last in the fits (a factor measured, or ChannelsLast in the run).
        workers: the ``num_workers`` values measured (a loader per value in a switching fit).
        started: the ``time.perf_counter()`` the budget counts from.
    """

    def __init__(
        self,
        model: Any,
        train: Any,
        dm: Any,
        loader: Any,
        kwargs: dict,
        package: Any,
        kept: list,
        *,
        layouts: bool = True,
        workers: Sequence[int] = (),
        started: Optional[float] = None,
    ) -> None:
        self.model, self.loader, self.package, self.kept = model, loader, package, kept
        self.data = {
            k: v for k, v in (("train_dataloaders", train), ("datamodule", dm)) if v is not None
        }
        logger = __import__(f"{package.__name__}.loggers.logger", fromlist=["_"]).DummyLogger()
        self.fixed = {k: v for k, v in kwargs.items() if k not in CONTROLLED} | dict(
            FIT_ARGS, logger=logger
        )
        self.layouts = layouts
        self.workers = list(workers)
        self.started = time.perf_counter() if started is None else started
        self.loaders = dict[int, Any]()
        self.world_size = 1
        self.overhead_s = 0.0
        self.serial = 0

    def switchable(self, req: Request) -> bool:
        """Whether one fit switches ``req``'s sides: one process and precision, no compile, rebuildable
        loaders."""
        new, old = req.new, req.old
        fixed = self.loader is not None and not can_rebuild(self.loader)
        rebuild = new.num_workers == old.num_workers or fixed
        one_fit = new.precision == old.precision and not (new.compile or old.compile)
        return self.world_size == 1 and one_fit and rebuild

    def pair_cost(self, req: Request, step_s: float) -> float:
        """Estimated seconds of a first pair of ``req``'s kind."""
        if self.switchable(req):
            return (2 * WINDOW + 1 + head_start(self.loader_for(req.new.num_workers))) * step_s
        return 2 * (self.overhead_s + (WARMUP + WINDOW) * step_s) + COMPILE_GUESS_S * req.new.compile

    def loader_for(self, workers: Optional[int]) -> Any:
        """The training loader with ``workers`` workers (``None``: as given), built once."""
        if workers is None or workers == getattr(self.loader, "num_workers", None):
            return self.loader
        return self.loaders.setdefault(workers, with_num_workers(self.loader, workers))

    def plan(self, req: Request, side: Optional[Candidate]) -> list[Step]:
        """The steps of ``req``, after steps of ``side`` (``None``: the start of a fit, with a warm-up
        first)."""
        self.serial += 1
        if req.kind == RequestKind.BASELINE:
            base = Step(req.new, Tag(self.serial, Side.BASE))
            return [Step(req.new, None)] * WARMUP + [base] * (WINDOW + 1)
        order = ((Side.OLD, req.old), (Side.NEW, req.new))[:: 1 if req.index % 2 == 0 else -1]
        steps = [] if side is not None else [Step(order[0][1], None)] * WARMUP
        for name, cand in order:
            if side is not None and cand != side:
                switched = cand.num_workers != side.num_workers
                loader = self.loader_for(cand.num_workers) if switched else None
                steps += [Step(cand, None)] * (1 + head_start(loader))
            steps += [Step(cand, Tag(self.serial, name, req.index))] * WINDOW
            side = cand
        return steps

    def fit(
        self, plan: Sequence[Step], serve: Callable[[Measured], Any], switching: bool = False
    ) -> None:
        """Fit a model copy through ``plan``, then ``serve``'s steps (``switching``: a loader per worker
        count)."""
        first, net = plan[0].candidate, copy.deepcopy(self.model)
        probe = Probe(plan, serve, self.layouts, self.started)
        workers = set[int]()
        if switching:
            workers = {w for w in (*self.workers, first.num_workers) if w is not None}
        loader = self.loader_for(first.num_workers)
        if len(workers) > 1:
            loaders = {w: self.loader_for(w) for w in workers}
            loader = SwitchingLoader(loaders, lambda: probe.side.num_workers or 0)
        if first.compile:
            compile_submodules(net)
        data = self.data
        if loader is not self.loader and "train_dataloaders" in data:
            data = {"train_dataloaders": loader}
        elif (
            loader is not self.loader
        ):  # train_dataloader() of a copy of the datamodule, or the model's copy
            data = {"datamodule": copy.copy(data["datamodule"])} if data else {}
            data.get("datamodule", net).train_dataloader = lambda: loader
        callbacks = [*map(copy.deepcopy, self.kept), probe]
        with no_lightning_info(), quiet_lightning(), warnings.catch_warnings(), same_state():
            lightning = r"(pytorch_lightning|lightning\.pytorch)"
            warnings.filterwarnings("ignore", category=UserWarning, module=lightning)
            trainer = self.package.Trainer(precision=first.precision, callbacks=callbacks, **self.fixed)
            self.world_size, started = trainer.world_size, time.perf_counter()
            trainer.fit(net, **data)
        if probe.plan:
            ran, needed = len(probe.tags), len(probe.tags) + len(probe.plan)
            raise MeasurementError(
                f"the training data ran out after {ran} batches; tune() needs {needed}"
            )
        self.overhead_s = max(0.0, time.perf_counter() - started - probe.measurement.step_s)

    def separate(self, req: Request) -> Pair:
        """One pair as two separate fits (``old`` first for an even ``index``), each a warm-up and a
        window."""
        rates, warmup_s, elapsed = {}, {}, 0.0
        for cand in (req.old, req.new)[:: 1 if req.index % 2 == 0 else -1]:
            self.serial += 1
            warm, window = Tag(self.serial, Side.WARM), Tag(self.serial, Side.WINDOW)
            got: list[Measured] = []
            self.fit([Step(cand, warm)] * WARMUP + [Step(cand, window)] * WINDOW, got.append)
            measured = got[-1]
            rates[cand] = policy.window_rate(measured.windows[window], req.factor)
            elapsed = measured.elapsed_s
            warmup_s[cand] = sum(r.seconds for r in measured.windows[warm])
        return Pair(rates[req.new], rates[req.old], elapsed, warmup_s[req.new], warmup_s[req.old])

    def run(self, gen: Generator[Request, Any, T], planned: Callable[[float], Optional[int]]) -> T:
        """Drive the search to its end and return its value: requests that switch in place are served in
        one fit (the baseline starts one), the others as separate fits; ``planned(steps_per_batch)``: the
        planned batches. Raises RuntimeError if the current settings fail to train (the baseline's fit
        raised)."""
        self.gen, self.planned, self.req = gen, planned, next(gen)
        self.done: Optional[T] = None
        while self.done is None:
            req = self.req
            try:
                if req.kind == RequestKind.BASELINE or self.switchable(req):
                    self.fit(self.plan(req, None), self.serve, switching=True)
                else:
                    self.reply(self.separate(req))
            except Exception as err:
                why = f"{type(err).__name__}: {err}".split("\n")[0][:300]
                if self.req.kind != RequestKind.BASELINE:
                    self.reply(MeasurementError(why))
                    continue
                why += UINT8_HINT * any(word in str(err) for word in ("Byte", "uint8", "unsigned char"))
                failing = f"tune(): the current settings ({req.new.label()}) fail to train"
                raise RuntimeError(f"{failing}: {why}") from err
        return self.done

    def serve(self, measured: Measured) -> Optional[list[Step]]:
        """Answer the request just measured; the next one's steps if it switches in place, or None."""
        done, elapsed = self.req, measured.elapsed_s
        steps = measured.steps_per_batch  # optimizer steps per batch
        if done.kind == RequestKind.PAIR:
            new_rate, old_rate = (
                policy.window_rate(measured.window(self.serial, side, done.index), done.factor)
                for side in (Side.NEW, Side.OLD)
            )
            self.reply(Pair(new_rate, old_rate, elapsed))
        else:
            seconds, waits, images = zip(*measured.window(self.serial, Side.BASE), strict=True)
            step_s, wait = sorted(seconds)[len(seconds) // 2], sum(waits) / sum(seconds)
            batch = round(sum(images) / len(seconds))
            self.reply(Window(step_s, wait, batch, elapsed, self.planned(steps), steps))
        side = done.new if done.kind == RequestKind.BASELINE or done.index % 2 == 0 else done.old
        return self.plan(self.req, side) if self.done is None and self.switchable(self.req) else None

    def reply(self, answer: Any) -> None:
        """Send ``answer`` to the search (throw it, if an exception); keep its next request, or its value
        at the end."""
        try:
            self.req = self.gen.throw(answer) if isinstance(answer, Exception) else self.gen.send(answer)
        except StopIteration as stop:
            self.done = stop.value
