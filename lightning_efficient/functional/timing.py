"""Clocks and the step timeline: per training batch, data wait / on-device transforms / compute, without stalls.

A training batch is cut into intervals by marks taken from Lightning's hooks:

- ``end[i-1]``: the end of the previous batch (or the start of the epoch, or the end of a validation run);
- ``f0[i]``, ``f1[i]``: around the fetch of the batch from the DataLoader (host time, always);
- ``t0[i]``, ``t1[i]``: around this package's on-device batch transforms (``GPUDecode``, ``GPUAugmentation``,
  ``ChannelsLast``), zero or more pairs;
- ``start[i]``: ``on_train_batch_start``; ``end[i]``: ``on_train_batch_end``.

Then the *step* = ``end[i] - end[i-1]``; *data wait* = ``f1 - f0``, the time the step waited for the loader;
*transforms* = the sum of ``t1 - t0``; *compute* = ``end[i] - start[i]`` (forward, backward, optimizer step); and
*other* = the rest of the step: the host-to-device copy, batch hooks, and other callbacks' work between steps
(e.g. a checkpoint saved every N steps). Without fetch marks (a loader Lightning does not fetch through its data
fetcher) the data wait is the gap before ``start[i]`` less the transforms, and *other* is 0.

With :class:`HostClock` the marks are host seconds, which is exact on the CPU, where every op finishes before the
host moves on. On CUDA, host times of asynchronous kernel launches say little, and synchronizing at every mark
would serialise the pipeline. :class:`CudaEventClock` therefore records CUDA events on the current stream and
reads them later: the step, transform and compute marks are the times at which the **GPU** reached them; the
fetch stays in host time (the host waits for the loader). Events are resolved lazily (:meth:`StepTimeline.drain`),
a step or two behind, and all of them at the end of fit; nothing synchronizes while training runs. Source: CUDA
Programming Guide, "Events"; PyTorch ``torch.cuda.Event``.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional, Protocol

import torch

from lightning_efficient.functional.measurement import Measurement


class Clock(Protocol):
    """Where marks come from and how two of them give seconds."""

    def mark(self) -> Any:
        """A new mark, taken now (host) or queued now (device)."""

    def ready(self, mark: Any) -> bool:
        """Whether ``mark`` can be read without waiting."""

    def wait(self, mark: Any) -> None:
        """Block until ``mark`` can be read."""

    def seconds(self, a: Any, b: Any) -> float:
        """Seconds from mark ``a`` to mark ``b``."""


class HostClock:
    """Marks are host seconds from :func:`time.perf_counter`; always ready."""

    def mark(self) -> float:
        return time.perf_counter()

    def ready(self, mark: float) -> bool:
        return True

    def wait(self, mark: float) -> None:
        return None

    def seconds(self, a: float, b: float) -> float:
        return b - a


class HostEvent:
    """A stand-in for ``torch.cuda.Event(enable_timing=True)`` that records host time: ``record()``, ``query()``,
    ``synchronize()``, ``elapsed_time(other)`` in milliseconds. ``CudaEventClock(HostEvent)`` runs the CUDA timing
    code on a machine without CUDA (tests, ``benchmarks/gpu_suite.py --dry-run``)."""

    def __init__(self) -> None:
        self.time: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        self.time = time.perf_counter()

    def query(self) -> bool:
        return self.time is not None

    def synchronize(self) -> None:
        if self.time is None:
            raise RuntimeError("HostEvent.synchronize() before record()")

    def elapsed_time(self, end: "HostEvent") -> float:
        if self.time is None or end.time is None:
            raise RuntimeError("HostEvent.elapsed_time() needs both events recorded")
        return 1000.0 * (end.time - self.time)


class CudaEventClock:
    """Marks are CUDA events recorded on the current stream of the current device; never synchronizes to mark.

    Args:
        event_factory: makes a new timing event; default ``torch.cuda.Event(enable_timing=True)``. Tests pass an
            object with the same ``record()``/``query()``/``synchronize()``/``elapsed_time(other)`` methods
            (milliseconds, as CUDA's) to run this code on a machine without CUDA.
    """

    def __init__(self, event_factory: Optional[Callable[[], Any]] = None) -> None:
        self._new = event_factory or (lambda: torch.cuda.Event(enable_timing=True))

    def mark(self) -> Any:
        event = self._new()
        event.record()
        return event

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def wait(self, mark: Any) -> None:
        mark.synchronize()

    def seconds(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1000.0


@dataclass
class _Step:
    previous_end: Any
    transforms: list[tuple[Any, Any]]
    start: Any
    end: Any
    samples: int
    fetch_s: Optional[float]
    label: Optional[Hashable] = None


@dataclass
class StepTimeline:
    """Collects the marks of each training batch and feeds a
    :class:`~lightning_efficient.functional.measurement.Measurement` in order, once they can be read.

    Call :meth:`restart` where waiting time must not be counted (epoch start, after validation),
    :meth:`fetch_started`/:meth:`fetch_stopped` around the fetch (``lightning_efficient.fetch_timing.watch_fetch``
    does), :meth:`transform_started`/:meth:`transform_stopped` around on-device transforms, :meth:`batch_started`
    and :meth:`batch_ended` from the batch hooks, and :meth:`drain` with ``block=True`` before reading the timer.

    Attributes:
        clock: :class:`HostClock` or :class:`CudaEventClock`.
        timer: the :class:`~lightning_efficient.functional.measurement.Measurement` that receives one
            ``add(data_wait_s, transform_s, compute_s, samples, other_s, label)`` per batch, in order.
    """

    clock: Clock
    timer: Measurement
    _previous_end: Any = None
    _transforms: list = field(default_factory=list)
    _open: Any = None
    _start: Any = None
    _pending: deque = field(default_factory=deque)
    _fetch: list = field(default_factory=list)

    def restart(self) -> None:
        """The next batch's step counts from now; transforms seen so far (e.g. validation's) are dropped."""
        self._previous_end = self.clock.mark()
        self._transforms = []
        self._open = None

    def fetch_started(self) -> None:
        self._fetch = [time.perf_counter()]

    def fetch_stopped(self) -> None:
        if len(self._fetch) == 1:
            self._fetch.append(time.perf_counter())

    def transform_started(self) -> None:
        self._open = self.clock.mark()

    def transform_stopped(self) -> None:
        if self._open is not None:
            self._transforms.append((self._open, self.clock.mark()))
            self._open = None

    #: A timeline is itself a clock of the batch pipeline (:meth:`BatchPipeline.add_clock
    #: <lightning_efficient.pipeline.BatchPipeline.add_clock>`): its stages are the on-device transforms.
    start = transform_started
    stop = transform_stopped

    def batch_started(self) -> None:
        self._start = self.clock.mark()
        if self._previous_end is None:  # no restart() before the first batch: count no wait for it
            self._previous_end = self._start
            self._transforms = []

    def batch_ended(self, samples: int, label: Optional[Hashable] = None) -> None:
        """Close the batch (``samples`` images, labelled ``label``) and feed the timer with every batch whose
        marks are readable."""
        if self._start is None:
            return
        end = self.clock.mark()
        fetch = self._fetch[1] - self._fetch[0] if len(self._fetch) == 2 else None
        step = _Step(self._previous_end, self._transforms, self._start, end, int(samples), fetch, label)
        self._pending.append(step)
        self._previous_end, self._transforms, self._start, self._fetch = end, [], None, []
        self.drain(block=False)

    def drain(self, block: bool = False) -> None:
        """Feed the timer with the oldest pending batches: those already readable, or all with ``block=True``."""
        while self._pending:
            step = self._pending[0]
            if block:
                self.clock.wait(step.end)
            elif not self.clock.ready(step.end):
                return
            self._pending.popleft()
            seconds = self.clock.seconds
            transform = sum(seconds(a, b) for a, b in step.transforms)
            gap = max(seconds(step.previous_end, step.start) - transform, 0.0)
            wait = gap if step.fetch_s is None else step.fetch_s
            compute, other = seconds(step.start, step.end), max(gap - wait, 0.0)
            self.timer.add(wait, transform, compute, step.samples, other, label=step.label)
