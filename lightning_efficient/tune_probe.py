"""The measuring callback of :func:`~lightning_efficient.tune`: planned steps, each with its settings, in one fit.

A plan is a list of steps ``(candidate, tag)``: ``tag`` ``None`` for an untimed step, else the name of the timing
window the step belongs to. Between steps the probe switches what one fit can switch in place: channels_last
(model parameters, their gradients and optimizer state, and the batches, as :class:`ChannelsLast` does) and the
training loader drawn from (:class:`SwitchingLoader`, one loader per ``num_workers``). Step times come from the
package's step timeline (:mod:`lightning_efficient.functional.timing`): data wait around the fetch, the rest by
the step's clock. When the plan runs out the probe asks ``serve(windows)`` for more, or stops the fit.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from pytorch_lightning.utilities.data import extract_batch_size

from lightning_efficient.callbacks.base import Callback
from lightning_efficient.functional.layout import (
    BatchToChannelsLast,
    convert_module_to_channels_last,
    to_channels_last,
    to_nchw,
)
from lightning_efficient.functional.timing import CudaEventClock, HostClock, StepTimeline
from lightning_efficient.functional.tuning import Candidate
from lightning_efficient.pipeline import add_stage, watch_fetch

Step = tuple[Candidate, Optional[tuple]]


class _Steps:
    """A step timeline's timer that keeps every step: ``[step_s, data_wait_s, samples]``."""

    def __init__(self) -> None:
        self.rows: list[list[float]] = []

    def add(self, data_wait_s: float, transform_s: float, compute_s: float, samples: int, other_s: float = 0) -> None:
        self.rows.append([data_wait_s + transform_s + compute_s + other_s, data_wait_s, samples])


class SwitchingLoader:
    """Training data drawn from one loader per ``num_workers`` value: each batch from the loader that ``side()``
    names when it is fetched. Iterators are kept through an epoch (their workers run as they would alone)."""

    def __init__(self, loaders: dict[int, Any], side: Callable[[], int]) -> None:
        self.loaders, self.side = loaders, side
        self._iters: dict[int, Iterator] = {}

    def __len__(self) -> int:
        return min(len(loader) for loader in self.loaders.values())

    def __iter__(self) -> Iterator:
        self._iters.clear()
        for _ in range(len(self)):
            key = self.side()
            try:
                yield next(self._iters.setdefault(key, iter(self.loaders[key])))
            except StopIteration:
                return


def head_start(loader: Any) -> int:
    """Batches a loader's workers prepare while idle: ``prefetch_factor x num_workers`` (0 without workers)."""
    workers = getattr(loader, "num_workers", 0) or 0
    return workers * (getattr(loader, "prefetch_factor", None) or 2)


class Probe(Callback):
    """Runs ``plan`` in one fit, then ``serve(windows)``'s further steps until it returns ``None``.

    ``windows`` maps each completed window's tag to ``(images, seconds, data_wait_seconds, [seconds per step])``,
    and ``"elapsed"`` to ``time.perf_counter()`` when the plan ran out (under DDP, rank 0's windows, broadcast at
    the end of fit). The learning-rate schedulers are left out of the fit: they do not change a step's cost, and a
    scheduler monitoring a validation metric would fail without validation. Common random numbers: the ``j``-th
    steps of the two windows ``(serial, side, i)`` of a pair seed the torch and Python RNGs alike (as the batch
    enters the batch pipeline), so that a costly random augmentation falls on both sides.
    """

    def __init__(
        self, plan: list[Step], serve: Callable[[dict], Optional[list[Step]]], loader: Any = None, layouts: bool = True
    ) -> None:
        self.plan, self.serve, self.loader, self.layouts = list(plan), serve, loader, layouts
        self.redone: set[tuple] = set()
        self.side = self.plan[0][0]
        self.tags: list[Optional[tuple]] = []  # the tag of every step run, in order
        self.timeline = StepTimeline(HostClock(), _Steps())  # type: ignore[arg-type]
        self.seed = 0
        self.names: set[str] = set()
        self.per_batch = 1.0
        self._undo: list[Callable[[], None]] = []

    def workers(self) -> int:
        """``num_workers`` of the side the next batch feeds (asked by :class:`SwitchingLoader`)."""
        return (self.plan[0][0] if self.plan else self.side).num_workers or 0

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.seed = int(torch.randint(0, 2**30, ()))  # inside the fit: tune() sets the RNGs back afterwards
        pipeline = add_stage(trainer, pl_module, "tune-seed", self._seed_batch, "decode")
        self._undo.append(lambda: pipeline.remove("tune-seed"))
        if self.layouts:
            self.names = set(convert_module_to_channels_last(pl_module).converted)
            convert = BatchToChannelsLast()
            add_stage(
                trainer, pl_module, "tune-layout", lambda b, i: convert(b) if self.side.channels_last else b, "layout"
            )
            self._undo.append(lambda: pipeline.remove("tune-layout"))
            self._layout(pl_module, [], self.side.channels_last)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        trainer.strategy.lr_scheduler_configs = []
        if pl_module.device.type == "cuda":
            self.timeline.clock = CudaEventClock()
        self._undo.append(watch_fetch(trainer, self.timeline))

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.timeline.restart()
        tag = self.plan[0][1] if self.tags and self.plan else None
        if tag is not None and tag not in self.redone:  # an epoch boundary cut this window: again, once
            self.redone.add(tag)
            done = self.tags.count(tag)
            self.tags = [None if t == tag else t for t in self.tags]
            self.plan[:0] = [(self.side, None)] * (1 + head_start(self.loader)) + [(self.side, tag)] * done

    def _seed_batch(self, batch: Any, dataloader_idx: int) -> Any:
        tag = self.plan[0][1] if self.plan else None
        if tag is not None:
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
        auto = trainer.lightning_module.automatic_optimization
        self.per_batch = 1 / trainer.accumulate_grad_batches if auto else trainer.global_step / (len(self.tags) + 1)
        self.tags.append(self.plan.pop(0)[1] if self.plan else None)
        if not self.plan:
            more = self.serve(self.results()) if trainer.world_size == 1 else None
            if not more:
                trainer.should_stop = True
                return
            self.plan = list(more)
        if self.plan[0][0].channels_last != self.side.channels_last:
            self._layout(pl_module, trainer.optimizers, self.plan[0][0].channels_last)
        self.side = self.plan[0][0]

    def results(self) -> dict[Any, Any]:
        """The windows measured so far (see the class docstring); reads the step clock (CUDA: waits for it)."""
        self.timeline.drain(block=True)
        windows: dict[Any, Any] = {}
        for tag, (step_s, wait_s, samples) in zip(self.tags, self.timeline.timer.rows):  # type: ignore[attr-defined]
            if tag is not None:
                w = windows.setdefault(tag, [0, 0.0, 0.0, []])
                w[0], w[1], w[2] = w[0] + samples, w[1] + step_s, w[2] + wait_s
                w[3].append(step_s)
        return {**windows, "elapsed": time.perf_counter(), "steps_per_batch": self.per_batch}

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
            for opt in optimizers:
                state = getattr(opt, "optimizer", opt).state.get(t, {})
                for key, value in state.items():
                    if torch.is_tensor(value) and value.shape == t.shape:
                        state[key] = convert(value)


def rate(window: Optional[Sequence[Any]]) -> float:
    """Images/s of a window of :class:`Probe`'s results (NaN if missing)."""
    return window[0] / window[1] if window and window[1] > 0 else math.nan
