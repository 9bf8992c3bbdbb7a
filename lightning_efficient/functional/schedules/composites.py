"""Closed forms of PyTorch's composite schedulers: ``SequentialLR`` and ``ChainedScheduler``.

PyTorch's composition quirks are reproduced where they change the value: ``SequentialLR`` restarts its
children at the milestones; ``ChainedScheduler`` applies its children's *recursive* updates one after the
other. Not convertible (:class:`UnsupportedSchedulerError`): a ``MultiplicativeLR`` after the first phase of
a ``SequentialLR`` and a ``SequentialLR`` inside a ``ChainedScheduler`` (both restart from whatever LR the
previous scheduler left). Children and milestones are read through
:mod:`~lightning_efficient.functional.schedules.torch_internals`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from torch.optim import lr_scheduler as _sched

from lightning_efficient.functional.schedules import torch_internals
from lightning_efficient.functional.schedules.per_group import Constant, DividedFactors, base_lrs
from lightning_efficient.functional.schedules.registry import (
    ScheduleFn,
    UnsupportedSchedulerError,
    convert_child,
    is_multiplicative,
    register_schedule,
)

__all__ = ["ChainedForm", "SequentialForm", "chain_step", "flatten_chain"]


class SequentialForm:
    """``SequentialLR``: child ``i`` runs from milestone ``i-1`` with its own epoch ``e - milestones[i-1]``."""

    def __init__(self, milestones: list[int], fns: list[ScheduleFn]) -> None:
        self.milestones = list(milestones)
        self.fns = list(fns)

    def __call__(self, e: float) -> list[float]:
        idx = bisect_right(self.milestones, e)
        return self.fns[idx](e if idx == 0 else e - self.milestones[idx - 1])


@register_schedule(_sched.SequentialLR)
def sequential_lr(s: Any) -> SequentialForm:
    """Converter of ``SequentialLR``.

    PyTorch: child ``i >= 1`` is restarted at milestone ``i-1`` (closed form at its epoch 0) and then stepped.
    Children whose restart reads the current LR (``MultiplicativeLR``) are not exact.
    """
    fns: list[ScheduleFn] = []
    for i, child in enumerate(torch_internals.child_schedulers(s)):
        if i > 0 and type(child) is _sched.MultiplicativeLR:
            raise UnsupportedSchedulerError(
                "SequentialLR restarts a MultiplicativeLR child from the previous child's LR; that has no exact "
                "closed form. Use LambdaLR for the later phases."
            )
        if i > 0 and type(child) is _sched.ConstantLR and child.total_iters <= 0:
            # restarted with PyTorch's closed form (factor 1 at epoch >= total_iters), never changed after
            fns.append(Constant(base_lrs(child)))
            continue
        fns.append(convert_child(child, "SequentialLR"))
    return SequentialForm(torch_internals.milestones(s), fns)


#: One child of a chain: ``(kind, data)`` with kind ``"ratio"`` (data: per-group factors ``F(e)``),
#: ``"cosine"`` (data: ``(T_max, eta_min, base LRs)``) or ``"absolute"`` (data: the child's schedule function).
ChainStep = tuple[str, Any]


def flatten_chain(s: Any) -> list[Any]:
    """The children of a ``ChainedScheduler``, nested chains expanded in order (they step children in order too)."""
    out: list[Any] = []
    for child in torch_internals.child_schedulers(s):
        if type(child) is _sched.ChainedScheduler:
            out.extend(flatten_chain(child))
        else:
            out.append(child)
    return out


def _factors(child: Any, child_fn: ScheduleFn) -> Callable[[float], list[float]]:
    """Per-group factors (LR / base LR) of a multiplicative child, without dividing where possible."""
    factors = getattr(child_fn, "factors", None)
    if callable(factors):
        return factors
    return DividedFactors(child_fn, base_lrs(child))  # registered user class marked multiplicative


def chain_step(child: Any) -> ChainStep:
    """How a chain child maps "LR at epoch a" to "LR at epoch b" (see :class:`ChainedForm`).

    Raises:
        UnsupportedSchedulerError: a ``SequentialLR`` child, or a child without a closed form.
    """
    cls = type(child)
    if cls is _sched.SequentialLR:
        raise UnsupportedSchedulerError(
            "ChainedScheduler with a SequentialLR child: the SequentialLR restarts its children from the LR the "
            "chain left, which has no exact closed form."
        )
    child_fn = convert_child(child, "ChainedScheduler")
    if cls is _sched.CosineAnnealingLR:
        return "cosine", (child.T_max, child.eta_min, base_lrs(child))
    if is_multiplicative(cls):
        return "ratio", _factors(child, child_fn)
    return "absolute", child_fn


class ChainedForm:
    """``ChainedScheduler``: each child's recursive update applied, in order, to the LR the previous one left.

    One map per child, "lr -> new lr" between scheduler epochs ``a -> b``:

    - ratio (``StepLR``, ``MultiStepLR``, ``ConstantLR``, ``LinearLR``, ``ExponentialLR``, ``PolynomialLR``,
      ``MultiplicativeLR``, classes registered multiplicative): ``lr * F(b) / F(a)``, ``F`` the child's factor;
    - cosine (``CosineAnnealingLR``): ``eta_min + (lr - eta_min) * c(b) / c(a)``, ``c(x) = 1 + cos(pi x / T_max)``,
      and PyTorch's additive restart ``lr + (base - eta_min) * (c(b) - c(a)) / 2`` where ``c(a) = 0``;
    - absolute (``LambdaLR``, ``CosineAnnealingWarmRestarts``, other registered classes): the child's LR at ``b``.

    The LR at integer epochs comes from this recursion (memoised); between epochs ``t`` and ``t+1`` the maps
    are applied once from ``t`` to the fractional epoch. All-ratio chains reduce to base times the product
    of the factors.
    """

    def __init__(self, bases: list[float], steps: list[ChainStep]) -> None:
        self.bases = [float(b) for b in bases]
        self.steps = list(steps)
        self.memo: list[list[float]] = []

    def initial(self) -> list[float]:
        """LRs right after construction (epoch 0)."""
        lr = list(self.bases)
        for kind, data in self.steps:
            if kind == "ratio":
                lr = [x * f for x, f in zip(lr, data(0.0), strict=True)]
            elif kind == "absolute":
                lr = list(data(0.0))
        return lr  # CosineAnnealingLR's construction leaves the LR unchanged

    def advance(self, lr: list[float], a: int, b: float) -> list[float]:
        """LRs at epoch ``b`` from the LRs ``lr`` at integer epoch ``a``."""
        bases = self.bases
        for kind, data in self.steps:
            if kind == "ratio":
                fa, fb = data(float(a)), data(b)
                lr = [
                    x if p == q else (x * q / p if p else bl * q)
                    for x, p, q, bl in zip(lr, fa, fb, bases, strict=False)
                ]
            elif kind == "cosine":
                t_max, eta_min, child_bases = data
                ca = 1 + math.cos(math.pi * a / t_max)
                cb = 1 + math.cos(math.pi * b / t_max)
                if (a - t_max) % (2 * t_max) == 0:  # PyTorch's additive branch (c(a) == 0)
                    lr = [x + (cbase - eta_min) * (cb - ca) / 2 for x, cbase in zip(lr, child_bases, strict=False)]
                else:
                    lr = [eta_min + (x - eta_min) * cb / ca for x in lr]
            else:
                lr = list(data(b))
        return lr

    def __call__(self, e: float) -> list[float]:
        n = math.floor(e)
        memo = self.memo
        if not memo:
            memo.append(self.initial())
        while len(memo) <= n:
            t = len(memo)
            memo.append(self.advance(memo[-1], t - 1, float(t)))
        if e == n:
            return list(memo[n])
        return self.advance(memo[n], n, e)


@register_schedule(_sched.ChainedScheduler)
def chained_scheduler(s: Any) -> ChainedForm:
    """Converter of ``ChainedScheduler`` (nested chains included)."""
    children = flatten_chain(s)
    return ChainedForm(base_lrs(children[0]), [chain_step(child) for child in children])
