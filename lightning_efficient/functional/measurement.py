"""The one record of measured training steps, as ``torch.utils.benchmark``'s ``Measurement``: the raw figures of
every step (seconds of data wait, on-device transforms, compute and the rest; images; a label), with the summaries
computed from them when asked (sums, shares, images/s, median and spread, per label).

:class:`~lightning_efficient.functional.timing.StepTimeline` feeds it (:meth:`Measurement.add`), one clock per
fit: EfficiencyReport (its figures, and the images/s per image side under ProgressiveResize, labelled by side),
tune()'s measuring fits (labelled by timing window) and the benchmarks read the same record.

Definitions (per training batch; the exact marks and clocks are in :mod:`lightning_efficient.functional.timing`):

- *data wait*: seconds the step waited for the DataLoader to hand over the batch (around the fetch, host time).
- *device transforms*: seconds in the :class:`~lightning_efficient.pipeline.BatchPipeline` stages (GPUDecode,
  GPUAugmentation, ChannelsLast).
- *compute*: seconds from ``on_train_batch_start`` to ``on_train_batch_end`` (forward, backward, optimizer step).
- *other*: the rest of the step: the host-to-device copy, batch hooks, and other callbacks' work between steps
  (e.g. a checkpoint saved every N steps).
"""

from __future__ import annotations

import math
import os
import resource
import statistics
from array import array
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterator, NamedTuple, Optional


def process_rss_bytes() -> int:
    """Resident set size of this process in bytes (``/proc/self/statm``; peak RSS where that is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Row(NamedTuple):
    """One step of a :class:`Measurement`: its seconds, the seconds of them spent waiting for data, its
    images."""

    seconds: float
    data_wait_s: float
    images: int


def _floats() -> array:
    return array("d")


def _ints() -> array:
    return array("q")


@dataclass
class Measurement:
    """Every training step after the first ``skip_first``: raw per-step figures, summaries on demand.

    Attributes:
        skip_first: first training batches left out (worker start-up, kernel selection and allocation warm-up
            make them unrepresentative); ``seen``: batches offered, counted ones included.
        waits, transforms, computes, others: per-step seconds of data wait, on-device transforms, compute and
            the rest of the step (see the module docstring); ``images``: per-step images.
        labels: per-step labels (``None``: none), e.g. the image side or a timing window.
        peak_memory_bytes: peak CUDA memory allocated, or peak process RSS on CPU (set by the owner).
        samples, data_wait_s, transform_s, compute_s, other_s: the sums over the counted steps (kept as they
            are added, so that reading them during training costs nothing).
    """

    skip_first: int = 0
    seen: int = 0
    waits: array = field(default_factory=_floats)
    transforms: array = field(default_factory=_floats)
    computes: array = field(default_factory=_floats)
    others: array = field(default_factory=_floats)
    images: array = field(default_factory=_ints)
    labels: list[Optional[Hashable]] = field(default_factory=list)
    peak_memory_bytes: int = 0
    samples: int = 0
    data_wait_s: float = 0.0
    transform_s: float = 0.0
    compute_s: float = 0.0
    other_s: float = 0.0

    def add(
        self,
        data_wait_s: float,
        transform_s: float,
        compute_s: float,
        samples: int,
        other_s: float = 0.0,
        label: Optional[Hashable] = None,
    ) -> None:
        """Record one training batch (ignored while the first ``skip_first`` batches pass); negative seconds
        count as 0."""
        self.seen += 1
        if self.seen <= self.skip_first:
            return
        wait, transform = max(data_wait_s, 0.0), max(transform_s, 0.0)
        compute, other = max(compute_s, 0.0), max(other_s, 0.0)
        self.waits.append(wait)
        self.transforms.append(transform)
        self.computes.append(compute)
        self.others.append(other)
        self.images.append(int(samples))
        self.labels.append(label)
        self.samples += int(samples)
        self.data_wait_s += wait
        self.transform_s += transform
        self.compute_s += compute
        self.other_s += other

    # ---------------------------------------------------------------- raw views
    @property
    def seconds(self) -> list[float]:
        """Per-step seconds: data wait + transforms + compute + other."""
        parts = zip(self.waits, self.transforms, self.computes, self.others, strict=True)
        return [w + t + c + o for w, t, c, o in parts]

    def rows(self) -> list[Row]:
        """Per step: ``(seconds, data-wait seconds, images)``."""
        return [Row(s, w, n) for s, w, n in zip(self.seconds, self.waits, self.images, strict=True)]

    def select(self, label: Optional[Hashable]) -> "Measurement":
        """The steps labelled ``label``, as a measurement of their own."""
        return self.by_label().get(label) or Measurement(peak_memory_bytes=self.peak_memory_bytes)

    def by_label(self) -> dict[Optional[Hashable], "Measurement"]:
        """One measurement per label (of the steps with that label), in the order the labels first appeared."""
        out: dict[Optional[Hashable], Measurement] = {}
        for i, label in enumerate(self.labels):
            part = out.setdefault(label, Measurement(peak_memory_bytes=self.peak_memory_bytes))
            part.add(self.waits[i], self.transforms[i], self.computes[i], self.images[i], self.others[i], label)
        return out

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    def __len__(self) -> int:
        return len(self.images)

    # ---------------------------------------------------------------- sums
    @property
    def steps(self) -> int:
        """Training batches counted."""
        return len(self.images)

    @property
    def step_s(self) -> float:
        """Total measured seconds: data wait + device transforms + compute + other."""
        return self.data_wait_s + self.transform_s + self.compute_s + self.other_s

    # ---------------------------------------------------------------- summaries
    def _share(self, seconds: float) -> float:
        total = self.step_s
        return seconds / total if total > 0 else math.nan

    @property
    def images_per_s(self) -> float:
        """Training throughput in samples (images) per second; NaN before any step is counted."""
        total = self.step_s
        return self.samples / total if total > 0 else math.nan

    @property
    def data_wait_share(self) -> float:
        """Fraction of step time spent waiting for data, in [0, 1]; NaN before any step is counted."""
        return self._share(self.data_wait_s)

    @property
    def transform_share(self) -> float:
        """Fraction of step time spent in on-device batch transforms, in [0, 1]."""
        return self._share(self.transform_s)

    @property
    def other_share(self) -> float:
        """Fraction of step time spent outside fetch, transforms and compute (transfer, hooks, callbacks)."""
        return self._share(self.other_s)

    @property
    def median(self) -> float:
        """The median seconds per step (NaN without steps)."""
        seconds = self.seconds
        return statistics.median(seconds) if seconds else math.nan

    @property
    def spread(self) -> float:
        """The interquartile range of the seconds per step (NaN below 2 steps)."""
        seconds = self.seconds
        if len(seconds) < 2:
            return math.nan
        low, _, high = statistics.quantiles(seconds, n=4)
        return high - low

    def as_dict(self) -> dict[str, Any]:
        """The figures under stable names (``images_per_s``, ``data_wait_share``, ...)."""
        return {
            "steps": self.steps,
            "samples": self.samples,
            "images_per_s": self.images_per_s,
            "data_wait_share": self.data_wait_share,
            "transform_share": self.transform_share,
            "other_share": self.other_share,
            "step_time_s": self.step_s / self.steps if self.steps else math.nan,
            "peak_memory_mb": self.peak_memory_bytes / 2**20,
        }
