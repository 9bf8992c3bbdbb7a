"""The position of a Lightning training run in fractional epochs: one home for the features that act per step.

:class:`~lightning_efficient.StepwiseLR` evaluates LR schedules at this position; any other schedule written in
fractional epochs (e.g. progressive image resizing, an augmentation-strength ramp) reads it the same way::

    from lightning_efficient.progress import fractional_epoch

    class ProgressiveResize(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            size = self.size_at(fractional_epoch(trainer, batch_idx))  # epochs, e.g. 2.25

The position follows the epochs that really happened. Its integer part is ``trainer.current_epoch``: every
epoch that ran counts once, however many of its batches ran, so an epoch that ended early (``on_train_batch_start``
returned -1, ``trainer.should_stop``, a dataloader whose ``__len__`` overstates) is followed by an epoch that
starts exactly at the next integer, and the part it skipped is never visited. Its fractional part is the share of
the *planned* optimizer steps done before the current batch's update: ``S = ceil(trainer.num_training_batches /
trainer.accumulate_grad_batches)`` on this process (after ``limit_train_batches`` and the DistributedSampler),
recomputed at every call, so dataloaders reloaded with another length are followed too. The pure parts are in
:mod:`lightning_efficient.functional.position`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lightning_efficient.functional.position import EpochPosition, optimizer_steps_per_epoch, step_in_epoch

if TYPE_CHECKING:
    from lightning_efficient.adapter import TrainerLike

__all__ = ["EpochPosition", "epoch_position", "fractional_epoch", "planned_steps_per_epoch", "upcoming_batch"]


def planned_steps_per_epoch(trainer: TrainerLike, steps_per_epoch: int | None = None) -> int | None:
    """Optimizer steps planned per epoch on this process (``S``), or ``None`` where the Trainer cannot know them.

    Args:
        trainer: a ``pytorch_lightning`` or ``lightning.pytorch`` Trainer, from ``on_train_start`` on (before, its
            ``num_training_batches`` is not set yet).
        steps_per_epoch: a known ``S`` (returned as it is), e.g. for a dataloader without ``__len__``.

    Returns:
        ``steps_per_epoch`` if given, else ``ceil(trainer.num_training_batches / trainer.accumulate_grad_batches)``
        (at least 1); ``None`` for a dataloader without ``__len__`` (``num_training_batches`` is infinite).

    Raises:
        ValueError: ``steps_per_epoch`` is not an int ``>= 1``.
    """
    if steps_per_epoch is not None:
        if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be an int >= 1 (optimizer steps) or None, got {steps_per_epoch!r}.")
        return steps_per_epoch
    batches = trainer.num_training_batches
    if batches is None or (isinstance(batches, float) and not math.isfinite(batches)):
        return None
    return optimizer_steps_per_epoch(int(batches), max(int(trainer.accumulate_grad_batches), 1))


def epoch_position(
    trainer: TrainerLike, batch_idx: int | None = None, *, steps_per_epoch: int | None = None
) -> EpochPosition:
    """The position, in epochs, of the optimizer update that batch ``batch_idx`` of the current epoch is part of.

    Read it in a training-batch hook (``on_train_batch_start``, ``training_step``, ``on_before_optimizer_step``,
    ``on_train_batch_end``) with that hook's ``batch_idx``: every batch of one accumulation window gets the
    position of the window's update. With ``batch_idx=None`` (``on_train_epoch_start``, ``on_train_start``) it is
    the start of the current epoch. In ``on_train_epoch_end`` ``trainer.current_epoch`` is still the ending
    epoch; after ``fit`` it counts every epoch that ran (a cut one too), so ``batch_idx=None`` gives the run's
    length in whole epochs.

    Manual optimization: ``step`` counts batches (one update per batch); a feature that counts its own updates
    builds :class:`~lightning_efficient.functional.position.EpochPosition` from its count instead.

    Args:
        trainer: a ``pytorch_lightning`` or ``lightning.pytorch`` Trainer, from ``on_train_start`` on.
        batch_idx: 0-based batch index within the current epoch, or ``None`` for the epoch's start.
        steps_per_epoch: planned optimizer steps per epoch (``S``), overriding the one computed from the Trainer;
            needed for a dataloader without ``__len__``.

    Returns:
        ``EpochPosition(epoch=trainer.current_epoch, step=batch_idx // accumulate_grad_batches, steps_per_epoch=S)``
        (``step=0`` for ``batch_idx=None``); ``float()`` of it is ``epoch + min(step / S, 1)``, in epochs.

    Raises:
        ValueError: ``batch_idx`` is not an int ``>= 0``; ``steps_per_epoch`` is not an int ``>= 1``; the
            dataloader has no ``__len__`` and ``steps_per_epoch`` is not given.
    """
    steps = planned_steps_per_epoch(trainer, steps_per_epoch)
    if steps is None:
        raise ValueError(
            "epoch_position: the train dataloader has no length, so the optimizer steps per epoch are unknown; "
            "pass steps_per_epoch=..."
        )
    step = 0 if batch_idx is None else step_in_epoch(batch_idx, max(int(trainer.accumulate_grad_batches), 1))
    return EpochPosition(epoch=int(trainer.current_epoch), step=step, steps_per_epoch=steps)


def fractional_epoch(
    trainer: TrainerLike, batch_idx: int | None = None, *, steps_per_epoch: int | None = None
) -> float:
    """``float(epoch_position(trainer, batch_idx, steps_per_epoch=...))``: the run's position in epochs.

    ``trainer.current_epoch`` exactly at an epoch's start (``batch_idx=None`` or its first update), then
    ``current_epoch + k / S`` for the epoch's update ``k`` (capped at ``current_epoch + 1`` in an epoch longer
    than planned). Same arguments, hooks and errors as :func:`epoch_position`.

    Raises:
        ValueError: as :func:`epoch_position`.
    """
    return float(epoch_position(trainer, batch_idx, steps_per_epoch=steps_per_epoch))


def upcoming_batch(trainer: TrainerLike) -> int:
    """The index in its epoch of the training batch Lightning is about to run, for code that acts on a batch
    before ``on_train_batch_start`` (the batch-transfer hooks, where a ``batch_idx`` is not given).

    It is the count of batches the epoch has made ready (``trainer.fit_loop.epoch_loop.batch_progress.current
    .ready``), which a resume from a checkpoint saved mid-epoch restores: the first batch after such a resume is
    batch ``k`` of its epoch, not 0 (and ``on_train_epoch_start`` does not run for it). Read it from
    ``on_train_start`` on; in ``on_train_epoch_start`` of a new epoch it still counts the previous epoch's batches
    (use ``fractional_epoch(trainer)`` there, the epoch's start).

    Returns:
        A batch index ``>= 0`` (0 where the Trainer has no such progress, e.g. outside a fit).
    """
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    progress = getattr(getattr(loop, "batch_progress", None), "current", None)
    return max(0, int(getattr(progress, "ready", 0) or 0))
