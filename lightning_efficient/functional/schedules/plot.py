"""Plotting a schedule: epoch-wise (PyTorch) vs step-wise (its closed form per optimizer step)."""

from __future__ import annotations

from typing import Any

from lightning_efficient.functional.schedules.evaluate import check_count, epochwise_lrs, stepwise_lrs

__all__ = ["plot_schedule"]


def plot_schedule(
    scheduler: Any,
    steps_per_epoch: int,
    num_epochs: int,
    param_group: int = 0,
    ax: Any = None,
):
    """Plot LR vs optimizer step: the epoch-wise scheduler (steps) and its per-step conversion, overlaid.

    Needs matplotlib (a dev dependency; imported here, not at package import).

    Args:
        scheduler: an epoch-interval scheduler (not modified).
        steps_per_epoch: optimizer updates per epoch, ``>= 1``.
        num_epochs: epochs to draw, ``>= 1``.
        param_group: which param group's LR to draw.
        ax: a matplotlib ``Axes`` to draw on; ``None`` creates a new figure.

    Returns:
        The matplotlib ``Figure`` (two lines: epoch-wise first, step-wise second).

    Raises:
        ValueError: bad counts or ``param_group`` out of range.
        ImportError: matplotlib is not installed.
        UnsupportedSchedulerError: see :func:`~lightning_efficient.functional.schedules.schedule_function`.
    """
    check_count(steps_per_epoch, "steps_per_epoch", minimum=1)
    check_count(num_epochs, "num_epochs", minimum=1)
    n_groups = len(scheduler.optimizer.param_groups)
    if not 0 <= param_group < n_groups:
        raise ValueError(f"param_group must be in [0, {n_groups}), got {param_group!r}.")
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - dev dependency present in tests
        raise ImportError(
            'plot_schedule needs matplotlib: pip install "lightning_efficient[plot]" (or matplotlib)'
        ) from err

    num_steps = steps_per_epoch * num_epochs
    step_lrs = [lrs[param_group] for lrs in stepwise_lrs(scheduler, steps_per_epoch, num_steps)]
    epoch_lrs = [lrs[param_group] for lrs in epochwise_lrs(scheduler, num_epochs)]
    epoch_per_step = [epoch_lrs[k // steps_per_epoch] for k in range(num_steps)]
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.5))
    else:
        fig = ax.figure
    steps = list(range(num_steps))
    ax.step(steps, epoch_per_step, where="post", label="epoch-wise (PyTorch)", alpha=0.8)
    ax.step(steps, step_lrs, where="post", label="step-wise (StepwiseLR)")
    ax.set_xlabel(f"optimizer step ({steps_per_epoch} per epoch)")
    ax.set_ylabel(f"learning rate (param group {param_group})")
    ax.set_title(type(scheduler).__name__)
    ax.legend()
    return fig
