"""Base LRs per param group and the shape shared by most closed forms: ``lr_g(e) = base_g * factor(e)``.

The closed forms are module-level callable objects (not closures), so a schedule function, and a Trainer
holding one, can be pickled (``torch.save``) whenever the user's own functions inside it can.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Constant", "DividedFactors", "FactorSchedule", "base_lrs"]


def base_lrs(scheduler: Any) -> list[float]:
    """Base LR of every param group: ``scheduler.base_lrs``, else the groups' ``"initial_lr"`` (else ``"lr"``).

    ``SequentialLR`` and ``ChainedScheduler`` have no ``base_lrs``; their children set ``"initial_lr"``.
    """
    bases = getattr(scheduler, "base_lrs", None)
    if bases is None:
        bases = [g.get("initial_lr", g["lr"]) for g in scheduler.optimizer.param_groups]
    return [float(b) for b in bases]


class FactorSchedule:
    """``fn(e) = [base * factor(e) for base in bases]``, one factor for all groups; subclasses give ``factor``.

    :meth:`factors` (the factor of every group) is what a ``ChainedScheduler`` multiplies, without dividing
    LRs by base LRs.
    """

    def __init__(self, bases: Sequence[float]) -> None:
        self.bases = [float(b) for b in bases]

    def factor(self, e: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def factors(self, e: float) -> list[float]:
        """``[factor(e)] * number of param groups``."""
        return [self.factor(e)] * len(self.bases)

    def __call__(self, e: float) -> list[float]:
        f = self.factor(e)
        return [b * f for b in self.bases]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Constant:
    """``fn(e) = bases`` for every ``e``."""

    def __init__(self, bases: Sequence[float]) -> None:
        self.bases = [float(b) for b in bases]

    def __call__(self, e: float) -> list[float]:
        return list(self.bases)


class DividedFactors:
    """Per-group factors ``fn(e) / base`` of a schedule function that has no :meth:`FactorSchedule.factors`."""

    def __init__(self, fn: Callable[[float], list[float]], bases: Sequence[float]) -> None:
        self.fn = fn
        self.bases = [float(b) for b in bases]

    def __call__(self, e: float) -> list[float]:
        return [lr / b if b else 0.0 for lr, b in zip(self.fn(e), self.bases, strict=True)]
