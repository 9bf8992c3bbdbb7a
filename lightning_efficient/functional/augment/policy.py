"""Applying policy parameters (TrivialAugment, RandAugment) to a batch, each sample with its own operations.

For each operation column: all samples that drew a geometric operation are warped by one
:func:`~lightning_efficient.functional.augment.warp.warp_images` call; each colour operation runs on the subset
of the batch that drew it.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor

from lightning_efficient.functional.augment.colour import apply_colour_op
from lightning_efficient.functional.augment.params import GEOMETRIC_OPS, OP_INDEX, OPS, PolicyParams
from lightning_efficient.functional.augment.validation import check_interpolation
from lightning_efficient.functional.augment.warp import (
    policy_matrices,
    prepare_images_and_masks,
    warp_images,
    warp_masks,
)

__all__ = ["apply_policy", "apply_trivial_augment"]

# OPS order: Identity, then the geometric operations, then the colour operations (contiguous on purpose)
_GEO_LO = OP_INDEX[GEOMETRIC_OPS[0]]
_GEO_HI = OP_INDEX[GEOMETRIC_OPS[-1]] + 1


def apply_policy(
    images: Tensor,
    params: PolicyParams,
    *,
    masks: Optional[Tensor] = None,
    interpolation: str = "nearest",
    fill: float = 0.0,
    mask_fill: float = 0.0,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """Apply per-sample operations (TrivialAugment/RandAugment parameters) to a batch.

    For each operation column ``n`` of ``params``: all samples that drew a geometric operation are warped by
    one :func:`kornia.geometry.transform.warp_affine` call; each colour operation runs on the samples that drew it.

    Args:
        images: ``[B, C, H, W]``, float in ``[0, 1]`` or ``uint8`` (converted to float32). Colour operations
            assume RGB (``C == 3``) or grayscale (``C == 1``).
        params: from :func:`sample_trivial_augment` or :func:`sample_rand_augment`, ``B`` rows.
        masks: optional ``[B, H, W]`` or ``[B, K, H, W]`` label masks of any dtype; they get the same geometric
            transform with nearest interpolation and keep dtype, shape and label values.
        interpolation: ``"nearest"`` (torchvision's default for these policies) or ``"bilinear"``.
        fill: value in ``[0, 1]`` for image pixels outside the source (torchvision default 0).
        mask_fill: label for mask pixels outside the source (e.g. an ignore index such as 255).

    Returns:
        ``[B, C, H, W]`` images in ``[0, 1]``, same floating dtype (float32 for ``uint8`` input); with
        ``masks``, the tuple ``(images, masks)``. Pixel positions do not depend on the dtype (warps run in
        float32); colour operations run in float32 for bfloat16 / float16 images and in the images' dtype for
        float32 / float64, so each operation gives a half-precision batch float32's result rounded once.

    Raises:
        TypeError / ValueError: wrong shapes, dtypes, channel count or interpolation.
    """
    images, masks4, mask_shape = prepare_images_and_masks(images, masks)
    check_interpolation(interpolation)
    b, c, h, w = images.shape
    if c not in (1, 3):
        raise ValueError(f"Operation policies need RGB (3) or grayscale (1) images, got {c} channels.")
    if params.ops.shape[0] != b:
        raise ValueError(f"params are for {params.ops.shape[0]} samples but the batch has {b} images.")
    ops_all = params.ops.to(images.device)
    mags_all = params.magnitudes.to(images.device)
    out = images
    for n in range(ops_all.shape[1]):
        ops, mags = ops_all[:, n], mags_all[:, n]
        # One host sync per column: sort samples by op, counts give contiguous slices of the sorted order.
        order = torch.argsort(ops, stable=True)
        counts = torch.bincount(ops, minlength=len(OPS)).tolist()
        starts = [0]
        for k in counts:
            starts.append(starts[-1] + k)
        out = out.clone()
        geo_lo, geo_hi = starts[_GEO_LO], starts[_GEO_HI]
        if geo_hi > geo_lo:
            idx = order[geo_lo:geo_hi]
            matrix = policy_matrices(ops[idx], mags[idx], h, w)
            out[idx] = warp_images(out[idx], matrix, (h, w), interpolation, fill)
            if masks4 is not None:
                masks4 = masks4.clone()
                masks4[idx] = warp_masks(masks4[idx], matrix, (h, w), mask_fill)
        for k in range(_GEO_HI, len(OPS)):
            if counts[k] == 0:
                continue
            idx = order[starts[k] : starts[k + 1]]
            out[idx] = apply_colour_op(OPS[k], out[idx], mags[idx])
    if masks4 is None or mask_shape is None:
        return out
    return out, masks4.reshape(mask_shape)


def apply_trivial_augment(images: Tensor, params: PolicyParams, **kwargs: Any) -> Union[Tensor, tuple]:
    """Apply TrivialAugment parameters from :func:`sample_trivial_augment`; see :func:`apply_policy` (same
    arguments, shapes, dtypes and errors)."""
    return apply_policy(images, params, **kwargs)
