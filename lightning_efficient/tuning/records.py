"""tune()'s named records: what is measured (:class:`Candidate`), what the search asks for
(:class:`Request`) and is answered (:class:`Window`, :class:`Pair`, :class:`MeasurementError`), the
verdicts (:class:`Verdict`), the timing windows of the measuring fits (:class:`Tag`, :class:`StepRow`,
:class:`Measured`) and the arguments and options of a call (:class:`Asked`, :class:`Options`). Plain
data: no Trainer, no clock."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, Optional


@dataclass(frozen=True)
class Candidate:
    """One configuration of the factors.

    Attributes:
        precision: Lightning's precision string.
        channels_last: with the ChannelsLast callback.
        compile: compiled (:func:`~lightning_efficient.tuning.result.compile_submodules`).
        num_workers: the training loader's ``num_workers``; ``None``: as given.
    """

    precision: str = "32-true"
    channels_last: bool = False
    compile: bool = False
    num_workers: Optional[int] = None

    def label(self) -> str:
        """Short text, e.g. ``"32-true, channels_last, workers=1"``."""
        parts = [self.precision]
        parts += ["channels_last"] * self.channels_last
        parts += ["compile"] * self.compile
        parts += [f"workers={self.num_workers}"] * (self.num_workers is not None)
        return ", ".join(parts)


class Verdict(StrEnum):
    """How a change of one factor was decided (:func:`~lightning_efficient.tuning.policy.judge`);
    ``MORE``: not yet, measure one more pair. Members are strings: ``Verdict.KEPT == "kept"``."""

    KEPT = "kept"
    RULED_OUT = "ruled out"
    UNDECIDED = "undecided"
    NOT_MEASURED = "not measured"
    FAILED = "failed"
    MORE = "more"


class RequestKind(StrEnum):
    """What :func:`~lightning_efficient.tuning.policy.search` asks for: the current settings' step time
    (``BASELINE``), or one pair of windows of a change and the setting it would replace (``PAIR``)."""

    BASELINE = "baseline"
    PAIR = "pair"


@dataclass(frozen=True)
class Request:
    """What the search asks for.

    Attributes:
        kind: ``"baseline"`` (``new``'s step time after a warm-up) or ``"pair"`` (adjacent windows of
            ``new`` and ``old``).
        new: the settings to measure (for a pair, with the factor changed).
        old: the settings in use.
        factor: the factor a pair measures (``""`` for the baseline).
        index: the pair's number; ``old`` is measured first when it is even.
    """

    kind: RequestKind
    new: Candidate
    old: Candidate
    factor: str = ""
    index: int = 0


@dataclass(frozen=True)
class Window:
    """The answer to ``"baseline"``, as rank 0 measured it.

    Attributes:
        step_s: the median seconds per batch.
        data_wait: the share (0-1) of those seconds spent waiting for data.
        batch_size: images per batch.
        elapsed_s: seconds since tuning began.
        planned_batches: the planned run's batches; ``None``: no planned length.
        steps_per_batch: optimizer steps per batch (below 1 with gradient accumulation).
    """

    step_s: float
    data_wait: float
    batch_size: int
    elapsed_s: float
    planned_batches: Optional[int] = None
    steps_per_batch: float = 1.0


#: The baseline of a result that measured nothing (not a number: nothing was timed).
NO_WINDOW = Window(step_s=math.nan, data_wait=math.nan, batch_size=0, elapsed_s=0.0)


@dataclass(frozen=True)
class Pair:
    """The answer to ``"pair"``.

    Attributes:
        new_rate: images/s of ``new`` in its window.
        old_rate: images/s of ``old`` in the adjacent window.
        elapsed_s: seconds since tuning began.
        new_warmup_s: for separate fits, the warm-up seconds of ``new``'s fit (where compilation
            happens); NaN in one fit.
        old_warmup_s: the same for ``old``'s fit.
    """

    new_rate: float
    old_rate: float
    elapsed_s: float
    new_warmup_s: float = math.nan
    old_warmup_s: float = math.nan


class MeasurementError(Exception):
    """Thrown into the search when a requested measurement raised (the text names the error)."""


class Side(StrEnum):
    """Which steps a timing window holds: the baseline's, a pair's old or new side (in one fit), or a
    separate fit's warm-up or window."""

    BASE = "base"
    OLD = "old"
    NEW = "new"
    WARM = "warm"
    WINDOW = "window"


@dataclass(frozen=True)
class Tag:
    """The timing window a step belongs to.

    Attributes:
        serial: the serial number of the request (or fit) that planned it.
        side: which steps of it (:class:`Side`).
        index: the pair's number.
    """

    serial: int
    side: Side
    index: int = 0


class StepRow(NamedTuple):
    """One timed step: its seconds, the seconds of them spent waiting for data, its images."""

    seconds: float
    data_wait_s: float
    images: int


@dataclass
class Measured:
    """What a measuring fit hands back (under DDP: rank 0's).

    Attributes:
        windows: each completed window's steps, by :class:`Tag`.
        elapsed_s: seconds since tuning began.
        steps_per_batch: optimizer steps per batch.
    """

    windows: dict[Tag, list[StepRow]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    steps_per_batch: float = 1.0

    def window(self, serial: int, side: Side, index: int = 0) -> list[StepRow]:
        """The steps of one window (empty if it did not complete).

        Args:
            serial: the serial number of the request (or fit) that planned it.
            side: which steps of it.
            index: the pair's number.
        """
        return self.windows.get(Tag(serial, side, index), [])


@dataclass(frozen=True)
class Asked:
    """The factors as :func:`~lightning_efficient.tune` was asked to measure them.

    Attributes:
        precisions: ``tune(precisions=)``.
        channels_last: ``tune(channels_last=)``.
        compile: ``tune(compile=)``.
        num_workers: ``tune(num_workers=)``.
    """

    precisions: Any = None
    channels_last: Any = True
    compile: Any = None
    num_workers: Any = None


@dataclass
class Options:
    """What :func:`~lightning_efficient.tuning.policy.plan_options` plans.

    Attributes:
        values: the values to try per factor.
        defaults: ``recipe()``'s default of each factor, where it is among them.
        notes: why a factor is not measured.
    """

    values: dict[str, list[Any]]
    defaults: dict[str, Any]
    notes: list[str] = field(default_factory=list)
