"""Closed forms of PyTorch's simple (non-composite, non-lambda) schedulers, registered on import.

Sources: PyTorch's own ``_get_closed_form_lr`` methods and docstrings (``torch/optim/lr_scheduler.py``), with
its recursive-update quirks reproduced where they change the value (``total_iters=0`` in ``LinearLR`` /
``ConstantLR``). Every form is a picklable callable object; ``fn(e)`` returns one float LR per param group.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any

from torch.optim import lr_scheduler as _sched

from lightning_efficient.functional.schedules.per_group import FactorSchedule, base_lrs
from lightning_efficient.functional.schedules.registry import register_schedule

__all__ = [
    "ConstantForm",
    "CosineAnnealingForm",
    "CosineWarmRestartsForm",
    "ExponentialForm",
    "LinearForm",
    "MultiStepForm",
    "PolynomialForm",
    "StepForm",
]


class StepForm(FactorSchedule):
    """``StepLR``: ``gamma ** floor(e / step_size)``."""

    def __init__(self, bases, step_size: int, gamma: float) -> None:
        super().__init__(bases)
        self.step_size, self.gamma = step_size, gamma

    def factor(self, e: float) -> float:
        return self.gamma ** math.floor(e / self.step_size)


class MultiStepForm(FactorSchedule):
    """``MultiStepLR``: ``gamma ** (number of milestones <= e)`` (a repeated milestone counts twice)."""

    def __init__(self, bases, milestones: list[int], gamma: float) -> None:
        super().__init__(bases)
        self.milestones, self.gamma = sorted(milestones), gamma

    def factor(self, e: float) -> float:
        return self.gamma ** bisect_right(self.milestones, e)


class ConstantForm(FactorSchedule):
    """``ConstantLR``: ``factor`` before ``total_iters``, then 1; ``factor`` forever if ``total_iters <= 0``.

    (PyTorch never undoes the factor it applies at epoch 0 when ``total_iters == 0``.)
    """

    def __init__(self, bases, factor: float, total_iters: int) -> None:
        super().__init__(bases)
        self.value, self.total_iters = factor, total_iters

    def factor(self, e: float) -> float:
        if self.total_iters <= 0 or e < self.total_iters:
            return self.value
        return 1.0


class LinearForm(FactorSchedule):
    """``LinearLR``: from ``start_factor`` to ``end_factor`` over ``total_iters``; ``start_factor`` forever if 0."""

    def __init__(self, bases, start_factor: float, end_factor: float, total_iters: int) -> None:
        super().__init__(bases)
        self.start, self.end, self.total_iters = start_factor, end_factor, total_iters

    def factor(self, e: float) -> float:
        if self.total_iters <= 0:
            return self.start
        return self.start + (self.end - self.start) * min(self.total_iters, e) / self.total_iters


class ExponentialForm(FactorSchedule):
    """``ExponentialLR``: ``gamma ** e``."""

    def __init__(self, bases, gamma: float) -> None:
        super().__init__(bases)
        self.gamma = gamma

    def factor(self, e: float) -> float:
        return self.gamma**e


class PolynomialForm(FactorSchedule):
    """``PolynomialLR``: ``(1 - min(total_iters, e) / total_iters) ** power``."""

    def __init__(self, bases, total_iters: int, power: float) -> None:
        super().__init__(bases)
        self.total_iters, self.power = total_iters, power

    def factor(self, e: float) -> float:
        return (1.0 - min(self.total_iters, e) / self.total_iters) ** self.power


class CosineAnnealingForm:
    """``CosineAnnealingLR``: ``eta_min + (base - eta_min) * (1 + cos(pi e / T_max)) / 2``.

    PyTorch steps a recursive form that continues the cosine (period ``2 T_max``) past ``T_max``; this closed
    form does the same, and is what PyTorch uses itself when given an explicit epoch.
    """

    def __init__(self, bases, t_max: int, eta_min: float) -> None:
        self.bases, self.t_max, self.eta_min = [float(b) for b in bases], t_max, eta_min

    def __call__(self, e: float) -> list[float]:
        c = (1 + math.cos(math.pi * e / self.t_max)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.bases]


class CosineWarmRestartsForm:
    """``CosineAnnealingWarmRestarts``: a cosine from base LR to ``eta_min`` in periods ``T_0 * T_mult**i``."""

    def __init__(self, bases, t_0: int, t_mult: int, eta_min: float) -> None:
        self.bases, self.t_0, self.t_mult, self.eta_min = [float(b) for b in bases], t_0, t_mult, eta_min

    def __call__(self, e: float) -> list[float]:
        start, t_i = 0, self.t_0
        if self.t_mult == 1:
            start = math.floor(e / self.t_0) * self.t_0
        else:
            while e >= start + t_i:  # same restarts as PyTorch's integer recursion, without its float log
                start += t_i
                t_i *= self.t_mult
        cos = math.cos(math.pi * (e - start) / t_i)
        return [self.eta_min + (b - self.eta_min) * (1 + cos) / 2 for b in self.bases]


@register_schedule(_sched.StepLR, multiplicative=True)
def step_lr(s: Any) -> StepForm:
    """Converter of ``StepLR``."""
    return StepForm(base_lrs(s), s.step_size, s.gamma)


@register_schedule(_sched.MultiStepLR, multiplicative=True)
def multistep_lr(s: Any) -> MultiStepForm:
    """Converter of ``MultiStepLR`` (``milestones`` is a ``Counter``)."""
    return MultiStepForm(base_lrs(s), list(s.milestones.elements()), s.gamma)


@register_schedule(_sched.ConstantLR, multiplicative=True)
def constant_lr(s: Any) -> ConstantForm:
    """Converter of ``ConstantLR``."""
    return ConstantForm(base_lrs(s), s.factor, s.total_iters)


@register_schedule(_sched.LinearLR, multiplicative=True)
def linear_lr(s: Any) -> LinearForm:
    """Converter of ``LinearLR``."""
    return LinearForm(base_lrs(s), s.start_factor, s.end_factor, s.total_iters)


@register_schedule(_sched.ExponentialLR, multiplicative=True)
def exponential_lr(s: Any) -> ExponentialForm:
    """Converter of ``ExponentialLR``."""
    return ExponentialForm(base_lrs(s), s.gamma)


@register_schedule(_sched.PolynomialLR, multiplicative=True)
def polynomial_lr(s: Any) -> PolynomialForm:
    """Converter of ``PolynomialLR``."""
    return PolynomialForm(base_lrs(s), s.total_iters, s.power)


@register_schedule(_sched.CosineAnnealingLR)
def cosine_lr(s: Any) -> CosineAnnealingForm:
    """Converter of ``CosineAnnealingLR``."""
    return CosineAnnealingForm(base_lrs(s), s.T_max, s.eta_min)


@register_schedule(_sched.CosineAnnealingWarmRestarts)
def cosine_warm_restarts(s: Any) -> CosineWarmRestartsForm:
    """Converter of ``CosineAnnealingWarmRestarts``."""
    return CosineWarmRestartsForm(base_lrs(s), s.T_0, s.T_mult, s.eta_min)
