"""Crop geometry of torchvision's ``RandomResizedCrop`` and ``Resize`` + ``CenterCrop``: pure math, no pixels.

The one home of these formulas: :class:`~lightning_efficient.FastImageFolder` draws its crop window here before
decoding, and the batched samplers of :mod:`lightning_efficient.functional.augment` use the same constants and
fallback.

Units: sizes and offsets are in **pixels**; ``(top, left, h, w)`` is torchvision's ``(i, j, h, w)`` order and
``(left, top, right, bottom)`` is Pillow's box order. ``ratio`` is width / height.

Source: torchvision ``transforms/transforms.py``: ``RandomResizedCrop.get_params`` (area uniform in ``scale``,
log-aspect uniform in ``log(ratio)``, 10 tries, then the central crop clamped to ``ratio``), ``Resize`` (the
longer side becomes ``int(shorter * long / short)``) and ``CenterCrop`` (offset ``int(round((size - crop) / 2))``,
``transforms/_functional_tensor.py`` / ``functional.py::center_crop``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

__all__ = [
    "RRC_TRIES",
    "center_crop_box",
    "crop_window_to_box",
    "random_resized_crop_fallback",
    "random_resized_crop_window",
]

Box = tuple[float, float, float, float]

#: Number of random tries of torchvision's ``RandomResizedCrop.get_params`` before the central fallback.
RRC_TRIES = 10


@functools.lru_cache(maxsize=16)
def _log_ratio(low: float, high: float) -> tuple[float, float]:
    # torchvision computes torch.log(torch.tensor(ratio)) (float32) on every call; the same values, computed once
    log = torch.log(torch.tensor((low, high)))
    return float(log[0]), float(log[1])


def random_resized_crop_fallback(width: int, height: int, ratio: Sequence[float]) -> tuple[int, int, int, int]:
    """The window ``RandomResizedCrop`` uses when all :data:`RRC_TRIES` tries fail: the central crop clamped to
    ``ratio``.

    Args:
        width, height: image size in pixels, >= 1.
        ratio: ``(min, max)`` aspect ratio ``w / h``.

    Returns:
        ``(top, left, h, w)`` in pixels, inside the image.
    """
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def random_resized_crop_window(
    width: int,
    height: int,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
) -> tuple[int, int, int, int]:
    """Draw one ``RandomResizedCrop`` window from the image size alone (no pixels needed).

    Same algorithm and the same draws from torch's **global** RNG, in the same order, as torchvision's
    ``RandomResizedCrop.get_params``, so ``torch.manual_seed`` / ``seed_everything`` and DataLoader worker seeding
    make it reproducible and a given seed gives torchvision's window.

    Args:
        width: image width in pixels, >= 1.
        height: image height in pixels, >= 1.
        scale: ``(min, max)`` fraction of the image area the crop covers.
        ratio: ``(min, max)`` aspect ratio ``w / h`` of the crop, before resizing.

    Returns:
        ``(top, left, h, w)`` in pixels (torchvision's ``(i, j, h, w)``), ints, always inside the image.
    """
    area = height * width
    log_ratio = _log_ratio(float(ratio[0]), float(ratio[1]))
    for _ in range(RRC_TRIES):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)).item())
            j = int(torch.randint(0, width - w + 1, size=(1,)).item())
            return i, j, h, w
    return random_resized_crop_fallback(width, height, ratio)


def crop_window_to_box(window: tuple[int, int, int, int]) -> Box:
    """``(top, left, h, w)`` -> ``(left, top, right, bottom)`` as floats (Pillow's box order), in pixels."""
    top, left, h, w = window
    return (float(left), float(top), float(left + w), float(top + h))


def center_crop_box(width: int, height: int, size: tuple[int, int], resize_shorter: int) -> Box:
    """Box in the original image equivalent to ``Resize(resize_shorter)`` then ``CenterCrop(size)``.

    Uses torchvision's rounding (the longer side becomes ``int(resize_shorter * long / short)``; the crop offset is
    ``int(round((resized - crop) / 2))``), expressed in original-image pixels so that a single
    ``Image.resize(size, box=box)`` replaces the two resamples.

    Args:
        width: image width in pixels, >= 1.
        height: image height in pixels, >= 1.
        size: output ``(h, w)`` in pixels.
        resize_shorter: length in pixels the shorter side is resized to; must be >= ``max(size)``.

    Returns:
        ``(left, top, right, bottom)`` in original pixels (floats, possibly fractional).

    Raises:
        ValueError: if ``resize_shorter < max(size)`` (the centre crop would need padding).
    """
    out_h, out_w = size
    if resize_shorter < max(out_h, out_w):
        raise ValueError(
            f"resize_shorter={resize_shorter} is smaller than the crop size {size}; the centre crop would need "
            f"padding. Use resize_shorter >= {max(out_h, out_w)}."
        )
    if width <= height:
        new_w, new_h = resize_shorter, int(resize_shorter * height / width)
    else:
        new_h, new_w = resize_shorter, int(resize_shorter * width / height)
    top = int(round((new_h - out_h) / 2.0))
    left = int(round((new_w - out_w) / 2.0))
    sx, sy = new_w / width, new_h / height
    return (left / sx, top / sy, (left + out_w) / sx, (top + out_h) / sy)
