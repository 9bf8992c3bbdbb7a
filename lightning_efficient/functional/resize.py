"""Progressive resizing: train on smaller images first, on the full size at the end.

The image side is a function of the position in the run, in fractional epochs (the same position StepwiseLR uses):
``start_scale`` of the final side for the first ``delay`` of the run, then a linear ramp to ``end_scale`` (default
1: the final side itself), held for the last ``finetune`` of the run. Intermediate sizes are snapped to a multiple
of ``multiple`` pixels (so that ``torch.compile`` and cuDNN see few distinct shapes); the final size is never
snapped. Defaults from MosaicML Composer's ``ProgressiveResizing`` (initial scale 0.5, delay 0.5, finetune 0.2);
FFCV's ResNet-50 ImageNet recipes ramp 160 -> 192 px and test at 224 (Leclerc et al., 2023, "FFCV: Accelerating
Training by Removing Data Bottlenecks"), which ``end_scale`` below 1 expresses: training a little below the test
side suits a model trained on RandomResizedCrop, whose crops enlarge the objects (Touvron et al., 2019, "Fixing the
train-test resolution discrepancy"). Downscaling is antialiased (as
``torchvision.transforms.v2.functional.resize(antialias=True)``), masks use nearest neighbours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ResizeSchedule:
    """The scale of the training images' side over a run (see the module docstring).

    Attributes:
        start_scale: scale of the side at the start, in ``(0, 1]``.
        delay: share of the run (0-1) at ``start_scale``.
        finetune: share of the run (0-1) at the end at full size; ``delay + finetune <= 1``.
        multiple: intermediate sides are multiples of this many pixels (``>= 1``).
        end_scale: scale of the side at the end of the ramp and during ``finetune``, in ``[start_scale, 1]``
            (default 1: the final side; FFCV's 192 of 224 px is 0.857).
        min_side: intermediate sides are at least this many pixels, rounded up to a multiple (``>= 0``; 0: no
            floor, as Composer's): an image side at or below it is never shrunk. Default 64: below it a stride-32
            network's (a ResNet's) last feature map is 1x1, and on 64 px images starting at 32-48 px cost top-1 and
            time to accuracy (``benchmarks/results/time_to_accuracy.md``); published recipes start at 112 px or
            more (Composer's 0.5 x 224, fast.ai's 128, FFCV's 160).

    Raises:
        ValueError: a value out of its range.
    """

    start_scale: float = 0.5
    delay: float = 0.5
    finetune: float = 0.2
    multiple: int = 8
    min_side: int = 64
    end_scale: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.start_scale <= 1:
            raise ValueError(f"ResizeSchedule(start_scale={self.start_scale!r}): expected a scale in (0, 1].")
        if not self.start_scale <= self.end_scale <= 1:
            raise ValueError(
                f"ResizeSchedule(end_scale={self.end_scale!r}): expected a scale in [start_scale, 1] "
                f"= [{self.start_scale}, 1]."
            )
        if not (0 <= self.delay <= 1 and 0 <= self.finetune <= 1 and self.delay + self.finetune <= 1):
            raise ValueError(
                f"ResizeSchedule(delay={self.delay!r}, finetune={self.finetune!r}): expected shares "
                "of the run in [0, 1] with delay + finetune <= 1."
            )
        if isinstance(self.multiple, bool) or not isinstance(self.multiple, int) or self.multiple < 1:
            raise ValueError(f"ResizeSchedule(multiple={self.multiple!r}): expected an int >= 1 (pixels).")
        if isinstance(self.min_side, bool) or not isinstance(self.min_side, int) or self.min_side < 0:
            raise ValueError(f"ResizeSchedule(min_side={self.min_side!r}): expected an int >= 0 (pixels).")

    def scale(self, epoch: float, total_epochs: float) -> float:
        """The scale (0-1] of the side at ``epoch`` of a run.

        Args:
            epoch: the position in the run in fractional epochs.
            total_epochs: the run's length in epochs, ``> 0``.
        """
        if not total_epochs > 0:
            raise ValueError(f"ResizeSchedule.scale(total_epochs={total_epochs!r}): expected a number of epochs > 0.")
        f = min(max(epoch / total_epochs, 0.0), 1.0)
        ramp = 1 - self.finetune - self.delay
        if f >= 1 - self.finetune:
            return self.end_scale
        if f <= self.delay or ramp <= 0:
            return self.start_scale
        return self.start_scale + (self.end_scale - self.start_scale) * (f - self.delay) / ramp

    def side(self, final: int, epoch: float, total_epochs: float) -> int:
        """The side in pixels at ``epoch`` (:meth:`side_at` its :meth:`scale`).

        Args:
            final: the final side in pixels (the images' own).
            epoch: the position in the run in fractional epochs.
            total_epochs: the run's length in epochs, ``> 0``.
        """
        return self.side_at(final, self.scale(epoch, total_epochs))

    def side_at(self, final: int, scale: float) -> int:
        """The side in pixels at ``scale``: ``final`` at full scale, else snapped down to a multiple of
        :attr:`multiple` (at least one multiple), at least :attr:`min_side` rounded up to one, at most ``final``.

        Args:
            final: the final side in pixels.
            scale: the scale of the side, in ``(0, 1]``.
        """
        floor = -(-self.min_side // self.multiple) * self.multiple
        return min(final, max(snap(final, scale, self.multiple), floor))

    def sides(self, final: int, total_epochs: float, steps_per_epoch: int = 1000) -> list[int]:
        """Every side the run visits, in order.

        Args:
            final: the final side in pixels.
            total_epochs: the run's length in epochs, ``> 0``.
            steps_per_epoch: how often per epoch the side is evaluated.
        """
        out: list[int] = []
        for k in range(int(math.ceil(total_epochs * steps_per_epoch)) + 1):
            side = self.side(final, k / steps_per_epoch, total_epochs)
            if not out or out[-1] != side:
                out.append(side)
        return out


def snap(final: int, scale: float, multiple: int) -> int:
    """``final`` if ``scale >= 1``, else ``final * scale`` rounded down to a multiple of ``multiple`` pixels, at least
    ``multiple`` and at most ``final``."""
    if scale >= 1:
        return final
    return min(final, max(multiple, int(final * scale) // multiple * multiple))


def resize_images(images: torch.Tensor, size: tuple[int, int], *, masks: bool = False) -> torch.Tensor:
    """``images`` (``[B, C, H, W]`` or ``[B, H, W]``, uint8 or floating) resized to ``size`` (height, width):
    antialiased bilinear for images, nearest for ``masks``; same dtype; a no-op at the same size.

    Raises:
        ValueError: a tensor of fewer than 3 dimensions.
    """
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2.functional import resize

    if images.dim() < 3:
        raise ValueError(
            f"resize_images(): expected a batch [B, C, H, W] or [B, H, W], got shape {tuple(images.shape)}."
        )
    if tuple(images.shape[-2:]) == tuple(size):
        return images
    mode = InterpolationMode.NEAREST_EXACT if masks else InterpolationMode.BILINEAR
    return resize(images, list(size), interpolation=mode, antialias=not masks)
