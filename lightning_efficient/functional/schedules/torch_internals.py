"""The one place that reads private attributes of PyTorch's LR schedulers (``torch/optim/lr_scheduler.py``).

PyTorch's composite schedulers keep their children and milestones only in private attributes; there is no
public accessor (checked for torch 2.14). Converting a composite needs both, so they are read here and
nowhere else:

- ``SequentialLR._schedulers`` (list of children) and ``SequentialLR._milestones`` (list of int epochs);
- ``ChainedScheduler._schedulers`` (list of children).

Both are set in the constructors and also appear, under these names, in the composites' ``state_dict()``,
which makes a silent rename unlikely. Guard: if an attribute is missing, :func:`child_schedulers` and
:func:`milestones` raise :class:`UnsupportedSchedulerError` naming it, so :class:`~lightning_efficient.StepwiseLR`
leaves the composite epoch-wise with a warning instead of failing. ``tests/functional/test_schedules.py``
(``test_torch_internals_still_exist``) fails loudly when a torch release renames them. Nothing here writes to
a scheduler.

Everything else the converters read is public: constructor arguments stored as attributes (``step_size``,
``gamma``, ``milestones``, ``T_max``, ``lr_lambdas``, ...), ``base_lrs``, ``last_epoch`` and the param groups'
``"initial_lr"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.optim import lr_scheduler as _sched

from lightning_efficient.functional.schedules.registry import UnsupportedSchedulerError

__all__ = ["COMPOSITES", "child_schedulers", "milestones", "walk_schedulers"]

#: The composite classes whose children are read here.
COMPOSITES: tuple[type, ...] = (_sched.SequentialLR, _sched.ChainedScheduler)


def _read(scheduler: Any, name: str) -> list[Any]:
    try:
        value = getattr(scheduler, name)
    except AttributeError:
        raise UnsupportedSchedulerError(
            f"{type(scheduler).__name__} has no attribute {name!r} in torch {torch.__version__}; "
            "lightning_efficient reads it to convert composite schedulers (see "
            "lightning_efficient/functional/schedules/torch_internals.py)."
        ) from None
    return list(value)


def child_schedulers(scheduler: Any) -> list[Any]:
    """The children of a ``SequentialLR`` / ``ChainedScheduler`` (reads ``_schedulers``); ``[]`` for others.

    Raises:
        UnsupportedSchedulerError: a composite without ``_schedulers`` (PyTorch renamed it).
    """
    if not isinstance(scheduler, COMPOSITES):
        return []
    return _read(scheduler, "_schedulers")


def milestones(scheduler: Any) -> list[int]:
    """The milestones (epochs) of a ``SequentialLR`` (reads ``_milestones``).

    Raises:
        TypeError: ``scheduler`` is not a ``SequentialLR``.
        UnsupportedSchedulerError: no ``_milestones`` (PyTorch renamed it).
    """
    if not isinstance(scheduler, _sched.SequentialLR):
        raise TypeError(f"milestones() expects a SequentialLR, got {type(scheduler).__name__}.")
    return _read(scheduler, "_milestones")


def walk_schedulers(scheduler: Any) -> Iterator[Any]:
    """``scheduler`` and every scheduler nested in it, depth first (children of composites after their parent).

    A composite whose children cannot be read yields only itself.
    """
    yield scheduler
    try:
        children = child_schedulers(scheduler)
    except UnsupportedSchedulerError:
        children = []
    for child in children:
        yield from walk_schedulers(child)
