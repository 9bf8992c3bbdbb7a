"""Learning-rate schedules as functions of fractional epochs (functional core of :class:`StepwiseLR`).

A PyTorch epoch-interval scheduler defines the learning rate (LR) of every param group at integer epochs
``e = 0, 1, 2, ...`` (``scheduler.last_epoch``). This module gives each supported scheduler class a *closed
form* ``f(e) -> [lr per param group]`` that is defined for any real ``e >= 0`` and equals, to float rounding,
what the real scheduler gives after ``e`` calls of ``scheduler.step()`` at every integer ``e``. Running the
schedule per optimizer step then means: the update with 0-based index ``k`` uses ``f(k / S)``, where ``S`` is
the number of optimizer steps per epoch.

Everything here is pure (nothing steps or mutates the scheduler you pass) and works without a Trainer::

    >>> import torch
    >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    >>> sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2)
    >>> [round(lrs[0], 3) for lrs in stepwise_lrs(sched, steps_per_epoch=2, num_steps=5)]
    [1.0, 0.854, 0.5, 0.146, 0.0]

Sources: closed forms from PyTorch's own ``_get_closed_form_lr`` methods and docstrings
(``torch/optim/lr_scheduler.py``), with PyTorch's recursive-update quirks reproduced where they change the
value (``total_iters=0`` in ``LinearLR``/``ConstantLR``, ``SequentialLR`` restarting its children at the
milestones, ``ChainedScheduler`` multiplying its children's factors). The property "equal at every epoch
boundary" is checked against the real schedulers with hypothesis in ``tests/functional/test_schedules.py``.

Not convertible (:class:`UnsupportedSchedulerError`): ``ReduceLROnPlateau``, ``OneCycleLR``, ``CyclicLR``,
unregistered classes, a ``MultiplicativeLR`` after the first phase of a ``SequentialLR`` and a ``SequentialLR``
inside a ``ChainedScheduler`` (both restart from whatever LR the previous scheduler left).

Extending: :func:`register_schedule` maps your own ``LRScheduler`` subclass to a converter.
Epoch-native schedules: :class:`warmup_cosine` (an :class:`EpochSchedule` for ``LambdaLR``) whose horizon can
follow the Trainer. Plotting: :func:`plot_schedule`.
"""

from __future__ import annotations

import copy
import math
import warnings
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any

from torch.optim import lr_scheduler as _sched

__all__ = [
    "ScheduleFn",
    "UnsupportedSchedulerError",
    "EpochSchedule",
    "epochwise_lrs",
    "is_supported",
    "lr_at",
    "plot_schedule",
    "register_schedule",
    "schedule_function",
    "schedule_horizon",
    "stepwise_lrs",
    "unregister_schedule",
    "warmup_cosine",
]

#: A schedule in fractional epochs: ``fn(e)`` is the list of LRs (one per param group) at epoch ``e >= 0``,
#: counted in the scheduler's own epochs (``e = scheduler.last_epoch`` for integer ``e``).
ScheduleFn = Callable[[float], list[float]]
#: A converter turns a scheduler instance into its :data:`ScheduleFn`. It reads the constructor arguments
#: from the instance (``step_size``, ``gamma``, ``base_lrs``, ...), never its mutable progress.
Converter = Callable[[Any], ScheduleFn]


class UnsupportedSchedulerError(TypeError):
    """The scheduler (or a scheduler nested inside it) has no exact fractional-epoch form."""


_REGISTRY: dict[type, Converter] = {}
#: Classes whose PyTorch update multiplies the current LR by a ratio of factors (matters inside a
#: ``ChainedScheduler``, which applies its children's recursive updates one after the other).
_MULTIPLICATIVE: set[type] = set()


