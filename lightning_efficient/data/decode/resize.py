"""Resize a :class:`~lightning_efficient.data.decode.region.DecodedRegion` to the output size in one resample,
with Pillow or with torch's antialiased ``uint8`` kernels; then EXIF orientation and RGB.

Which engine is faster depends on the installed PIL (see :func:`~lightning_efficient.data.decode.resolve_resize`);
the measurements are in ``benchmarks/results/decoding.md`` and ``benchmarks/results/decoding-pillow-simd.md``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

from lightning_efficient.data.decode import region as region_module  # via the module: one place to patch
from lightning_efficient.data.decode.flavour import TORCH_INTERPOLATIONS
from lightning_efficient.data.decode.orientation import orient_chw, orient_pil
from lightning_efficient.data.decode.region import Box, DecodedRegion

__all__ = ["decode_crop_resize", "integer_box", "resize_region_pil", "resize_region_uint8"]


def integer_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """Round a fractional ``(left, top, right, bottom)`` box to whole pixels inside a ``width`` x ``height`` image.

    Each edge is rounded to the nearest pixel (so an edge moves by at most 0.5 pixel), then clamped to the image;
    the result is at least 1x1.
    """
    left = min(max(int(round(box[0])), 0), width - 1)
    top = min(max(int(round(box[1])), 0), height - 1)
    right = min(max(int(round(box[2])), left + 1), width)
    bottom = min(max(int(round(box[3])), top + 1), height)
    return left, top, right, bottom


def resize_region_pil(region: DecodedRegion, resample: Image.Resampling = Image.Resampling.BILINEAR) -> Image.Image:
    """One Pillow ``Image.resize(out_size, box=...)`` of the region, then EXIF transpose and L -> RGB.

    The fractional box is honoured exactly (Pillow resamples from a float box). With Pillow-SIMD installed this is
    its SIMD resize.

    Returns:
        An RGB ``PIL.Image`` of size ``(w, h)``, oriented as the viewer sees it.
    """
    out = orient_pil(region.image.resize(region.out_size, resample, box=region.box), region.orientation)
    if out.mode != "RGB":
        out = out.convert("RGB")
    return out


def resize_region_uint8(region: DecodedRegion, interpolation: str = "bilinear") -> torch.Tensor:
    """Crop and resize the region with torch's antialiased ``uint8`` kernels -> contiguous ``uint8 [3, H, W]``.

    The box is rounded to whole decoded pixels (:func:`integer_box`; a RandomResizedCrop box without DCT scaling
    is already whole), cropped in Pillow (a row copy), and resized by ``torch.nn.functional.interpolate(...,
    antialias=True)`` on the ``uint8`` NHWC view, which runs PyTorch's vectorised ``uint8`` path (the kernels that
    torchvision's tensor ``Resize`` uses; no float conversion). Then EXIF orientation (``orient_chw``) and one
    copy to CHW. L images are resized as one channel and repeated to RGB.

    Args:
        region: from ``decode_region``.
        interpolation: ``"bilinear"`` or ``"bicubic"`` (both antialiased, as torchvision's tensor ``Resize``).

    Returns:
        ``uint8 [3, H, W]``, contiguous, oriented as the viewer sees it.

    Raises:
        ValueError: an interpolation torch has no antialiased kernel for (use :func:`resize_region_pil`).
    """
    if interpolation not in TORCH_INTERPOLATIONS:
        raise ValueError(
            f"resize_region_uint8 supports interpolation in {TORCH_INTERPOLATIONS}, got {interpolation!r}; use "
            "resize_region_pil (FastImageFolder(resize='pil')) for the other Pillow filters."
        )
    img = region.image
    crop = img.crop(integer_box(region.box, *img.size))
    hwc = np.array(crop)  # writable copy of the crop only (np.asarray would give a read-only view)
    if hwc.ndim == 2:
        hwc = hwc[:, :, None]
    x = torch.from_numpy(hwc).permute(2, 0, 1).unsqueeze(0)  # [1, C, h, w] with NHWC strides
    out_w, out_h = region.out_size
    if x.shape[-2:] == (out_h, out_w):
        y = x
    else:
        y = torch.nn.functional.interpolate(
            x, size=(out_h, out_w), mode=interpolation, antialias=True, align_corners=False
        )
    chw = orient_chw(y[0], region.orientation)
    if chw.shape[0] == 1:
        chw = chw.expand(3, -1, -1)
    # the one copy to contiguous CHW by NumPy on the calling thread (see pil_to_uint8_chw)
    return torch.from_numpy(np.ascontiguousarray(chw.numpy()))


def decode_crop_resize(
    path: str,
    size: tuple[int, int],
    choose_box: Callable[[int, int], Box],
    resample: Image.Resampling = Image.Resampling.BILINEAR,
    draft: bool = True,
    draft_gap: float = 1.0,
) -> Image.Image:
    """``decode_region`` then :func:`resize_region_pil`: file -> RGB ``PIL.Image`` of ``size``, one resample.

    Args:
        path: image file.
        size: output ``(h, w)`` in pixels.
        choose_box: ``(width, height) -> (left, top, right, bottom)`` in oriented pixels.
        resample: Pillow resampling filter.
        draft: use JPEG DCT scaling (no effect on other formats).
        draft_gap: see ``jpeg_draft_scale``.

    Returns:
        An RGB ``PIL.Image`` of size ``(w, h)``, oriented as the viewer sees it.

    Raises:
        OSError, ValueError, SyntaxError, ...: whatever Pillow raises for unreadable files.
    """
    return resize_region_pil(region_module.decode_region(path, size, choose_box, draft, draft_gap), resample)
