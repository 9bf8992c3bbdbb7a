"""Closed forms of the schedulers driven by user functions: ``LambdaLR`` and ``MultiplicativeLR``.

``LambdaLR`` calls its functions with fractional epochs (:class:`FractionalCall` falls back to ``floor(e)``
with a warning for functions that fail for a float); ``MultiplicativeLR`` spreads each epoch's factor
geometrically over the epoch. Both forms are picklable when the user's functions are.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from torch.optim import lr_scheduler as _sched

from lightning_efficient.functional.schedules.epoch_schedule import EpochSchedule
from lightning_efficient.functional.schedules.per_group import base_lrs
from lightning_efficient.functional.schedules.registry import register_schedule

__all__ = ["FractionalCall", "LambdaForm", "MultiplicativeForm", "as_epoch_arg"]


def as_epoch_arg(e: float) -> float | int:
    """Integer-valued epochs are passed as ``int``, exactly like PyTorch passes ``last_epoch``."""
    return int(e) if float(e).is_integer() else e


class FractionalCall:
    """Calls a user's ``lr_lambda`` with fractional epochs; on failure warns once and uses ``floor(e)``.

    Attributes:
        fn: the user's function.
        epoch_resolution: ``True`` once ``fn`` failed for a float epoch (it is then called with ``floor(e)``).
    """

    def __init__(self, fn: Callable, owner: str) -> None:
        self.fn = fn
        self.owner = owner
        self.epoch_resolution = False
        if isinstance(fn, EpochSchedule):
            return  # fractional by design; its horizon may be bound later by StepwiseLR
        try:  # probe now so the warning comes before training, not in the middle of it
            self._check(fn(0.5))
        except Exception as err:  # noqa: BLE001 - any failure of the user's function means "not fractional"
            self._fall_back(err)

    @staticmethod
    def _check(value: Any) -> float:
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"returned {value}")
        return value

    def _fall_back(self, err: BaseException) -> None:
        self.epoch_resolution = True
        name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
        warnings.warn(
            f"{self.owner}: lr_lambda {name} fails for fractional epochs ({type(err).__name__}: {err}); this "
            "scheduler keeps epoch resolution (its LR changes only at epoch boundaries). Make the function "
            "accept float epochs to get a per-step schedule.",
            UserWarning,
            stacklevel=4,
        )

    def __call__(self, e: float) -> float:
        arg = as_epoch_arg(e)
        if self.epoch_resolution or isinstance(arg, int):
            return self.fn(math.floor(e))
        try:
            return self._check(self.fn(arg))
        except Exception as err:  # noqa: BLE001
            self._fall_back(err)
            return self.fn(math.floor(e))


class LambdaForm:
    """``LambdaLR``: ``lr_g(e) = base_g * lr_lambda_g(e)`` with fractional ``e``."""

    def __init__(self, bases, lr_lambdas) -> None:
        self.bases = [float(b) for b in bases]
        self.lambdas = [FractionalCall(f, "LambdaLR") for f in lr_lambdas]

    def __call__(self, e: float) -> list[float]:
        return [b * lam(e) for b, lam in zip(self.bases, self.lambdas, strict=True)]


class MultiplicativeForm:
    """``MultiplicativeLR``: ``lr(n) = base * prod_{t=1..n} lambda(t)``, spread geometrically within an epoch.

    PyTorch does not apply ``lambda`` at construction. Between epochs ``n`` and ``n+1`` the per-epoch factor
    ``lambda(n+1)`` is spread geometrically: ``lr(n + r) = lr(n) * lambda(n+1)**r``, so the functions are only
    ever called with integer epochs (memoised). Non-positive factors jump at the boundary.
    """

    def __init__(self, bases, lr_lambdas) -> None:
        self.bases = [float(b) for b in bases]
        self.lambdas = list(lr_lambdas)
        self.cumulative: list[list[float]] = [[1.0] * len(self.lambdas)]  # [n][g] = prod_{t<=n} lambda_g(t)

    def factors(self, e: float) -> list[float]:
        """Per-group factor (LR / base LR) at fractional epoch ``e``."""
        n = math.floor(e)
        cumulative = self.cumulative
        while len(cumulative) <= n + 1:
            t = len(cumulative)
            cumulative.append([c * float(lam(t)) for c, lam in zip(cumulative[-1], self.lambdas, strict=True)])
        r = e - n
        out = []
        for here, nxt in zip(cumulative[n], cumulative[n + 1], strict=True):
            if r == 0 or here == 0:
                out.append(here)
            else:
                ratio = nxt / here
                out.append(here * ratio**r if ratio > 0 else here)
        return out

    def __call__(self, e: float) -> list[float]:
        return [b * f for b, f in zip(self.bases, self.factors(e), strict=True)]


@register_schedule(_sched.LambdaLR)
def lambda_lr(s: Any) -> LambdaForm:
    """Converter of ``LambdaLR``."""
    return LambdaForm(base_lrs(s), s.lr_lambdas)


@register_schedule(_sched.MultiplicativeLR, multiplicative=True)
def multiplicative_lr(s: Any) -> MultiplicativeForm:
    """Converter of ``MultiplicativeLR``."""
    return MultiplicativeForm(base_lrs(s), s.lr_lambdas)