def register_schedule(scheduler_cls: type, converter: Converter | None = None, *, multiplicative: bool = False):
    """Register a converter for an ``LRScheduler`` subclass (also usable as a decorator).

    The lookup is by exact class (a subclass of ``StepLR`` that overrides ``get_lr`` is not a ``StepLR``), so
    a subclass needs its own registration.

    Args:
        scheduler_cls: the scheduler class, e.g. ``MyWarmupLR``.
        converter: ``converter(scheduler) -> fn`` with ``fn(e: float) -> list[float]``, the LR of every param
            group at fractional epoch ``e >= 0`` (epochs of the scheduler's own counter; ``fn(0)`` is the LR
            right after construction). It must agree with ``scheduler.step()`` at integer ``e``.
        multiplicative: ``True`` if the class's ``step()`` multiplies the current LR by ``fn(e)/fn(e-1)``, so
            it can be a child of ``ChainedScheduler``.

    Returns:
        The converter (so ``@register_schedule(MyLR)`` leaves the decorated function usable).

    Raises:
        TypeError: ``scheduler_cls`` is not a class or ``converter`` is not callable.

    Example::

        class HalvingLR(torch.optim.lr_scheduler.LRScheduler):  # lr = base * 0.5 ** epoch
            def get_lr(self):
                return [b * 0.5**self.last_epoch for b in self.base_lrs]

        register_schedule(HalvingLR, lambda s: lambda e: [b * 0.5**e for b in s.base_lrs])
    """
    if not isinstance(scheduler_cls, type):
        raise TypeError(f"register_schedule expects a scheduler class, got {scheduler_cls!r}.")

    def _register(fn: Converter) -> Converter:
        if not callable(fn):
            raise TypeError(f"register_schedule: converter must be callable, got {type(fn).__name__}.")
        _REGISTRY[scheduler_cls] = fn
        if multiplicative:
            _MULTIPLICATIVE.add(scheduler_cls)
        else:
            _MULTIPLICATIVE.discard(scheduler_cls)
        return fn

    if converter is None:
        return _register
    return _register(converter)


def unregister_schedule(scheduler_cls: type) -> None:
    """Remove a registration made with :func:`register_schedule` (no error if absent)."""
    _REGISTRY.pop(scheduler_cls, None)
    _MULTIPLICATIVE.discard(scheduler_cls)


def is_supported(scheduler: Any) -> bool:
    """Whether :func:`schedule_function` can convert ``scheduler`` (children of composites included)."""
    try:
        schedule_function(scheduler)
    except UnsupportedSchedulerError:
        return False
    return True


def schedule_function(scheduler: Any) -> ScheduleFn:
    """The closed form ``fn(e) -> [lr per param group]`` of an epoch scheduler, for fractional epochs ``e``.

    Args:
        scheduler: a ``torch.optim.lr_scheduler.LRScheduler`` instance (not stepped or modified).

    Returns:
        ``fn`` with ``fn(e)`` the list of LRs (floats, one per param group, same order as
        ``scheduler.optimizer.param_groups``) at scheduler epoch ``e >= 0``.

    Raises:
        UnsupportedSchedulerError: (a ``TypeError``) for classes without a registered converter (the message
            names the class and :func:`register_schedule`), for ``ReduceLROnPlateau``, ``OneCycleLR`` and
            ``CyclicLR`` (step- or metric-driven by design), and for composites whose children cannot be
            combined exactly.
    """
    cls = type(scheduler)
    if isinstance(scheduler, _sched.ReduceLROnPlateau):
        raise UnsupportedSchedulerError(
            "ReduceLROnPlateau reacts to a monitored metric, so it has no schedule in epochs; it is left as it is."
        )
    if cls in (_sched.OneCycleLR, _sched.CyclicLR):
        raise UnsupportedSchedulerError(
            f"{cls.__name__} is designed to be stepped per optimizer step; configure it with "
            '`"interval": "step"` (its cycle lengths are then in optimizer steps).'
        )
    converter = _REGISTRY.get(cls)
    if converter is None:
        raise UnsupportedSchedulerError(
            f"{cls.__module__}.{cls.__qualname__} has no known closed form in fractional epochs. Register one with "
            "`lightning_efficient.functional.schedules.register_schedule("
            f"{cls.__name__}, lambda sched: lambda epoch: [lr per param group])`."
        )
    return converter(scheduler)


