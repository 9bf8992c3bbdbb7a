"""ProgressiveResize: training images resized on the device by a schedule in fractional epochs."""

from __future__ import annotations

import time
import warnings
from typing import Any, Optional, Union

import torch

from lightning_efficient.callbacks.base import Callback
from lightning_efficient.functional.batch import get_entry, replace_entry
from lightning_efficient.functional.resize import ResizeSchedule, resize_images, snap
from lightning_efficient.pipeline import add_stage
from lightning_efficient.progress import fractional_epoch, planned_steps_per_epoch

_NAME = "progressive_resize"


class ProgressiveResize(Callback):
    """Train on smaller images first: each training batch is resized on the device to the side the schedule gives
    at its position in the run (:class:`~lightning_efficient.functional.resize.ResizeSchedule`; defaults from
    MosaicML Composer's ProgressiveResizing: half the side for the first half of the run, a ramp, the full side for
    the last 20%). Off by default in ``recipe()`` (``recipe(progressive_resize=True)``): it changes what the model
    sees.

    It is the ``"resize"`` stage of the batch pipeline (:mod:`lightning_efficient.pipeline`): after decoding
    (GPUDecode) and the user's ``on_after_batch_transfer``, before GPUAugmentation (which then works on the smaller
    images) and ChannelsLast. Validation, test and predict batches keep their size (the final one). The position is
    :func:`~lightning_efficient.progress.fractional_epoch`, StepwiseLR's: it follows the epochs that really happened
    (an epoch that ended early is followed by the next integer) and is restored with the Trainer's progress when a
    run resumes from a checkpoint; the schedule itself is saved in the checkpoint and a resume with another one
    warns. The final side is each batch's own (the dataset's size); intermediate sides are snapped to ``multiple``.

    Args:
        start_scale, delay, finetune, multiple: the schedule (see :class:`ResizeSchedule`).
        image_key: where the images are in a batch: an index for tuple/list batches (default 0), a key for dicts;
            a bare tensor batch is the images. uint8 or floating ``[B, C, H, W]``.
        mask_key: index/key of segmentation masks ``[B, H, W]`` or ``[B, K, H, W]``, resized with nearest
            neighbours to the same size.
        total_epochs: the run's length in epochs for the schedule; default: ``max_epochs``, else ``max_steps`` over
            the optimizer steps per epoch.

    Raises:
        ValueError: a schedule value out of range (see :class:`ResizeSchedule`), ``mask_key == image_key``, or at
            the start of fit, no run length (``max_epochs=-1`` and no ``max_steps``, without ``total_epochs``).

    Example::

        trainer = pl.Trainer(max_epochs=16, **recipe(progressive_resize=True, augmentation="trivial_augment"))
    """

    def __init__(
        self,
        start_scale: float = 0.5,
        delay: float = 0.5,
        finetune: float = 0.2,
        multiple: int = 8,
        image_key: Union[int, str] = 0,
        mask_key: Union[int, str, None] = None,
        total_epochs: Optional[float] = None,
    ) -> None:
        self.schedule = ResizeSchedule(start_scale, delay, finetune, multiple)
        if mask_key is not None and mask_key == image_key:
            raise ValueError(f"ProgressiveResize: `mask_key` and `image_key` are both {image_key!r}; they must differ.")
        if total_epochs is not None and not total_epochs > 0:
            raise ValueError(f"ProgressiveResize(total_epochs={total_epochs!r}): expected a number of epochs > 0.")
        self.image_key, self.mask_key, self.total_epochs = image_key, mask_key, total_epochs
        self.position = 0.0  #: fractional epoch of the next training batch
        self.side: Optional[int] = None  #: the side of the last training batch, pixels
        self.images_per_side: dict[int, list[float]] = {}  #: side -> [images, seconds] of training steps
        self._trainer: Any = None
        self._pipeline: Any = None
        self._last_end: Optional[float] = None

    # ---------------------------------------------------------------- hooks
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._trainer = trainer
        self._pipeline = add_stage(trainer, pl_module, _NAME, self._resize, "resize")

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._pipeline is not None and _NAME in self._pipeline.names():
            self._pipeline.remove(_NAME)
        self._pipeline = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.run_epochs(trainer)  # raises early where the run has no length

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.position, self._last_end = fractional_epoch(trainer), None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.position = fractional_epoch(trainer, batch_idx + 1)
        now = time.perf_counter()
        if self.side is not None and self._last_end is not None:
            n = get_entry(batch, self.image_key, who="ProgressiveResize", bare_ok=True).shape[0]
            counts = self.images_per_side.setdefault(self.side, [0.0, 0.0])
            counts[0], counts[1] = counts[0] + n, counts[1] + now - self._last_end
        self._last_end = now

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._last_end = None  # validation time is not a training step's

    # ---------------------------------------------------------------- the stage
    def run_epochs(self, trainer: Any) -> float:
        """The run's length in epochs the schedule spans (``total_epochs``, ``max_epochs``, or ``max_steps`` over the
        optimizer steps per epoch).

        Raises:
            ValueError: none of them is known.
        """
        if self.total_epochs is not None:
            return float(self.total_epochs)
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            return float(trainer.max_epochs)
        per_epoch = planned_steps_per_epoch(trainer)
        if trainer.max_steps and trainer.max_steps > 0 and per_epoch:
            return trainer.max_steps / per_epoch
        raise ValueError(
            "ProgressiveResize: the run has no length (max_epochs=-1 and no max_steps); pass "
            "ProgressiveResize(total_epochs=...) for the schedule."
        )

    def _resize(self, batch: Any, dataloader_idx: int) -> Any:
        trainer = self._trainer
        if trainer is None or not trainer.training:
            return batch
        images = get_entry(batch, self.image_key, who="ProgressiveResize", bare_ok=True)
        if not isinstance(images, torch.Tensor) or images.dim() != 4:
            raise ValueError(
                f"ProgressiveResize: expected images [B, C, H, W] at image_key={self.image_key!r}, got "
                f"{type(images).__name__} {tuple(getattr(images, 'shape', ()))}; set image_key=."
            )
        scale = self.schedule.scale(self.position, self.run_epochs(trainer))
        multiple = self.schedule.multiple
        size = (snap(images.shape[-2], scale, multiple), snap(images.shape[-1], scale, multiple))
        self.side = size[-1]
        batch = replace_entry(batch, self.image_key, resize_images(images, size))
        if self.mask_key is not None:
            masks = get_entry(batch, self.mask_key, who="ProgressiveResize", option="mask_key", bare_ok=False)
            batch = replace_entry(batch, self.mask_key, resize_images(masks, size, masks=True))
        return batch

    # ---------------------------------------------------------------- report and checkpoints
    def efficiency_facts(self) -> dict[str, Any]:
        """For EfficiencyReport: the current side and training images/s per side."""
        rates = tuple((side, n / s) for side, (n, s) in sorted(self.images_per_side.items()) if s > 0)
        return {"image_side": self.side, "images_per_s_by_side": rates}

    def state_dict(self) -> dict[str, Any]:
        s = self.schedule
        return {"schedule": [s.start_scale, s.delay, s.finetune, s.multiple], "total_epochs": self.total_epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("schedule") != self.state_dict()["schedule"]:
            warnings.warn(
                f"ProgressiveResize: the checkpoint was trained with the schedule {state_dict.get('schedule')}"
                f" (start_scale, delay, finetune, multiple), this run uses {self.state_dict()['schedule']}; "
                "the sizes follow this run's.",
                UserWarning,
                stacklevel=2,
            )
