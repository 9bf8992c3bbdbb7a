"""Augmented batches as one image, for notebooks and loggers."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor

from lightning_efficient.functional.augment.convert import to_float
from lightning_efficient.functional.augment.factory import Augmentation, build_augmentation

__all__ = ["preview"]


def preview(
    images: Tensor,
    augmentation: Union[str, Augmentation] = "trivial_augment",
    *,
    nrow: int = 8,
    padding: int = 2,
    generator: Optional[torch.Generator] = None,
    **kwargs: Any,
) -> Tensor:
    """Augment a batch and tile it into one image, for notebooks and loggers.

    Args:
        images: ``[B, C, H, W]``, ``uint8`` or float in ``[0, 1]`` (not normalised), ``C`` in ``{1, 3}``.
        augmentation: a preset name (e.g. ``"trivial_augment"``) or a callable, as in
            :func:`build_augmentation`.
        nrow: images per row of the grid.
        padding: pixels between tiles (:func:`torchvision.utils.make_grid`).
        generator: random generator for presets.
        **kwargs: the preset's options, as in :func:`build_augmentation`.

    Returns:
        ``uint8 [3, H_grid, W_grid]`` tensor on the CPU (grayscale tiled as RGB), e.g. for
        ``torchvision.transforms.v2.functional.to_pil_image`` or TensorBoard's ``add_image``.

    Raises:
        As :func:`build_augmentation` and :func:`to_float`, and the augmentation's own errors.
    """
    from torchvision.utils import make_grid

    fn = build_augmentation(augmentation, **kwargs)
    with torch.no_grad():
        out = fn(to_float(images), None, generator)
    grid = make_grid(out.float().clamp(0, 1).cpu(), nrow=nrow, padding=padding)
    return (grid * 255.0).round_().to(torch.uint8)