def lr_at(scheduler: Any, epoch: float) -> list[float]:
    """LRs (one per param group) of ``scheduler`` at fractional epoch ``epoch >= 0``.

    Raises:
        ValueError: ``epoch`` is negative or not finite.
        UnsupportedSchedulerError: see :func:`schedule_function`.
    """
    _check_epoch(epoch)
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
        ``num_steps`` lists, each with one LR per param group.

    Raises:
        ValueError: ``steps_per_epoch < 1`` or ``num_steps < 0``.
        UnsupportedSchedulerError: see :func:`schedule_function`.
    """
    _check_positive_int(steps_per_epoch, "steps_per_epoch", minimum=1)
    _check_positive_int(num_steps, "num_steps", minimum=0)
    fn = schedule_function(scheduler)
    return [fn(k / steps_per_epoch) for k in range(num_steps)]


def epochwise_lrs(scheduler: Any, num_epochs: int) -> list[list[float]]:
    """LRs of epochs ``0 .. num_epochs-1`` from the real scheduler (stepped on a copy; reference values).

    The copy shares the parameter tensors but not the optimizer, so ``scheduler`` and its optimizer are left
    untouched. Works for any epoch scheduler except ``ReduceLROnPlateau``.

    Raises:
        ValueError: ``num_epochs < 0``.
    """
    _check_positive_int(num_epochs, "num_epochs", minimum=0)
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
        last = schedule_horizon(scheduler._schedulers[-1])
        offset = scheduler._milestones[-1] if scheduler._milestones else 0
        return None if last is None else offset + last
    if cls is _sched.ChainedScheduler:
        ends = [h for h in (schedule_horizon(s) for s in scheduler._schedulers) if h is not None]
        return min(ends) if ends else None
    return None


# --------------------------------------------------------------------------------------------- helpers


def _check_epoch(epoch: float) -> None:
    if not isinstance(epoch, (int, float)) or not math.isfinite(epoch) or epoch < 0:
        raise ValueError(f"epoch must be a finite number >= 0 (fractional epochs), got {epoch!r}.")


def _check_positive_int(value: Any, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")


def _bases(scheduler: Any) -> list[float]:
    bases = getattr(scheduler, "base_lrs", None)  # SequentialLR / ChainedScheduler have none
    if bases is None:
        bases = [g.get("initial_lr", g["lr"]) for g in scheduler.optimizer.param_groups]
    return [float(b) for b in bases]


def _per_group(scheduler: Any, factor: Callable[[float], float]) -> ScheduleFn:
    """``fn(e) = [base * factor(e) for base in base_lrs]``."""
    bases = _bases(scheduler)

    def fn(e: float) -> list[float]:
        f = factor(e)
        return [b * f for b in bases]

    fn.factor = factor  # type: ignore[attr-defined]  # lets ChainedScheduler multiply factors without dividing
    return fn


def _as_epoch_arg(e: float) -> float | int:
    """Integer-valued epochs are passed as ``int``, exactly like PyTorch passes ``last_epoch``."""
    return int(e) if float(e).is_integer() else e


# ----------------------------------------------------------------------------------------- converters


@register_schedule(_sched.StepLR, multiplicative=True)
def _step_lr(s: Any) -> ScheduleFn:
    step_size, gamma = s.step_size, s.gamma
    return _per_group(s, lambda e: gamma ** math.floor(e / step_size))


@register_schedule(_sched.MultiStepLR, multiplicative=True)
def _multistep_lr(s: Any) -> ScheduleFn:
    milestones = sorted(s.milestones.elements())
    gamma = s.gamma
    return _per_group(s, lambda e: gamma ** bisect_right(milestones, e))


@register_schedule(_sched.ConstantLR, multiplicative=True)
def _constant_lr(s: Any) -> ScheduleFn:
    factor, total = s.factor, s.total_iters
    if total <= 0:  # PyTorch: the factor applied at epoch 0 is never undone when total_iters == 0
        return _per_group(s, lambda e: factor)
    return _per_group(s, lambda e: factor if e < total else 1.0)


@register_schedule(_sched.LinearLR, multiplicative=True)
def _linear_lr(s: Any) -> ScheduleFn:
    start, end, total = s.start_factor, s.end_factor, s.total_iters
    if total <= 0:  # PyTorch: start_factor forever when total_iters == 0
        return _per_group(s, lambda e: start)
    return _per_group(s, lambda e: start + (end - start) * min(total, e) / total)


@register_schedule(_sched.ExponentialLR, multiplicative=True)
def _exponential_lr(s: Any) -> ScheduleFn:
    gamma = s.gamma
    return _per_group(s, lambda e: gamma**e)


@register_schedule(_sched.PolynomialLR, multiplicative=True)
def _polynomial_lr(s: Any) -> ScheduleFn:
    total, power = s.total_iters, s.power
    return _per_group(s, lambda e: (1.0 - min(total, e) / total) ** power)


@register_schedule(_sched.CosineAnnealingLR)
def _cosine_lr(s: Any) -> ScheduleFn:
    # PyTorch steps a recursive form that continues the cosine (period 2*T_max) past T_max; the closed form
    # below does the same, and is what PyTorch uses itself when given an explicit epoch.
    t_max, eta_min, bases = s.T_max, s.eta_min, _bases(s)

    def fn(e: float) -> list[float]:
        c = (1 + math.cos(math.pi * e / t_max)) / 2
        return [eta_min + (b - eta_min) * c for b in bases]

    return fn


@register_schedule(_sched.CosineAnnealingWarmRestarts)
def _cosine_warm_restarts(s: Any) -> ScheduleFn:
    t_0, t_mult, eta_min, bases = s.T_0, s.T_mult, s.eta_min, _bases(s)

    def fn(e: float) -> list[float]:
        start, t_i = 0, t_0
        if t_mult == 1:
            start = math.floor(e / t_0) * t_0
        else:
            while e >= start + t_i:  # same restarts as PyTorch's integer recursion, without its float log
                start += t_i
                t_i *= t_mult
        t_cur = e - start
        return [eta_min + (b - eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2 for b in bases]

    return fn


class _FractionalCall:
    """Calls a user's ``lr_lambda`` with fractional epochs; on failure warns once and uses ``floor(e)``."""

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
        arg = _as_epoch_arg(e)
        if self.epoch_resolution or isinstance(arg, int):
            return self.fn(math.floor(e))
        try:
            return self._check(self.fn(arg))
        except Exception as err:  # noqa: BLE001
            self._fall_back(err)
            return self.fn(math.floor(e))


