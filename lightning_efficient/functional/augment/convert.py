"""Conversion of a batch to floating point in ``[0, 1]`` and per-channel normalisation."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_efficient.functional.augment.validation import check_images

__all__ = ["normalize", "to_float"]


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
        mean: ``C`` values (or one, broadcast).
        std: ``C`` positive values (or one).

    Returns:
        New ``[B, C, H, W]`` tensor of the same dtype and device.

    Raises:
        TypeError: ``images`` not floating point.
        ValueError: wrong number of values, or a non-positive ``std``.
    """
    check_images(images)
    if not images.is_floating_point():
        raise TypeError(f"normalize() needs floating images, got {images.dtype}; call to_float() first.")
    c = images.shape[1]
    m = _channel_stats(mean, c, "mean")
    s = _channel_stats(std, c, "std")
    if bool((s <= 0).any()):
        raise ValueError(f"`std` values must be positive, got {s.flatten().tolist()}.")
    m = m.to(device=images.device, dtype=images.dtype, non_blocking=True)
    s = s.to(device=images.device, dtype=images.dtype, non_blocking=True)
    return (images - m) / s
