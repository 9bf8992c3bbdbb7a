"""Evaluating schedules: LRs at fractional epochs, per optimizer step, per epoch (reference), and horizons.

All functions are pure: the scheduler you pass is neither stepped nor modified.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

from torch.optim import lr_scheduler as _sched

from lightning_efficient.functional.schedules import torch_internals
from lightning_efficient.functional.schedules.epoch_schedule import EpochSchedule
from lightning_efficient.functional.schedules.registry import schedule_function

__all__ = [
    "check_count",
    "check_epoch",
    "epochwise_lrs",
    "lr_at",
    "schedule_horizon",
    "scheduler_epoch",
    "stepwise_lrs",
]


def check_epoch(epoch: float) -> None:
    """Raise ``ValueError`` unless ``epoch`` is a finite number ``>= 0``."""
    if not isinstance(epoch, (int, float)) or not math.isfinite(epoch) or epoch < 0:
        raise ValueError(f"epoch must be a finite number >= 0 (fractional epochs), got {epoch!r}.")


def check_count(value: Any, name: str, minimum: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an ``int`` (not a bool) ``>= minimum``; ``name`` is quoted."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")


def lr_at(scheduler: Any, epoch: float) -> list[float]:
    """LRs (floats, one per param group) of ``scheduler`` at fractional epoch ``epoch >= 0``.

    Raises:
        ValueError: ``epoch`` is negative or not finite.
        UnsupportedSchedulerError: see :func:`~lightning_efficient.functional.schedules.schedule_function`.
    """
    check_epoch(epoch)
    return schedule_function(scheduler)(float(epoch))


def stepwise_lrs(scheduler: Any, steps_per_epoch: int, num_steps: int) -> list[list[float]]:
    """LRs of the first ``num_steps`` optimizer updates when ``scheduler`` runs per optimizer step.

    Update ``k`` (0-based) uses ``fn(k / steps_per_epoch)``; at ``k = e * steps_per_epoch`` that is the LR the
    epoch-wise scheduler uses in epoch ``e``.

    Args:
        scheduler: an epoch-interval scheduler (not modified).
        steps_per_epoch: optimizer updates per epoch (``S``), ``>= 1``.
        num_steps: number of updates to return, ``>= 0``.

    Returns:
        ``num_steps`` lists, each with one LR (a float) per param group.

    Raises:
        ValueError: ``steps_per_epoch < 1`` or ``num_steps < 0``.
        UnsupportedSchedulerError: see :func:`~lightning_efficient.functional.schedules.schedule_function`.
    """
    check_count(steps_per_epoch, "steps_per_epoch", minimum=1)
    check_count(num_steps, "num_steps", minimum=0)
    fn = schedule_function(scheduler)
    return [fn(k / steps_per_epoch) for k in range(num_steps)]


def epochwise_lrs(scheduler: Any, num_epochs: int) -> list[list[float]]:
    """LRs of epochs ``0 .. num_epochs-1`` from the real scheduler (stepped on a copy; reference values).

    The copy shares the parameter tensors but not the optimizer, so ``scheduler`` and its optimizer are left
    untouched. Works for any epoch scheduler except ``ReduceLROnPlateau``.

    Returns:
        ``num_epochs`` lists, each with one LR (a float) per param group.

    Raises:
        ValueError: ``num_epochs < 0``.
    """
    check_count(num_epochs, "num_epochs", minimum=0)
    opt = scheduler.optimizer
    memo: dict[int, Any] = {id(p): p for group in opt.param_groups for p in group["params"]}
    memo[id(opt.state)] = {}  # do not copy optimizer state (momentum buffers)
    clone = copy.deepcopy(scheduler, memo)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "lr_scheduler.step() before optimizer.step()"
        for epoch in range(num_epochs):
            if epoch > 0:
                clone.step()
            out.append([float(g["lr"]) for g in clone.optimizer.param_groups])
    return out


def schedule_horizon(scheduler: Any) -> float | None:
    """Epoch after which the schedule stops doing what it is for, or ``None`` if it has no end.

    ``CosineAnnealingLR``: ``T_max`` (PyTorch's cosine rises again afterwards); ``PolynomialLR``:
    ``total_iters`` (LR stays at 0); ``LambdaLR`` whose functions are :class:`EpochSchedule` with a
    ``total_epochs``: the largest; ``SequentialLR``: last milestone plus the last child's horizon;
    ``ChainedScheduler``: the smallest child horizon. Others: ``None``.

    Raises:
        UnsupportedSchedulerError: a composite whose children cannot be read (see ``torch_internals``).
    """
    cls = type(scheduler)
    if cls is _sched.CosineAnnealingLR:
        return float(scheduler.T_max)
    if cls is _sched.PolynomialLR:
        return float(scheduler.total_iters)
    if cls is _sched.LambdaLR:
        ends = [f.total_epochs for f in scheduler.lr_lambdas if isinstance(f, EpochSchedule) and f.total_epochs]
        return float(max(ends)) if ends else None
    if cls is _sched.SequentialLR:
        last = schedule_horizon(torch_internals.child_schedulers(scheduler)[-1])
        marks = torch_internals.milestones(scheduler)
        offset = marks[-1] if marks else 0
        return None if last is None else offset + last
    if cls is _sched.ChainedScheduler:
        children = torch_internals.child_schedulers(scheduler)
        ends = [h for h in (schedule_horizon(s) for s in children) if h is not None]
        return min(ends) if ends else None
    return None


def scheduler_epoch(scheduler: Any) -> int:
    """The scheduler's own epoch counter: how many times ``step()`` ran since construction (``last_epoch``).

    This is the integer epoch ``e`` at which the scheduler's current LRs equal ``schedule_function(scheduler)(e)``.
    ``ChainedScheduler`` keeps no counter of its own: the one of its first child (all children step together).

    Raises:
        TypeError: ``scheduler`` has no ``last_epoch`` and is not a ``ChainedScheduler`` with one in its children.
    """
    epoch = getattr(scheduler, "last_epoch", None)
    if epoch is None and isinstance(scheduler, _sched.ChainedScheduler):
        children = torch_internals.child_schedulers(scheduler)
        return scheduler_epoch(children[0]) if children else 0
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or not float(epoch).is_integer():
        raise TypeError(f"{type(scheduler).__name__} has no integer last_epoch; it is not an epoch scheduler.")
    return max(int(epoch), 0)
