"""The measuring callback of tune()'s fits: :class:`Probe` runs a *plan* of steps in one fit, each a
:class:`Step` of a candidate and its timing window (``tag`` ``None``: an untimed step), switching
channels_last and the loader (:class:`SwitchingLoader`) in place between steps. Step seconds come from
:mod:`lightning_efficient.functional.timing`."""

from __future__ import annotations

import contextlib
import random
import time
from functools import partial
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import torch
from pytorch_lightning.utilities.data import extract_batch_size

from lightning_efficient.adapter import Callback
from lightning_efficient.fetch_timing import watch_fetch
from lightning_efficient.functional import layout
from lightning_efficient.functional.measurement import Measurement
from lightning_efficient.functional.timing import CudaEventClock, HostClock, StepTimeline
from lightning_efficient.pipeline import add_stage
from lightning_efficient.tuning.records import Candidate, Measured, StepRow, Tag


class Step(NamedTuple):
    """One planned training step: the settings it runs with and its timing window (``None``: untimed)."""

    candidate: Candidate
    tag: Optional[Tag]


class SwitchingLoader:
    """Training data drawn from one loader per ``num_workers`` value: each batch from the loader
    ``side()`` names when it is fetched (Lightning fetches a sized loader's batch after the previous
    step). Each loader's iterator lives through an epoch, so its workers run as they would alone."""

    def __init__(self, loaders: dict[int, Any], side: Callable[[], int]) -> None:
        self.loaders = loaders
        self.side = side

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


class Probe(Callback):
    """Runs ``plan`` in one fit, then ``serve(measured)``'s further steps until it returns ``None``.
    ``measured`` (:class:`~lightning_efficient.tuning.records.Measured`) holds each completed window's
    steps, the seconds since ``started`` (a ``time.perf_counter()`` value) and the optimizer steps per
    batch (under DDP: rank 0's, broadcast at the end of fit). ``layouts``: switch channels_last between
    steps. Common random numbers: the ``j``-th steps of the two windows of a pair seed the torch and
    Python RNGs alike as the batch enters the batch pipeline, so that a costly random augmentation falls
    on both sides."""

    def __init__(
        self, plan: Sequence[Step], serve: Callable[[Measured], Any], layouts: bool, started: float
    ) -> None:
        self.plan = [Step(*step) for step in plan]
        self.serve = serve
        self.layouts = layouts
        self.started = started
        self.side = self.plan[0].candidate
        self.tags: list[Optional[Tag]] = []  # the tag of every step run, in order
        self.measurement = Measurement()  # every step, labelled by its tag
        self.timeline = StepTimeline(HostClock(), self.measurement)
        self.seed = 0
        self.per_batch = 1.0
        self.names = set[str]()
        self.undo: list[Callable[[], Any]] = []

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.seed = int(
            torch.randint(0, 2**30, ())
        )  # inside the fit: tune() sets the RNGs back afterwards
        stages: dict[str, tuple[Callable[[Any, int], Any], str]] = {
            "tune-seed": (self.seed_batch, "decode")
        }
        if self.layouts:
            self.names = set(layout.convert_module_to_channels_last(pl_module).converted)
            convert = layout.BatchToChannelsLast()
            stages["tune-layout"] = (lambda b, i: convert(b) if self.side.channels_last else b, "layout")
            self.switch_layout(pl_module, [], self.side.channels_last)
        for name, (fn, kind) in stages.items():
            self.undo.append(partial(add_stage(trainer, pl_module, name, fn, kind).remove, name))

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        # No LR schedulers (a val-metric monitor would fail), except in manual optimization: the user
        # steps them.
        kept = [] if pl_module.automatic_optimization else trainer.lr_scheduler_configs
        trainer.strategy.lr_scheduler_configs = kept
        self.timeline.clock = CudaEventClock() if pl_module.device.type == "cuda" else HostClock()
        self.undo.append(watch_fetch(trainer, self.timeline))

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        # a window an epoch end cuts pays the loader's restart, as the real run does
        self.timeline.restart()

    def seed_batch(self, batch: Any, dataloader_idx: int) -> Any:
        """Seed the RNGs for the next planned step (a stage of the batch pipeline)."""
        if self.plan and (tag := self.plan[0].tag) is not None:
            seed = (self.seed + hash((tag.serial, tag.index, self.tags.count(tag)))) % 2**31
            torch.manual_seed(seed)
            random.seed(seed)
        return batch

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.timeline.batch_started()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        samples = 1  # an exotic batch counts as one sample
        with contextlib.suppress(Exception):
            samples = int(extract_batch_size(batch))
        tag = self.plan.pop(0).tag if self.plan else None
        self.timeline.batch_ended(samples, label=tag)
        self.tags.append(tag)
        steps = trainer.global_step / len(self.tags)
        self.per_batch = (
            1 / trainer.accumulate_grad_batches if pl_module.automatic_optimization else steps
        )
        if not self.plan:
            served = self.serve(self.results()) if trainer.world_size == 1 else None
            self.plan = [Step(*step) for step in served or []]
            trainer.should_stop = not self.plan
        if self.plan and self.plan[0].candidate.channels_last != self.side.channels_last:
            self.switch_layout(pl_module, trainer.optimizers, self.plan[0].candidate.channels_last)
        self.side = self.plan[0].candidate if self.plan else self.side

    def results(self) -> Measured:
        """The windows measured so far; reads the step clock (CUDA: waits for it)."""
        self.timeline.drain(block=True)
        measured = Measured(elapsed_s=time.perf_counter() - self.started, steps_per_batch=self.per_batch)
        for label, row in zip(self.measurement.labels, self.measurement.rows(), strict=True):
            if isinstance(label, Tag):
                measured.windows.setdefault(label, []).append(StepRow(*row))
        return measured

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.world_size > 1:  # separate fits only: every rank decides from rank 0's windows
            self.serve(trainer.strategy.broadcast(self.results(), src=0))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        while self.undo:
            self.undo.pop()()

    def switch_layout(self, pl_module: Any, optimizers: Any, channels_last: bool) -> None:
        """The converted parameters and buffers, their gradients and optimizer state to ``channels_last``
        (or back to NCHW)."""
        # to_channels_last / to_nchw, not .contiguous(): a depthwise [C, 1, k, k] weight is contiguous in
        # both layouts.
        convert = layout.to_channels_last if channels_last else layout.to_nchw
        tensors = {**dict(pl_module.named_parameters()), **dict(pl_module.named_buffers())}
        for t in (tensors[n] for n in self.names if n in tensors):
            t.data = convert(t.data)
            if isinstance(t, torch.nn.Parameter) and t.grad is not None:
                t.grad = convert(t.grad)
            for opt in optimizers:
                state = getattr(opt, "optimizer", opt).state.get(t, {})
                matching = {k: v for k, v in state.items() if torch.is_tensor(v) and v.shape == t.shape}
                state.update({k: convert(v) for k, v in matching.items()})
