"""The registry (factory) of schedule converters: scheduler class -> closed form in fractional epochs.

:func:`schedule_function` looks the scheduler's exact class up and calls its converter; the converters of
PyTorch's classes register themselves when :mod:`lightning_efficient.functional.schedules` is imported
(``simple``, ``lambdas``, ``composites``). :func:`register_schedule` adds your own classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.optim import lr_scheduler as _sched

__all__ = [
    "Converter",
    "ScheduleFn",
    "UnsupportedSchedulerError",
    "convert_child",
    "is_multiplicative",
    "is_supported",
    "register_schedule",
    "schedule_function",
    "unregister_schedule",
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
            right after construction). It must agree with ``scheduler.step()`` at integer ``e``. A
            module-level function or callable object (not a closure) keeps the result picklable.
        multiplicative: ``True`` if the class's ``step()`` multiplies the current LR by ``fn(e)/fn(e-1)``, so
            it can be a child of ``ChainedScheduler``.

    Returns:
        The converter (so ``@register_schedule(MyLR)`` leaves the decorated function usable).

    Raises:
        TypeError: ``scheduler_cls`` is not a class or ``converter`` is not callable.

    Example:
        ```python
        class HalvingLR(torch.optim.lr_scheduler.LRScheduler):
            def get_lr(self):  # lr = base * 0.5 ** epoch
                return [b * 0.5**self.last_epoch for b in self.base_lrs]

        def halving(scheduler):  # the LR at any (fractional) epoch e
            return lambda e: [b * 0.5**e for b in scheduler.base_lrs]

        register_schedule(HalvingLR, halving)
        ```
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


def is_multiplicative(scheduler_cls: type) -> bool:
    """Whether ``scheduler_cls`` was registered with ``multiplicative=True`` (its ``step()`` scales the LR)."""
    return scheduler_cls in _MULTIPLICATIVE


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
        ``fn`` with ``fn(e)`` the list of LRs (Python floats, one per param group, same order as
        ``scheduler.optimizer.param_groups``) at scheduler epoch ``e >= 0`` (a float). For PyTorch's classes
        ``fn`` is a picklable callable object.

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


def convert_child(child: Any, parent: str) -> ScheduleFn:
    """:func:`schedule_function` of a composite's child; the error names the composite ``parent``.

    Raises:
        UnsupportedSchedulerError: the child is not convertible (message prefixed with ``parent``).
    """
    try:
        return schedule_function(child)
    except UnsupportedSchedulerError as err:
        raise UnsupportedSchedulerError(f"{parent} contains an unsupported scheduler: {err}") from err
