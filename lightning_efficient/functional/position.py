"""A training run's position in fractional epochs, the input of every per-step schedule (pure: no Lightning).

The position of an optimizer update is ``e + min(k, S) / S`` epochs: ``e`` epochs have happened before it
(whatever their lengths), it is the update with 0-based index ``k`` within epoch ``e``, and ``S`` updates per
epoch are planned. So every epoch starts at its integer ``e`` even when the one before it ended early, and an
epoch longer than planned holds ``e + 1`` until it ends. :mod:`lightning_efficient.progress` reads ``e``, ``k``
and ``S`` from a Lightning Trainer; :class:`~lightning_efficient.StepwiseLR` evaluates LR schedules there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["EpochPosition", "optimizer_steps_per_epoch", "step_in_epoch"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class EpochPosition:
    """Where an optimizer update falls, in epochs; ``float(position)`` is ``epoch + fraction``.

    Attributes:
        epoch: epochs that happened before this one (an int ``>= 0``), each counted once whatever its length.
        step: 0-based index of the optimizer update within the epoch (an int ``>= 0``, in optimizer steps).
        steps_per_epoch: planned optimizer steps per epoch (``S``, an int ``>= 1``).

    Raises:
        ValueError: a field is not an int in its range.
    """

    epoch: int
    step: int
    steps_per_epoch: int

    def __post_init__(self) -> None:
        for name, low in (("epoch", 0), ("step", 0), ("steps_per_epoch", 1)):
            value = getattr(self, name)
            if not _is_int(value) or value < low:
                raise ValueError(f"EpochPosition: {name} must be an int >= {low}, got {value!r}.")

    @property
    def fraction(self) -> float:
        """Part of the epoch done before this update, in epochs: ``min(step / steps_per_epoch, 1.0)``."""
        return min(self.step / self.steps_per_epoch, 1.0)

    @property
    def overrun(self) -> bool:
        """Whether the epoch has more updates than planned (``step >= steps_per_epoch``; the position holds at
        ``epoch + 1``)."""
        return self.step >= self.steps_per_epoch

    def __float__(self) -> float:
        return self.epoch + self.fraction


def optimizer_steps_per_epoch(num_batches: int, accumulate_grad_batches: int = 1) -> int:
    """Optimizer steps in an epoch of ``num_batches`` batches: ``ceil(num_batches / accumulate_grad_batches)``.

    A partial last accumulation window is one more step (Lightning steps the optimizer at an epoch's last batch).

    Args:
        num_batches: training batches in the epoch (an int ``>= 0``). ``0`` gives ``1``: no update happens, and
            any ``S >= 1`` will do.
        accumulate_grad_batches: batches per optimizer step (an int ``>= 1``).

    Returns:
        Optimizer steps per epoch, ``>= 1``.

    Raises:
        ValueError: ``num_batches`` is not an int ``>= 0`` or ``accumulate_grad_batches`` not an int ``>= 1``.
    """
    if not _is_int(num_batches) or num_batches < 0:
        raise ValueError(f"num_batches must be an int >= 0, got {num_batches!r}.")
    if not _is_int(accumulate_grad_batches) or accumulate_grad_batches < 1:
        raise ValueError(f"accumulate_grad_batches must be an int >= 1, got {accumulate_grad_batches!r}.")
    return max(math.ceil(num_batches / accumulate_grad_batches), 1)


def step_in_epoch(batch_idx: int, accumulate_grad_batches: int = 1) -> int:
    """0-based index, in optimizer steps, of the update that batch ``batch_idx`` of an epoch contributes to.

    Args:
        batch_idx: 0-based batch index within the epoch (an int ``>= 0``).
        accumulate_grad_batches: batches per optimizer step (an int ``>= 1``).

    Returns:
        ``batch_idx // accumulate_grad_batches``.

    Raises:
        ValueError: ``batch_idx`` is not an int ``>= 0`` or ``accumulate_grad_batches`` not an int ``>= 1``.
    """
    if not _is_int(batch_idx) or batch_idx < 0:
        raise ValueError(f"batch_idx must be an int >= 0, got {batch_idx!r}.")
    if not _is_int(accumulate_grad_batches) or accumulate_grad_batches < 1:
        raise ValueError(f"accumulate_grad_batches must be an int >= 1, got {accumulate_grad_batches!r}.")
    return batch_idx // accumulate_grad_batches