@register_schedule(_sched.LambdaLR)
def _lambda_lr(s: Any) -> ScheduleFn:
    bases = _bases(s)
    lambdas = [_FractionalCall(f, "LambdaLR") for f in s.lr_lambdas]

    def fn(e: float) -> list[float]:
        return [b * lam(e) for b, lam in zip(bases, lambdas, strict=True)]

    return fn


@register_schedule(_sched.MultiplicativeLR, multiplicative=True)
def _multiplicative_lr(s: Any) -> ScheduleFn:
    # lr(n) = base * prod_{t=1..n} lambda(t) (PyTorch does not apply lambda at construction). Between epochs
    # n and n+1 the per-epoch factor lambda(n+1) is spread geometrically: lr(n + r) = lr(n) * lambda(n+1)**r,
    # so the functions are only ever called with integer epochs. Non-positive factors jump at the boundary.
    bases = _bases(s)
    lambdas = list(s.lr_lambdas)
    cumulative: list[list[float]] = [[1.0] * len(lambdas)]  # cumulative[n][g] = prod_{t<=n} lambda_g(t)

    def factor_list(e: float) -> list[float]:
        n = math.floor(e)
        while len(cumulative) <= n + 1:
            t = len(cumulative)
            cumulative.append([c * float(lam(t)) for c, lam in zip(cumulative[-1], lambdas, strict=True)])
        r = e - n
        out = []
        for g in range(len(lambdas)):
            here, nxt = cumulative[n][g], cumulative[n + 1][g]
            if r == 0 or here == 0:
                out.append(here)
            else:
                ratio = nxt / here
                out.append(here * ratio**r if ratio > 0 else here)
        return out

    def fn(e: float) -> list[float]:
        return [b * f for b, f in zip(bases, factor_list(e), strict=True)]

    fn.factors = factor_list  # type: ignore[attr-defined]
    return fn


@register_schedule(_sched.SequentialLR)
def _sequential_lr(s: Any) -> ScheduleFn:
    # PyTorch: child i >= 1 is restarted at milestone i-1 (closed form at its epoch 0) and then stepped; its
    # epoch is e - milestones[i-1]. Children whose restart reads the current LR (MultiplicativeLR) are not exact.
    children = list(s._schedulers)
    milestones = list(s._milestones)
    fns = []
    for i, child in enumerate(children):
        if i > 0 and type(child) is _sched.MultiplicativeLR:
            raise UnsupportedSchedulerError(
                "SequentialLR restarts a MultiplicativeLR child from the previous child's LR; that has no exact "
                "closed form. Use LambdaLR for the later phases."
            )
        if i > 0 and type(child) is _sched.ConstantLR and child.total_iters <= 0:
            # restarted with PyTorch's closed form (factor 1 at epoch >= total_iters), never changed after
            fns.append(lambda e, b=_bases(child): list(b))
            continue
        fns.append(_child_function(child, "SequentialLR"))

    def fn(e: float) -> list[float]:
        idx = bisect_right(milestones, e)
        return fns[idx](e if idx == 0 else e - milestones[idx - 1])

    return fn


