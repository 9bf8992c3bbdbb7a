"""Which window of an image ``FastImageFolder`` keeps: a RandomResizedCrop (training) or Resize + CenterCrop
(evaluation), chosen from the image size alone, before any pixel is decoded.

The geometry itself is :mod:`lightning_efficient.functional.crop` (torchvision's algorithms).
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_efficient.functional.crop import center_crop_box, crop_window_to_box, random_resized_crop_window

__all__ = ["Box", "CropChoice"]

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class CropChoice:
    """The crop settings of a ``FastImageFolder``; :meth:`box` applies them to one image size.

    Attributes:
        size: output ``(h, w)`` in pixels.
        train: RandomResizedCrop (True) or shorter-side resize to ``eval_resize`` + centre crop (False).
        scale: RandomResizedCrop ``(min, max)`` area fraction.
        ratio: RandomResizedCrop ``(min, max)`` aspect ratio ``w / h``.
        eval_resize: shorter side in pixels before the centre crop (``train=False``), >= ``max(size)``.
    """

    size: tuple[int, int]
    train: bool
    scale: tuple[float, float]
    ratio: tuple[float, float]
    eval_resize: int

    def window(self, width: int, height: int) -> tuple[int, int, int, int]:
        """A RandomResizedCrop window ``(top, left, h, w)`` in pixels, drawn from torch's global RNG."""
        return random_resized_crop_window(width, height, self.scale, self.ratio)

    def box(self, width: int, height: int) -> Box:
        """The crop of a ``width`` x ``height`` image (oriented pixels) as ``(left, top, right, bottom)`` floats.

        ``train=True`` draws a new random window on every call (torch's global RNG).
        """
        if self.train:
            return crop_window_to_box(self.window(width, height))
        return center_crop_box(width, height, self.size, self.eval_resize)
