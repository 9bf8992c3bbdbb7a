"""Geometric warps: per-sample ``2 x 3`` affine matrices, and warping images and label masks with them.

All matrices map **source to destination** in pixel-index coordinates (the centre of pixel ``(x, y)`` is at
``(x, y)``), the convention of :func:`kornia.geometry.transform.warp_affine` with ``align_corners=True``. A
whole batch is warped by **one** ``warp_affine`` call, whatever the per-sample matrices.

Geometry does not depend on the images' dtype: matrices are float32, and every warp builds its sampling grid
and samples in :data:`WARP_DTYPE` (float32) whatever the images' floating dtype, then casts the result back.
bfloat16 / float16 images are upcast exactly. A half-precision matrix or grid (8 or 11 significant bits) would
move sampling points by a sizeable fraction of a pixel, so the same draws would put some pixels elsewhere than
for float32, and the masks (warped in float32) would no longer line up with their images.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from kornia.geometry.transform import warp_affine
from torch import Tensor

from lightning_efficient.functional.augment.convert import to_float
from lightning_efficient.functional.augment.params import OP_INDEX, AffineParams
from lightning_efficient.functional.augment.validation import check_images, check_interpolation

#: The dtype of every matrix, sampling grid and warp, whatever the images' dtype (so the same draws move the
#: same pixels for float32, float64, bfloat16 and float16 images, and masks stay aligned with them).
WARP_DTYPE = torch.float32

__all__ = [
    "WARP_DTYPE",
    "apply_affine",
    "crop_matrix",
    "flip_matrix",
    "policy_matrices",
    "prepare_images_and_masks",
    "warp_images",
    "warp_masks",
]


def policy_matrices(ops: Tensor, magnitudes: Tensor, height: int, width: int) -> Tensor:
    """Matrices of the geometric policy operations, matching torchvision's ``F.affine``/``F.rotate`` calls in
    ``TrivialAugmentWide._apply_image_or_video_transform`` (identity for non-geometric operations).

    ShearX/ShearY shear about the image's top-left corner (torchvision ``center=[0, 0]``, i.e. pixel coordinate
    ``-0.5``); Rotate turns counter-clockwise about the centre ``((W-1)/2, (H-1)/2)``; translations are truncated
    to whole pixels (torchvision ``int(magnitude)``).

    Args:
        ops: ``int64 [B]`` indices into :data:`OPS`.
        magnitudes: ``[B]`` magnitudes in the units of :class:`PolicyParams`.
        height, width: image size in pixels.

    Returns:
        ``float32 [B, 2, 3]`` on ``ops``' device.
    """
    b = ops.shape[0]
    m = magnitudes.to(WARP_DTYPE)
    mat = torch.zeros(b, 2, 3, device=ops.device, dtype=WARP_DTYPE)
    mat[:, 0, 0] = 1.0
    mat[:, 1, 1] = 1.0
    # ShearX: x' = x - s (y + 0.5)    (PIL/AutoAugment inverse map x = x' + s y')
    sx = torch.where(ops == OP_INDEX["ShearX"], m, 0.0)
    mat[:, 0, 1] -= sx
    mat[:, 0, 2] -= 0.5 * sx
    sy = torch.where(ops == OP_INDEX["ShearY"], m, 0.0)
    mat[:, 1, 0] -= sy
    mat[:, 1, 2] -= 0.5 * sy
    mat[:, 0, 2] += torch.where(ops == OP_INDEX["TranslateX"], torch.trunc(m), 0.0)
    mat[:, 1, 2] += torch.where(ops == OP_INDEX["TranslateY"], torch.trunc(m), 0.0)
    rot = ops == OP_INDEX["Rotate"]
    a = torch.deg2rad(torch.where(rot, m, 0.0))
    cos, sin = torch.cos(a), torch.sin(a)
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    # counter-clockwise on screen (y down): x' = cx + cos (x-cx) + sin (y-cy); y' = cy - sin (x-cx) + cos (y-cy)
    r = torch.stack(
        [
            torch.stack([cos, sin, cx - cos * cx - sin * cy], -1),
            torch.stack([-sin, cos, cy + sin * cx - cos * cy], -1),
        ],
        1,
    )
    return torch.where(rot.view(-1, 1, 1), r, mat)


def flip_matrix(matrix: Tensor, flip: Tensor, out_w: int) -> Tensor:
    """Compose a horizontal flip ``x' -> (out_w - 1) - x'`` after ``matrix`` (``[B, 2, 3]``) where ``flip``
    (``bool [B]``) is True; ``out_w`` is the output width in pixels. Returns a new ``[B, 2, 3]`` tensor."""
    flipped = matrix.clone()
    flipped[:, 0, :] = -matrix[:, 0, :]
    flipped[:, 0, 2] += out_w - 1
    return torch.where(flip.view(-1, 1, 1), flipped, matrix)


def crop_matrix(x0: Tensor, y0: Tensor, w_c: Tensor, h_c: Tensor, out_h: int, out_w: int, flip: Tensor) -> Tensor:
    """Matrices that resize the crop boxes (``[B]`` left ``x0``, top ``y0``, width ``w_c``, height ``h_c``, in
    pixels) to ``out_h x out_w`` and flip where ``flip`` (``bool [B]``).

    The box's pixel edges map onto the output's pixel edges (``x0 - 0.5 -> -0.5``,
    ``x0 + w_c - 0.5 -> out_w - 0.5``): area-preserving resize semantics. Returns ``float32 [B, 2, 3]``.
    """
    sx = out_w / w_c.to(WARP_DTYPE)
    sy = out_h / h_c.to(WARP_DTYPE)
    mat = torch.zeros(x0.shape[0], 2, 3, device=x0.device, dtype=WARP_DTYPE)
    mat[:, 0, 0] = sx
    mat[:, 0, 2] = (0.5 - x0) * sx - 0.5
    mat[:, 1, 1] = sy
    mat[:, 1, 2] = (0.5 - y0) * sy - 0.5
    return flip_matrix(mat, flip, out_w)


def prepare_images_and_masks(
    images: Tensor, masks: Optional[Tensor]
) -> tuple[Tensor, Optional[Tensor], Optional[tuple[int, ...]]]:
    """Check a batch and its optional masks before a warp.

    Args:
        images: ``[B, C, H, W]``, ``uint8`` (converted to float32 in ``[0, 1]``) or floating.
        masks: ``None``, ``[B, H, W]`` or ``[B, K, H, W]`` of any dtype, same ``B, H, W`` as ``images``.

    Returns:
        ``(images, masks4, shape)``: floating images, masks as ``[B, K, H, W]`` (``K = 1`` for 3-D masks) and the
        masks' original shape to restore after the warp (``None, None`` without masks).

    Raises:
        TypeError: ``masks`` not a tensor; images neither ``uint8`` nor floating.
        ValueError: wrong shapes.
    """
    images = check_images(images)
    if not images.is_floating_point():
        images = to_float(images)
    if masks is None:
        return images, None, None
    if not isinstance(masks, Tensor):
        raise TypeError(f"`masks` must be a torch.Tensor, got {type(masks).__name__}.")
    shape = tuple(masks.shape)
    if masks.ndim == 3:
        masks = masks.unsqueeze(1)
    if masks.ndim != 4 or masks.shape[0] != images.shape[0] or masks.shape[-2:] != images.shape[-2:]:
        raise ValueError(
            f"`masks` must have shape [B, H, W] or [B, K, H, W] matching images {tuple(images.shape)}, got {shape}."
        )
    return images, masks, shape


def warp_masks(masks: Tensor, matrix: Tensor, size: tuple[int, int], fill: float) -> Tensor:
    """Warp ``[B, K, H, W]`` label masks (any dtype) with nearest interpolation to ``size`` (pixels).

    Computed in :data:`WARP_DTYPE` (float32: exact for labels below ``2**24``), like :func:`warp_images`, so
    masks land where their images' pixels do; then rounded back to the masks' dtype. ``fill`` is the label
    outside the source.
    """
    out = warp_affine(
        masks.to(WARP_DTYPE),
        matrix.to(WARP_DTYPE),
        size,
        mode="nearest",
        padding_mode="fill" if fill != 0 else "zeros",
        align_corners=True,
        fill_value=torch.full((masks.shape[1],), float(fill), device=masks.device) if fill != 0 else None,
    )
    if masks.dtype.is_floating_point:
        return out.to(masks.dtype)
    return out.round_().to(masks.dtype)


def warp_images(images: Tensor, matrix: Tensor, size: tuple[int, int], mode: str, fill: float) -> Tensor:
    """Warp floating ``[B, C, H, W]`` images to ``size`` (pixels) with ``mode`` (one of :data:`INTERPOLATIONS`);
    ``fill`` is the value outside the source.

    The grid is built and the images sampled in :data:`WARP_DTYPE` (float32) for every input dtype, so the
    geometry is the same for all of them; the result is cast back to ``images.dtype`` (float64 values are
    rounded to float32 precision on the way, about ``6e-8`` relative).
    """
    kwargs: dict[str, Any] = {"mode": mode, "align_corners": True}
    if fill != 0:
        kwargs["padding_mode"] = "fill"
        kwargs["fill_value"] = torch.full((images.shape[1],), float(fill), device=images.device, dtype=WARP_DTYPE)
    return warp_affine(images.to(WARP_DTYPE), matrix.to(WARP_DTYPE), size, **kwargs).to(images.dtype)


def apply_affine(
    images: Tensor,
    params: AffineParams,
    *,
    masks: Optional[Tensor] = None,
    interpolation: str = "bilinear",
    fill: float = 0.0,
    mask_fill: float = 0.0,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """Warp a batch with per-sample affine matrices in one :func:`kornia.geometry.transform.warp_affine` call.

    Args:
        images: ``[B, C, H, W]`` float in ``[0, 1]`` or ``uint8`` (converted to float32); any ``C``.
        params: :class:`AffineParams` with ``B`` matrices.
        masks: optional ``[B, H, W]`` / ``[B, K, H, W]`` label masks (nearest interpolation, dtype kept).
        interpolation: ``"bilinear"`` (default) or ``"nearest"``.
        fill, mask_fill: values outside the source for images and masks.

    Returns:
        ``[B, C, *params.size]`` images of the input's floating dtype (float32 for ``uint8``), and masks
        ``[B, (K,) *params.size]`` of their own dtype when given. Pixel positions do not depend on the dtype
        (warps run in :data:`WARP_DTYPE`).

    Raises:
        TypeError / ValueError: wrong shapes or dtypes, unknown interpolation, or ``params`` for another batch
        size.
    """
    images, masks4, mask_shape = prepare_images_and_masks(images, masks)
    check_interpolation(interpolation)
    if params.matrix.shape[0] != images.shape[0]:
        raise ValueError(f"params are for {params.matrix.shape[0]} samples but the batch has {images.shape[0]}.")
    matrix = params.matrix.to(images.device)
    out = warp_images(images, matrix, params.size, interpolation, fill)
    if masks4 is None or mask_shape is None:
        return out
    warped = warp_masks(masks4, matrix, params.size, mask_fill)
    return out, warped.reshape(*mask_shape[:-2], *params.size)
