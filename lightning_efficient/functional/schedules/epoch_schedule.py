"""Schedules written in epochs for ``LambdaLR``: :class:`EpochSchedule`, :class:`warmup_cosine`.

An :class:`EpochSchedule` may leave its horizon (``total_epochs``) open and let a training run set it
(:meth:`EpochSchedule.follow_run`, called by :class:`~lightning_efficient.StepwiseLR` with the Trainer's
length); :func:`epoch_schedules` finds them inside a scheduler and its children.
"""

from __future__ import annotations

import math
from typing import Any

from lightning_efficient.functional.schedules.torch_internals import walk_schedulers

__all__ = ["EpochSchedule", "epoch_schedules", "warmup_cosine"]


class EpochSchedule:
    """A multiplicative LR factor as a function of fractional epochs, for ``LambdaLR``.

    Subclasses implement :meth:`factor`. ``total_epochs`` (the horizon) may be left ``None``: the training
    run then sets it through :meth:`follow_run` (:class:`~lightning_efficient.StepwiseLR` does, in
    ``on_train_start``, with ``max_epochs`` or ``max_steps`` converted to epochs). Instances are plain
    callables, so ``LambdaLR(optimizer, warmup_cosine(5))`` works with or without the callback (without it,
    give ``total_epochs``). Attributes are saved in the scheduler's ``state_dict`` like any callable object.

    Attributes:
        total_epochs: the horizon in epochs (a float), or ``None`` while open.
        total_from_run: ``True`` once ``total_epochs`` was set by :meth:`follow_run` rather than by the user.
    """

    total_epochs: float | None = None
    total_from_run: bool = False

    def __call__(self, epoch: float) -> float:
        return self.factor(float(epoch))

    def factor(self, epoch: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def follows_run(self) -> bool:
        """Whether the horizon follows the training run: ``total_epochs`` is open or was set by a run."""
        return self.total_epochs is None or self.total_from_run

    def follow_run(self, total_epochs: float) -> bool:
        """Set the horizon to a training run's length, unless the user fixed ``total_epochs``.

        A schedule reused for a run of another length follows the new length.

        Args:
            total_epochs: length of the run in this schedule's epochs (fractional allowed), ``>= 0``.

        Returns:
            ``True`` if the horizon was set, ``False`` if the user's ``total_epochs`` was kept.

        Raises:
            ValueError: ``total_epochs`` is not a finite number ``>= 0``.
        """
        if not self.follows_run:
            return False
        if (
            isinstance(total_epochs, bool)
            or not isinstance(total_epochs, (int, float))
            or not (math.isfinite(total_epochs) and total_epochs >= 0)
        ):
            raise ValueError(
                f"{type(self).__name__}.follow_run: total_epochs must be a finite number >= 0, got {total_epochs!r}."
            )
        self.total_epochs = float(total_epochs)
        self.total_from_run = True
        return True

    def _need_total(self) -> float:
        if self.total_epochs is None:
            raise ValueError(
                f"{type(self).__name__}: total_epochs is not set. Pass total_epochs=..., or train with the "
                "StepwiseLR callback, which sets it from the Trainer's max_epochs / max_steps."
            )
        return float(self.total_epochs)


class warmup_cosine(EpochSchedule):
    """Linear warmup for ``warmup_epochs``, then half a cosine to ``final_factor`` at ``total_epochs``.

    ``factor(e)`` (``e`` in fractional epochs, a float; the result is a float factor of the base LR):

    - ``e < warmup_epochs``: ``start_factor + (1 - start_factor) * e / warmup_epochs``
    - ``warmup_epochs <= e <= total_epochs``:
      ``final_factor + (1 - final_factor) * (1 + cos(pi * (e - w) / (total_epochs - w))) / 2``
    - ``e > total_epochs``: ``final_factor``

    Args:
        warmup_epochs: warmup length in epochs (float allowed), ``>= 0``.
        total_epochs: end of the cosine in epochs, ``> warmup_epochs``; ``None`` = follow the Trainer's length
            (set by :class:`~lightning_efficient.StepwiseLR` through :meth:`EpochSchedule.follow_run`).
        start_factor: factor at epoch 0, in ``[0, 1]``. Default ``0.0`` (the first update uses LR 0 only if
            ``warmup_epochs > 0``; pick e.g. ``0.01`` to avoid a wasted step).
        final_factor: factor at and after ``total_epochs``, ``>= 0``.

    Raises:
        ValueError: arguments out of range; calling past the warmup while ``total_epochs`` is still ``None``.

    Example:
        ```python
        # in configure_optimizers(), with Trainer(callbacks=[StepwiseLR()])
        schedule = warmup_cosine(warmup_epochs=5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}
        ```
    """

    def __init__(
        self,
        warmup_epochs: float,
        total_epochs: float | None = None,
        start_factor: float = 0.0,
        final_factor: float = 0.0,
    ) -> None:
        if not isinstance(warmup_epochs, (int, float)) or not warmup_epochs >= 0:
            raise ValueError(f"warmup_epochs must be a number >= 0, got {warmup_epochs!r}.")
        if total_epochs is not None and not (isinstance(total_epochs, (int, float)) and total_epochs > warmup_epochs):
            raise ValueError(
                f"total_epochs must be > warmup_epochs ({warmup_epochs}) or None (follow the Trainer), "
                f"got {total_epochs!r}."
            )
        if not 0.0 <= start_factor <= 1.0:
            raise ValueError(f"start_factor must be in [0, 1], got {start_factor!r}.")
        if not final_factor >= 0.0:
            raise ValueError(f"final_factor must be >= 0, got {final_factor!r}.")
        self.warmup_epochs = float(warmup_epochs)
        self.total_epochs = None if total_epochs is None else float(total_epochs)
        self.start_factor = float(start_factor)
        self.final_factor = float(final_factor)

    def factor(self, epoch: float) -> float:
        """The LR factor (of the base LR) at ``epoch``: the linear warmup, then the cosine.

        Args:
            epoch: the position in the run in fractional epochs.
        """
        w = self.warmup_epochs
        if epoch < w:
            return self.start_factor + (1.0 - self.start_factor) * epoch / w
        if epoch == w:
            return 1.0
        total = self._need_total()
        if epoch >= total:
            return self.final_factor
        progress = (epoch - w) / (total - w)
        return self.final_factor + (1.0 - self.final_factor) * (1 + math.cos(math.pi * progress)) / 2

    def __repr__(self) -> str:
        return (
            f"warmup_cosine(warmup_epochs={self.warmup_epochs}, total_epochs={self.total_epochs}, "
            f"start_factor={self.start_factor}, final_factor={self.final_factor})"
        )


def epoch_schedules(scheduler: Any) -> list[EpochSchedule]:
    """The :class:`EpochSchedule` objects among the ``lr_lambdas`` of ``scheduler`` and its nested children.

    Args:
        scheduler: any ``LRScheduler`` (``LambdaLR``, or a ``SequentialLR`` / ``ChainedScheduler`` holding one).

    Returns:
        The schedules in depth-first order (the objects themselves, not copies); ``[]`` if there are none.
    """
    return [
        fn
        for sched in walk_schedulers(scheduler)
        for fn in (getattr(sched, "lr_lambdas", None) or [])
        if isinstance(fn, EpochSchedule)
    ]
