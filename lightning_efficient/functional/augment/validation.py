"""Argument checks shared by the samplers and kernels of :mod:`lightning_efficient.functional.augment`.

Each check returns its (possibly normalised) argument or raises with a message that names the argument and the
fix, so every public function reports bad input the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor

__all__ = [
    "INTERPOLATIONS",
    "check_images",
    "check_interpolation",
    "check_positive_int",
    "check_probability",
    "output_size",
    "parameter_device",
]

#: Interpolation modes of the warps (names of :func:`kornia.geometry.transform.warp_affine`'s ``mode``).
INTERPOLATIONS: tuple[str, ...] = ("nearest", "bilinear")


def check_images(images: Any, name: str = "images") -> Tensor:
    """``images`` itself if it is a batch tensor ``[B, C, H, W]`` (any dtype, any device).

    Raises:
        TypeError: not a :class:`torch.Tensor`.
        ValueError: not 4-D (the message suggests ``unsqueeze(0)`` for a single image).
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor of shape [B, C, H, W], got {type(images).__name__}.")
    if images.ndim != 4:
        raise ValueError(
            f"`{name}` must have shape [B, C, H, W] (a batch of images), got shape {tuple(images.shape)}; "
            "add a batch dimension with `images.unsqueeze(0)` for a single image."
        )
    return images


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` if it is an ``int`` (not ``bool``) ``>= minimum``.

    Raises:
        ValueError: otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return value


def check_probability(value: float, name: str) -> float:
    """``value`` if it lies in ``[0, 1]``.

    Raises:
        ValueError: otherwise.
    """
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must be a probability in [0, 1], got {value}.")
    return value


def check_interpolation(interpolation: str) -> str:
    """``interpolation`` if it is one of :data:`INTERPOLATIONS`.

    Raises:
        ValueError: otherwise.
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"`interpolation` must be one of {INTERPOLATIONS}, got {interpolation!r}.")
    return interpolation


def output_size(size: Optional[Union[int, Sequence[int]]], height: int, width: int) -> tuple[int, int]:
    """Output ``(height, width)`` in pixels: ``(height, width)`` for ``None``, ``(size, size)`` for an int.

    Raises:
        ValueError: ``size`` is not a positive int or a pair of positive ints.
    """
    if size is None:
        return height, width
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if isinstance(size, bool) or len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
        raise ValueError(f"`size` must be a positive int or (height, width), got {size!r}.")
    return pair[0], pair[1]


def parameter_device(generator: Optional[torch.Generator], device: Any) -> torch.device:
    """Where random parameters are drawn: ``device`` if given, else the generator's device, else the CPU."""
    if device is not None:
        return torch.device(device)
    if generator is not None:
        return generator.device
    return torch.device("cpu")