@register_schedule(_sched.ChainedScheduler)
def _chained(s: Any) -> ScheduleFn:
    # ChainedScheduler.step() steps every child in order, each applying its own *recursive* update to the
    # LR the previous child left. Reproduced exactly with one map per child, "lr -> new lr" between scheduler
    # epochs a -> b:
    #   ratio    (StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR, PolynomialLR, MultiplicativeLR,
    #             classes registered multiplicative): lr * F(b) / F(a), F the child's factor (LR / base LR)
    #   cosine   (CosineAnnealingLR): eta_min + (lr - eta_min) * c(b) / c(a), c(x) = 1 + cos(pi x / T_max),
    #             and PyTorch's additive restart lr + (base - eta_min) * (c(b) - c(a)) / 2 where c(a) = 0
    #   absolute (LambdaLR, CosineAnnealingWarmRestarts, other registered classes): the child's own LR at b
    # The LR at integer epochs comes from this recursion (memoised); between epochs t and t+1 the maps are
    # applied once from t to the fractional epoch. All-ratio chains reduce to base * product of the factors.
    children = _flatten_chain(s)
    maps = [_chain_map(child) for child in children]
    bases = _bases(children[0])
    memo: list[list[float]] = []

    def initial() -> list[float]:
        lr = list(bases)
        for kind, data in maps:
            if kind == "ratio":
                lr = [x * f for x, f in zip(lr, data(0.0), strict=True)]
            elif kind == "absolute":
                lr = list(data(0.0))
        return lr  # CosineAnnealingLR's construction leaves the LR unchanged

    def advance(lr: list[float], a: int, b: float) -> list[float]:
        for kind, data in maps:
            if kind == "ratio":
                fa, fb = data(float(a)), data(b)
                lr = [x if p == q else (x * q / p if p else bl * q) for x, p, q, bl in zip(lr, fa, fb, bases)]
            elif kind == "cosine":
                t_max, eta_min, child_bases = data
                ca = 1 + math.cos(math.pi * a / t_max)
                cb = 1 + math.cos(math.pi * b / t_max)
                if (a - t_max) % (2 * t_max) == 0:  # PyTorch's additive branch (c(a) == 0)
                    lr = [x + (cbase - eta_min) * (cb - ca) / 2 for x, cbase in zip(lr, child_bases)]
                else:
                    lr = [eta_min + (x - eta_min) * cb / ca for x in lr]
            else:
                lr = list(data(b))
        return lr

    def fn(e: float) -> list[float]:
        n = math.floor(e)
        if not memo:
            memo.append(initial())
        while len(memo) <= n:
            t = len(memo)
            memo.append(advance(memo[-1], t - 1, float(t)))
        if e == n:
            return list(memo[n])
        return advance(memo[n], n, e)

    return fn


def _flatten_chain(s: Any) -> list[Any]:
    out: list[Any] = []
    for child in s._schedulers:
        if type(child) is _sched.ChainedScheduler:  # a nested chain steps its children in order too
            out.extend(_flatten_chain(child))
        else:
            out.append(child)
    return out


def _chain_map(child: Any) -> tuple[str, Any]:
    cls = type(child)
    if cls is _sched.SequentialLR:
        raise UnsupportedSchedulerError(
            "ChainedScheduler with a SequentialLR child: the SequentialLR restarts its children from the LR the "
            "chain left, which has no exact closed form."
        )
    child_fn = _child_function(child, "ChainedScheduler")
    if cls is _sched.CosineAnnealingLR:
        return "cosine", (child.T_max, child.eta_min, _bases(child))
    if cls in _MULTIPLICATIVE:
        return "ratio", _factors_of(child, child_fn)
    return "absolute", child_fn


def _child_function(child: Any, parent: str) -> ScheduleFn:
    try:
        return schedule_function(child)
    except UnsupportedSchedulerError as err:
        raise UnsupportedSchedulerError(f"{parent} contains an unsupported scheduler: {err}") from err


