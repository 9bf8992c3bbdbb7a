"""ProgressiveResize: training images resized on the device by a schedule in fractional epochs."""

from __future__ import annotations

import warnings
from typing import Any, Optional, Union

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils.data import DataLoader

from lightning_efficient.adapter import Callback
from lightning_efficient.data.folder import FastImageFolder
from lightning_efficient.functional.batch import get_entry, replace_entry
from lightning_efficient.functional.resize import ResizeSchedule, resize_images
from lightning_efficient.pipeline import add_stage
from lightning_efficient.progress import fractional_epoch, planned_steps_per_epoch, upcoming_batch

_NAME = "progressive_resize"


class ProgressiveResize(Callback):
    """Train on smaller images first: each training batch is resized on the device to the side the schedule gives
    at its position in the run (:class:`~lightning_efficient.functional.resize.ResizeSchedule`; defaults from
    MosaicML Composer's ProgressiveResizing: half the side for the first half of the run, a ramp, the full side for
    the last 20%; never below 64 px, ``min_side``, so images of 64 px or less keep their size, with a warning). Off by
    default in ``recipe()`` (``recipe(progressive_resize=True)``): it changes what the model sees.

    It is the ``"resize"`` stage of the batch pipeline (:mod:`lightning_efficient.pipeline`): after decoding
    (GPUDecode) and the user's ``on_after_batch_transfer``, before GPUAugmentation (which then works on the smaller
    images, with TrivialAugment's translations, given in pixels, scaled to the side: as strong relative to the
    image as at the final size) and ChannelsLast. Validation, test and predict batches keep their size (the final
    one). The position is :func:`~lightning_efficient.progress.fractional_epoch`, StepwiseLR's: it follows the
    epochs that really happened (an epoch that ended early is followed by the next integer) and is restored with the
    Trainer's progress when a run resumes from a checkpoint (also one saved mid-epoch: the batch after it gets the
    size it had in the uninterrupted run); the schedule itself is saved in the checkpoint and a resume with another
    one warns. The final side is each batch's own (the dataset's size); intermediate sides are snapped to
    ``multiple``. Lightning's ``BatchSizeFinder`` tries its batch sizes at the final side, where a step needs the
    most memory.

    Training data from a :class:`~lightning_efficient.FastImageFolder` (also inside a ``Subset``) is decoded at the
    scheduled size in the DataLoader workers (its :attr:`~lightning_efficient.FastImageFolder.scheduled_size`): less
    CPU work per image where decoding bounds the step. The workers prefetch, so they decode at the size of the batch
    ``num_workers x prefetch_factor + 2`` batches ahead (sides only grow) and this stage resizes the rest of the way.

    Args:
        start_scale: the scale of the side at the start, in ``(0, 1]`` (default 0.5: half the side).
        delay: the share of the run (0-1) at ``start_scale`` (default 0.5).
        finetune: the share of the run (0-1) at the end at ``end_scale``; ``delay + finetune <= 1`` (default 0.2).
        multiple: intermediate sides are multiples of this many pixels, ``>= 1`` (default 8).
        min_side: intermediate sides are at least this many pixels, rounded up to a ``multiple``; an image side at
            or below it is never shrunk; 0: no floor (default 64, see :class:`ResizeSchedule`).
        end_scale: the scale of the side at the end of the ramp and during ``finetune``, in
            ``[start_scale, 1]`` (default 1.0: the final side).
        image_key: where the images are in a batch: an index for tuple/list batches (default 0), a key for dicts;
            a bare tensor batch is the images. uint8 or floating ``[B, C, H, W]``.
        mask_key: index/key of segmentation masks ``[B, H, W]`` or ``[B, K, H, W]``, resized with nearest
            neighbours to the same size.
        total_epochs: the run's length in epochs for the schedule; default: ``max_epochs``, else ``max_steps`` over
            the optimizer steps per epoch.
        decode_at_size: let FastImageFolder training data decode at the scheduled size (``False``: at its ``size``).

    Raises:
        ValueError: a schedule value out of range (see :class:`ResizeSchedule`), ``mask_key == image_key``, or at
            the start of fit, no run length (``max_epochs=-1`` and no ``max_steps``, without ``total_epochs``).

    Example:
        ```python
        kwargs = recipe(progressive_resize=True, augmentation="trivial_augment")
        trainer = pl.Trainer(max_epochs=16, **kwargs)
        ```
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
        min_side: int = 64,
        decode_at_size: bool = True,
        end_scale: float = 1.0,
    ) -> None:
        self.schedule = ResizeSchedule(start_scale, delay, finetune, multiple, min_side, end_scale)
        if mask_key is not None and mask_key == image_key:
            raise ValueError(f"ProgressiveResize: `mask_key` and `image_key` are both {image_key!r}; they must differ.")
        if total_epochs is not None and not total_epochs > 0:
            raise ValueError(f"ProgressiveResize(total_epochs={total_epochs!r}): expected a number of epochs > 0.")
        self.image_key, self.mask_key, self.total_epochs = image_key, mask_key, total_epochs
        self.position = 0.0  #: fractional epoch of the next training batch
        self.side: Optional[int] = None  #: the side of the last training batch, pixels
        self._trainer: Any = None
        self._pipeline: Any = None
        self.decode_at_size = bool(decode_at_size)
        self._folders: list[FastImageFolder] = []  # the training datasets decoding at the scheduled size
        self._final: Optional[tuple[int, int]] = None  # their size, the final one
        self._ahead = 2  # batches the loader prefetches: workers x prefetch_factor + 2
        self._warned: set[str] = set()  # each warning once per callback: "upscaled", "too small"

    # ---------------------------------------------------------------- hooks
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._trainer = trainer
        self._pipeline = add_stage(trainer, pl_module, _NAME, self._resize, "resize")

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._release()
        if self._pipeline is not None and _NAME in self._pipeline.names():
            self._pipeline.remove(_NAME)
        self._pipeline = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.run_epochs(trainer)  # raises early where the run has no length
        self.position = upcoming_position(trainer)  # a run resumed mid-epoch goes on from its restored batch
        loaders = trainer.train_dataloader
        folders = [d for d in _datasets(loaders) if isinstance(d, FastImageFolder) and d.train]
        if self.decode_at_size and folders and len({d.size for d in folders}) == 1:
            self._folders, self._final = folders, folders[0].size
            workers = [
                getattr(dl, "num_workers", 0) * (getattr(dl, "prefetch_factor", None) or 2) for dl in _flat(loaders)
            ]
            self._ahead = max(workers, default=0) + 2
            self._publish(trainer)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.position = fractional_epoch(trainer)
        self._publish(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._release()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.position = fractional_epoch(trainer, batch_idx + 1)
        self._publish(trainer)

    # ---------------------------------------------------------------- the stage
    def run_epochs(self, trainer: Any) -> float:
        """The run's length in epochs the schedule spans (``total_epochs``, ``max_epochs``, or ``max_steps`` over the
        optimizer steps per epoch).

        Args:
            trainer: the Trainer of the run.

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
        if not any(cb is self for cb in getattr(trainer, "callbacks", [self])):
            return batch  # Lightning's BatchSizeFinder runs its trial steps without callbacks: the final size
        images = get_entry(batch, self.image_key, who="ProgressiveResize", bare_ok=True)
        if not isinstance(images, torch.Tensor) or images.dim() != 4:
            raise ValueError(
                f"ProgressiveResize: expected images [B, C, H, W] at image_key={self.image_key!r}, got "
                f"{type(images).__name__} {tuple(getattr(images, 'shape', ()))}; set image_key=."
            )
        self.position = upcoming_position(trainer)
        scale = self.schedule.scale(self.position, self.run_epochs(trainer))
        final = self._final or (images.shape[-2], images.shape[-1])
        size = (self.schedule.side_at(final[0], scale), self.schedule.side_at(final[1], scale))
        if (images.shape[-2] < size[0] or images.shape[-1] < size[1]) and "upscaled" not in self._warned:
            self._warned.add("upscaled")
            warnings.warn(
                f"ProgressiveResize: a training batch arrived at {tuple(images.shape[-2:])}, below the scheduled "
                f"{size}, and is upscaled: the loader prefetches more than {self._ahead} batches. Pass "
                "ProgressiveResize(decode_at_size=False) to decode at the full size instead.",
                UserWarning,
                stacklevel=2,
            )
        if size == tuple(images.shape[-2:]) == tuple(final) and scale < 1 and "too small" not in self._warned:
            self._warned.add("too small")
            warnings.warn(
                f"ProgressiveResize: the training images ({final[0]}x{final[1]} px) are not larger than "
                f"min_side={self.schedule.min_side}: they keep their size all run. Pass a lower min_side to shrink "
                "them (on 64 px images, starting at 32-48 px cost top-1 and time to accuracy).",
                UserWarning,
                stacklevel=2,
            )
        self.side = size[-1]
        if self._pipeline is not None:
            self._pipeline.image_scale = size[-1] / final[-1]  # GPUAugmentation's translations follow it
        batch = replace_entry(batch, self.image_key, resize_images(images, size))
        if self.mask_key is not None:
            masks = get_entry(batch, self.mask_key, who="ProgressiveResize", option="mask_key", bare_ok=False)
            batch = replace_entry(batch, self.mask_key, resize_images(masks, size, masks=True))
        return batch

    # ---------------------------------------------------------------- report and checkpoints
    def efficiency_facts(self) -> dict[str, Any]:
        """For EfficiencyReport: the current side (its images/s per side come from its own measurement, whose
        steps :meth:`efficiency_label` labels)."""
        return {"image_side": self.side}

    def efficiency_label(self) -> Optional[int]:
        """For EfficiencyReport: the label of the training step just run, its image side (``None``: none yet)."""
        return self.side

    def _publish(self, trainer: Any) -> None:
        """Tell the followed datasets the size of the batch :attr:`_ahead` batches from now (``(0, 0)``: full)."""
        if not self._folders or self._final is None:
            return
        batches = trainer.num_training_batches
        ahead = self._ahead / batches if isinstance(batches, int) and batches > 0 else 0.0
        scale = self.schedule.scale(self.position + ahead, self.run_epochs(trainer))
        size = [0, 0] if scale >= 1 else [self.schedule.side_at(f, scale) for f in self._final]
        for folder in self._folders:
            folder.scheduled_size.copy_(torch.tensor(size))

    def _release(self) -> None:
        for folder in self._folders:
            folder.scheduled_size.zero_()  # the full size again, e.g. for a later fit without this callback
        self._folders, self._final = [], None

    def state_dict(self) -> dict[str, Any]:
        s = self.schedule
        schedule = [s.start_scale, s.delay, s.finetune, s.multiple, s.min_side, s.end_scale]
        return {"schedule": schedule, "total_epochs": self.total_epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = list(state_dict.get("schedule") or [])
        saved += [0] * (len(saved) == 4)  # written before min_side existed
        saved += [1.0] * (len(saved) == 5)  # written before end_scale existed
        if saved != self.state_dict()["schedule"]:
            warnings.warn(
                f"ProgressiveResize: the checkpoint was trained with the schedule {saved} (start_scale, delay, "
                f"finetune, multiple, min_side, end_scale), this run uses {self.state_dict()['schedule']}; "
                "the sizes follow this run's.",
                UserWarning,
                stacklevel=2,
            )


def _flat(loaders: Any) -> list[DataLoader]:
    """The DataLoaders in Lightning's ``trainer.train_dataloader`` (one, or a list / dict of them)."""
    found: list[DataLoader] = []
    apply_to_collection(loaders, DataLoader, found.append)
    return found


def _datasets(loaders: Any) -> list[Any]:
    """The datasets under the loaders, through ``.dataset`` (``Subset``) and ``.datasets`` (``ConcatDataset``)."""
    found, todo, seen = [], [getattr(dl, "dataset", None) for dl in _flat(loaders)], set()
    while todo:
        data = todo.pop()
        if data is None or id(data) in seen:
            continue
        seen.add(id(data))
        found.append(data)
        todo += [getattr(data, "dataset", None), *(getattr(data, "datasets", None) or [])]
    return found


def upcoming_position(trainer: Any) -> float:
    """The position in fractional epochs of the training batch about to run (:func:`~lightning_efficient.progress.
    upcoming_batch`; after a resume mid-epoch, the restored batch, not the epoch's start)."""
    return fractional_epoch(trainer, upcoming_batch(trainer))
