"""What EfficiencyReport observed about a run (:class:`RunFacts`), how callbacks add to it
(:class:`ReportsEfficiencyFacts`), and the run's verdict from its data wait (:func:`verdict`). Plain Python."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Protocol

#: Data-wait share of step time at or above which a run is called data-bound.
DATA_BOUND_SHARE = 0.25


@dataclass
class RunFacts:
    """What the callback observed about a run, the input to :func:`~lightning_efficient.functional.checklist.checklist`.

    Attributes:
        precision: the Trainer's precision string.
        recommended_precision: what :func:`~lightning_efficient.recommended_precision` gives here.
        accelerator: ``"cuda"``, ``"cpu"``, ``"mps"``.
        model_channels_last: share of 4-D conv weights in channels_last (None: the model has none).
        inputs_channels_last: whether the 4-D float input seen at ``training_step`` was channels_last
            (None: no such input).
        lr_per_step: whether every LR scheduler steps per optimizer step (None: no scheduler).
        lr_epoch_wise: why a scheduler still steps per epoch although StepwiseLR is in the run, and the fix if
            there is one: ``(reason, fix)``, ``fix`` ``""`` where it is so by design (e.g. ReduceLROnPlateau).
        device_augmentation: a ``GPUAugmentation`` callback is active.
        cpu_augmentation: names of per-image torchvision augmentations found in the training dataset.
        num_workers: the training DataLoader's workers (None: unknown).
        cpu_cores: CPU cores available to each process.
        suggested_workers: DataLoader workers to recommend (default: ``cpu_cores``); the callback takes it from
            :func:`~lightning_efficient.data.loader.suggest_loader_kwargs`.
        pin_memory, persistent_workers: the training DataLoader's settings (None: unknown).
        pillow_simd: whether the installed PIL is Pillow-SIMD.
        decodes_images: whether the training dataset decodes image files (ImageFolder-like).
        epochs: training epochs run.
        image_side: the side of the last training images under ProgressiveResize, pixels (None: not resized);
            ``images_per_s_by_side``: ``(side, training images/s)`` per side it trained at.
        tuned: what :func:`~lightning_efficient.tune` measured for this model on this machine (an object with
            ``decisions``, e.g. a ``TuneResult``), or ``None``: where it decided a setting, the checklist quotes
            the measured ratio instead of the general advice.
    """

    precision: str
    recommended_precision: str
    accelerator: str
    model_channels_last: Optional[float] = None
    inputs_channels_last: Optional[bool] = None
    lr_per_step: Optional[bool] = None
    lr_epoch_wise: Optional[tuple[str, str]] = None
    device_augmentation: bool = False
    cpu_augmentation: tuple[str, ...] = ()
    num_workers: Optional[int] = None
    cpu_cores: int = 1
    suggested_workers: Optional[int] = None
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    pillow_simd: bool = False
    decodes_images: bool = False
    epochs: int = 1
    image_side: Optional[int] = None
    images_per_s_by_side: tuple[tuple[int, float], ...] = ()
    tuned: Any = None


class ReportsEfficiencyFacts(Protocol):
    """How a callback tells :class:`~lightning_efficient.EfficiencyReport` what it does (instead of type tests).

    A callback (ours or a user's) that implements ``efficiency_facts`` returns :class:`RunFacts` field values it is
    responsible for, e.g. ``{"device_augmentation": True}`` (GPUAugmentation) or ``{"lr_per_step": True}``
    (StepwiseLR); the report applies them over what it observed itself. Unknown keys raise ``TypeError`` when the
    report builds its :class:`RunFacts`.
    """

    def efficiency_facts(self) -> Mapping[str, Any]: ...


def verdict(data_wait_share: float) -> str:
    """``"data-bound"`` at or above :data:`DATA_BOUND_SHARE` of step time spent waiting, else ``"compute-bound"``."""
    if math.isnan(data_wait_share):
        return "unknown (no step measured)"
    return "data-bound" if data_wait_share >= DATA_BOUND_SHARE else "compute-bound"