def _factors_of(child: Any, child_fn: ScheduleFn) -> Callable[[float], list[float]]:
    """Per-group factors (LR / base LR) of a multiplicative child, without dividing where possible."""
    if getattr(child_fn, "factors", None) is not None:
        return child_fn.factors  # type: ignore[attr-defined]
    if getattr(child_fn, "factor", None) is not None:
        n = len(child.base_lrs)
        return lambda e: [child_fn.factor(e)] * n  # type: ignore[attr-defined]
    bases = _bases(child)  # registered user class marked multiplicative
    return lambda e: [lr / b if b else 0.0 for lr, b in zip(child_fn(e), bases, strict=True)]


# ------------------------------------------------------------------------------ schedules in epochs


class EpochSchedule:
    """A multiplicative LR factor as a function of fractional epochs, for ``LambdaLR``.

    Subclasses implement :meth:`factor`. ``total_epochs`` (the horizon) may be left ``None``:
    :class:`~lightning_efficient.StepwiseLR` then sets it from the Trainer (``max_epochs`` or ``max_steps``
    converted to epochs) in ``on_train_start``. Instances are plain callables, so
    ``LambdaLR(optimizer, warmup_cosine(5))`` works with or without the callback (without it, give
    ``total_epochs``). Attributes are saved in the scheduler's ``state_dict`` like any callable object.
    """

    total_epochs: float | None = None

    def __call__(self, epoch: float) -> float:
        return self.factor(float(epoch))

    def factor(self, epoch: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _need_total(self) -> float:
        if self.total_epochs is None:
            raise ValueError(
                f"{type(self).__name__}: total_epochs is not set. Pass total_epochs=..., or train with the "
                "StepwiseLR callback, which sets it from the Trainer's max_epochs / max_steps."
            )
        return float(self.total_epochs)


class warmup_cosine(EpochSchedule):  # noqa: N801 - reads like a function at the call site
    """Linear warmup for ``warmup_epochs``, then half a cosine to ``final_factor`` at ``total_epochs``.

    ``factor(e)``:

    - ``e < warmup_epochs``: ``start_factor + (1 - start_factor) * e / warmup_epochs``
    - ``warmup_epochs <= e <= total_epochs``:
      ``final_factor + (1 - final_factor) * (1 + cos(pi * (e - w) / (total_epochs - w))) / 2``
    - ``e > total_epochs``: ``final_factor``

    Args:
        warmup_epochs: warmup length in epochs (float allowed), ``>= 0``.
        total_epochs: end of the cosine in epochs, ``> warmup_epochs``; ``None`` = follow the Trainer's length
            (set by :class:`~lightning_efficient.StepwiseLR`).
        start_factor: factor at epoch 0, in ``[0, 1]``. Default ``0.0`` (the first update uses LR 0 only if
            ``warmup_epochs > 0``; pick e.g. ``0.01`` to avoid a wasted step).
        final_factor: factor at and after ``total_epochs``, ``>= 0``.

    Raises:
        ValueError: arguments out of range; calling past the warmup while ``total_epochs`` is still ``None``.

    Example::

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(warmup_epochs=5))
        return {"optimizer": optimizer, "lr_scheduler": scheduler}  # + Trainer(callbacks=[StepwiseLR()])
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


# ------------------------------------------------------------------------------------------- plotting


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
        The matplotlib ``Figure``.

    Raises:
        ValueError: bad counts or ``param_group`` out of range.
        ImportError: matplotlib is not installed.
        UnsupportedSchedulerError: see :func:`schedule_function`.
    """
    _check_positive_int(steps_per_epoch, "steps_per_epoch", minimum=1)
    _check_positive_int(num_epochs, "num_epochs", minimum=1)
    n_groups = len(scheduler.optimizer.param_groups)
    if not 0 <= param_group < n_groups:
        raise ValueError(f"param_group must be in [0, {n_groups}), got {param_group!r}.")
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - dev dependency present in tests
        raise ImportError("plot_schedule needs matplotlib: pip install matplotlib") from err

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


def _child_lambdas(scheduler: Any) -> Sequence[Any]:
    """All ``lr_lambdas`` of a scheduler and its children (used to bind :class:`EpochSchedule` horizons)."""
    out: list[Any] = list(getattr(scheduler, "lr_lambdas", []) or [])
    for child in getattr(scheduler, "_schedulers", []) or []:
        out.extend(_child_lambdas(child))
    return out
