"""Conversion of a batch to floating point in ``[0, 1]``, per-channel normalisation, and the checks that catch
input in other units (images normalised already, statistics in 0-255 units)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from lightning_efficient.functional.augment.validation import check_images

__all__ = ["UNIT_RANGE_TOLERANCE", "check_normalization_stats", "normalize", "to_float", "unit_range_problem"]

#: How far outside ``[0, 1]`` float images may reach before :func:`unit_range_problem` reports them (rounding
#: and resampling overshoot stay far below it; normalised images and 0-255 floats are far beyond it).
UNIT_RANGE_TOLERANCE = 0.01


def to_float(images: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Convert a batch to floating point in ``[0, 1]``.

    Args:
        images: ``[B, C, H, W]``; ``uint8`` (``0..255``) is divided by 255, floating input is returned as is
            (cast to ``dtype``; assumed to be in ``[0, 1]`` already).
        dtype: floating output dtype.

    Returns:
        ``[B, C, H, W]`` tensor of ``dtype``, same device.

    Raises:
        TypeError: ``images`` is neither ``uint8`` nor floating point (e.g. ``int64``), or ``dtype`` not floating.
        ValueError: ``images`` is not 4-D.
    """
    check_images(images)
    if not dtype.is_floating_point:
        raise TypeError(f"`dtype` must be a floating dtype, got {dtype}.")
    if images.dtype == torch.uint8:
        return images.to(dtype).div_(255.0)
    if images.is_floating_point():
        return images.to(dtype)
    raise TypeError(
        f"Images must be uint8 (0..255) or floating point (0..1), got {images.dtype}; convert them with "
        "`images.to(torch.uint8)` or `images.float() / max_value` first."
    )


def check_normalization_stats(mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor) -> None:
    """Check that ``mean``/``std`` are per-channel statistics of images in ``[0, 1]`` (checked on the host).

    Statistics of ``[0, 1]`` images lie in ``[0, 1]`` (a standard deviation even in ``[0, 0.5]``); ImageNet's
    ``(123.675, 116.28, 103.53)`` / ``(58.395, 57.12, 57.375)`` are the same statistics in 0-255 units and would
    shift ``[0, 1]`` images by about -2 and shrink them about 58-fold.

    Raises:
        ValueError: a ``std`` value not positive; a ``mean`` value outside ``[0, 1]`` or a ``std`` value above 1
            (the message gives the values divided by 255 as the fix).
    """
    m = torch.as_tensor(mean, dtype=torch.float64, device="cpu").flatten()
    s = torch.as_tensor(std, dtype=torch.float64, device="cpu").flatten()
    if bool((s <= 0).any()):
        raise ValueError(f"`std` values must be positive, got {s.tolist()}.")
    if bool((m < 0).any() or (m > 1).any() or (s > 1).any()):
        scaled = lambda t: tuple(round(v / 255.0, 4) for v in t.tolist())  # noqa: E731
        raise ValueError(
            f"`mean`={tuple(m.tolist())} / `std`={tuple(s.tolist())} are not statistics of images in [0, 1] (a mean "
            "lies in [0, 1], a std in [0, 0.5]); they look like 0-255 units. Images are normalised in [0, 1] units "
            f"(uint8 is divided by 255 first). Fix: divide them by 255: mean={scaled(m)}, std={scaled(s)} "
            "(ImageNet: IMAGENET_MEAN, IMAGENET_STD)."
        )


def unit_range_problem(images: Tensor, tolerance: float = UNIT_RANGE_TOLERANCE) -> Optional[str]:
    """What is wrong with the value range of a batch that should be ``uint8`` or float in ``[0, 1]``, or ``None``.

    ``uint8`` and empty batches are never a problem and cost nothing. For a floating batch the minimum and maximum
    are read back to the host: **one device synchronisation**, so call it on a first batch only.

    Args:
        images: ``[B, C, H, W]`` (any dtype).
        tolerance: how far outside ``[0, 1]`` values may reach (default :data:`UNIT_RANGE_TOLERANCE`).

    Returns:
        ``None`` when every value lies in ``[-tolerance, 1 + tolerance]``; otherwise a short description such as
        ``"torch.float32 values in [-2.118, 2.64]"`` (NaN included).
    """
    if not images.is_floating_point() or images.numel() == 0:
        return None
    lo, hi = torch.stack([images.detach().amin(), images.detach().amax()]).tolist()
    if lo >= -tolerance and hi <= 1.0 + tolerance:  # False for NaN too
        return None
    return f"{images.dtype} values in [{lo:.4g}, {hi:.4g}]"


def _channel_stats(values: Sequence[float] | Tensor, channels: int, name: str) -> Tensor:
    """Validated per-channel statistics as a float64 CPU tensor (checked on the host: no device sync)."""
    t = torch.as_tensor(values, dtype=torch.float64, device="cpu").flatten()
    if t.numel() not in (1, channels):
        raise ValueError(
            f"`{name}` has {t.numel()} values but the images have {channels} channels; give one value "
            "per channel (or a single value)."
        )
    return t.view(1, -1, 1, 1)


def normalize(images: Tensor, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor) -> Tensor:
    """``(images - mean) / std`` per channel, with ``mean``/``std`` in ``[0, 1]`` units (e.g. ImageNet's
    ``(0.485, 0.456, 0.406)``, ``(0.229, 0.224, 0.225)``).

    Args:
        images: floating ``[B, C, H, W]``.
        mean: ``C`` values (or one, broadcast), each in ``[0, 1]``.
        std: ``C`` positive values (or one), each at most 1.

    Returns:
        New ``[B, C, H, W]`` tensor of the same dtype and device.

    Raises:
        TypeError: ``images`` not floating point.
        ValueError: wrong number of values, a non-positive ``std``, or statistics in 0-255 units
            (:func:`check_normalization_stats`).
    """
    check_images(images)
    if not images.is_floating_point():
        raise TypeError(f"normalize() needs floating images, got {images.dtype}; call to_float() first.")
    c = images.shape[1]
    m = _channel_stats(mean, c, "mean")
    s = _channel_stats(std, c, "std")
    check_normalization_stats(m, s)
    m = m.to(device=images.device, dtype=images.dtype, non_blocking=True)
    s = s.to(device=images.device, dtype=images.dtype, non_blocking=True)
    return (images - m) / s
