"""Functional cores: pure functions on tensors, modules and schedulers, usable without a Trainer.

- :mod:`~lightning_efficient.functional.layout`: channels_last (NHWC) for modules and batches.
- :mod:`~lightning_efficient.functional.schedules`: LR schedules as functions of fractional epochs.
- :mod:`~lightning_efficient.functional.augment`: per-sample batch augmentation (draw parameters, then apply).
- :mod:`~lightning_efficient.functional.crop`: RandomResizedCrop and Resize + CenterCrop geometry (pure math).
- :mod:`~lightning_efficient.functional.measurement`: the record of measured training steps;
  :mod:`~lightning_efficient.functional.timing`: the clocks and the step timeline that feed it.
- :mod:`~lightning_efficient.functional.run_facts`, :mod:`~lightning_efficient.functional.checklist`,
  :mod:`~lightning_efficient.functional.tune_advice`: what a run did, the practice checklist, tune()'s
  measurements in the advice.
"""

from lightning_efficient.functional.augment import (
    apply_trivial_augment,
    normalize,
    preview,
    rand_augment,
    sample_trivial_augment,
    to_float,
    trivial_augment,
)
from lightning_efficient.functional.layout import (
    BatchToChannelsLast,
    ConversionReport,
    batch_to_channels_last,
    convert_module_to_channels_last,
    is_channels_last,
)
from lightning_efficient.functional.schedules import (
    EpochSchedule,
    UnsupportedSchedulerError,
    epochwise_lrs,
    lr_at,
    plot_schedule,
    register_schedule,
    schedule_function,
    stepwise_lrs,
    warmup_cosine,
)

__all__ = [
    "BatchToChannelsLast",
    "ConversionReport",
    "EpochSchedule",
    "UnsupportedSchedulerError",
    "apply_trivial_augment",
    "batch_to_channels_last",
    "convert_module_to_channels_last",
    "epochwise_lrs",
    "is_channels_last",
    "lr_at",
    "normalize",
    "plot_schedule",
    "preview",
    "rand_augment",
    "register_schedule",
    "sample_trivial_augment",
    "schedule_function",
    "stepwise_lrs",
    "to_float",
    "trivial_augment",
    "warmup_cosine",
]
