"""Learning-rate schedules as functions of fractional epochs (functional core of :class:`StepwiseLR`).

A PyTorch epoch-interval scheduler defines the learning rate (LR) of every param group at integer epochs
``e = 0, 1, 2, ...`` (``scheduler.last_epoch``). This package gives each supported scheduler class a *closed
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

Modules (one concept each):

- :mod:`.registry`: the factory: :func:`schedule_function`, :func:`register_schedule`, :func:`is_supported`,
  :class:`UnsupportedSchedulerError`;
- :mod:`.simple`: closed forms of ``StepLR``, ``MultiStepLR``, ``ConstantLR``, ``LinearLR``, ``ExponentialLR``,
  ``PolynomialLR``, ``CosineAnnealingLR``, ``CosineAnnealingWarmRestarts``;
- :mod:`.lambdas`: ``LambdaLR`` (functions called with fractional epochs) and ``MultiplicativeLR``;
- :mod:`.composites`: ``SequentialLR`` and ``ChainedScheduler``;
- :mod:`.torch_internals`: the only module that reads private attributes of PyTorch schedulers;
- :mod:`.epoch_schedule`: :class:`EpochSchedule`, :class:`warmup_cosine`, :func:`epoch_schedules`;
- :mod:`.evaluate`: :func:`lr_at`, :func:`stepwise_lrs`, :func:`epochwise_lrs`, :func:`schedule_horizon`,
  :func:`scheduler_epoch`;
- :mod:`.plot`: :func:`plot_schedule`.

The property "equal at every epoch boundary, and equal to PyTorch's closed form in between" is checked
against the real schedulers with hypothesis in ``tests/functional/test_schedules.py``. Schedule functions of
PyTorch's classes are picklable callable objects (a ``LambdaLR``/``MultiplicativeLR`` one when its functions are).

Not convertible (:class:`UnsupportedSchedulerError`): ``ReduceLROnPlateau``, ``OneCycleLR``, ``CyclicLR``,
unregistered classes, a ``MultiplicativeLR`` after the first phase of a ``SequentialLR`` and a ``SequentialLR``
inside a ``ChainedScheduler`` (both restart from whatever LR the previous scheduler left).

Extending: :func:`register_schedule` maps your own ``LRScheduler`` subclass to a converter.
Epoch-native schedules: :class:`warmup_cosine` (an :class:`EpochSchedule` for ``LambdaLR``) whose horizon can
follow the Trainer (:meth:`EpochSchedule.follow_run`). Plotting: :func:`plot_schedule`.
"""

# Importing the converter modules registers PyTorch's classes.
from lightning_efficient.functional.schedules import composites, lambdas, simple  # noqa: F401
from lightning_efficient.functional.schedules.epoch_schedule import EpochSchedule, epoch_schedules, warmup_cosine
from lightning_efficient.functional.schedules.evaluate import (
    epochwise_lrs,
    lr_at,
    schedule_horizon,
    scheduler_epoch,
    stepwise_lrs,
)
from lightning_efficient.functional.schedules.plot import plot_schedule
from lightning_efficient.functional.schedules.registry import (
    Converter,
    ScheduleFn,
    UnsupportedSchedulerError,
    is_supported,
    register_schedule,
    schedule_function,
    unregister_schedule,
)

__all__ = [
    "Converter",
    "EpochSchedule",
    "ScheduleFn",
    "UnsupportedSchedulerError",
    "epoch_schedules",
    "epochwise_lrs",
    "is_supported",
    "lr_at",
    "plot_schedule",
    "register_schedule",
    "schedule_function",
    "schedule_horizon",
    "scheduler_epoch",
    "stepwise_lrs",
    "unregister_schedule",
    "warmup_cosine",
]
