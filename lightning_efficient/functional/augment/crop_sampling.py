"""Drawing crop-and-flip warps per sample: RandomResizedCrop + flip (ImageNet) and pad-and-crop + flip (CIFAR).

The samplers return :class:`AffineParams`; :func:`apply_affine` applies them to a batch in one warp. The
``RandomResizedCrop`` constants and fallback come from :mod:`lightning_efficient.functional.crop`, the home of
that geometry. Its per-image sampler (``random_resized_crop_window``) is not reused: it loops in Python over
the tries of one image and draws from the global RNG, while the draws here are vectorised over the batch (all
tries of all images at once) and come from ``generator``, on the batch's device.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import torch

from lightning_efficient.functional.augment.params import AffineParams
from lightning_efficient.functional.augment.validation import (
    check_positive_int,
    check_probability,
    output_size,
    parameter_device,
)
from lightning_efficient.functional.augment.warp import WARP_DTYPE, crop_matrix, flip_matrix
from lightning_efficient.functional.crop import RRC_TRIES, random_resized_crop_fallback

__all__ = ["sample_pad_crop_flip", "sample_random_resized_crop_flip"]


def sample_random_resized_crop_flip(
    batch_size: int,
    height: int,
    width: int,
    *,
    size: Optional[Union[int, tuple[int, int]]] = None,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    flip_p: float = 0.5,
    generator: Optional[torch.Generator] = None,
    device: Any = None,
) -> AffineParams:
    """Per-sample RandomResizedCrop + horizontal flip (the standard ImageNet training augmentation).

    Crop boxes follow torchvision's ``RandomResizedCrop.get_params``: area fraction uniform in ``scale``,
    log-aspect-ratio uniform in ``log(ratio)``, :data:`~lightning_efficient.functional.crop.RRC_TRIES` tries per
    image (vectorised), falling back to the central crop clamped to ``ratio``. The crop is then resized to
    ``size`` by the affine warp (no antialiasing, like Kornia's ``RandomResizedCrop``; torchvision antialiases
    when downscaling).

    Args:
        batch_size, height, width: batch size and source image size in pixels.
        size: output ``(height, width)`` or an int for square; default the source size. May exceed the source
            (crops are upsampled).
        scale: range of the crop's area as a fraction of the image area, ``0 < lo <= hi <= 1``.
        ratio: range of width/height aspect ratios, ``0 < lo <= hi``.
        flip_p: probability of a horizontal flip.
        generator, device: see :func:`sample_trivial_augment`.

    Returns:
        :class:`AffineParams` (``float32 [B, 2, 3]`` on ``device``).

    Raises:
        ValueError: on invalid ranges or sizes.
    """
    check_positive_int(batch_size, "batch_size")
    out_h, out_w = output_size(size, height, width)
    if not (0 < scale[0] <= scale[1] <= 1):
        raise ValueError(f"`scale` must satisfy 0 < lo <= hi <= 1, got {scale}.")
    if not (0 < ratio[0] <= ratio[1]):
        raise ValueError(f"`ratio` must satisfy 0 < lo <= hi, got {ratio}.")
    check_probability(flip_p, "flip_p")
    dev = parameter_device(generator, device)
    tries = RRC_TRIES
    area = float(height * width)
    fraction = torch.rand((batch_size, tries), generator=generator, device=dev)
    target = area * (scale[0] + (scale[1] - scale[0]) * fraction)
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    log_r = log_lo + (log_hi - log_lo) * torch.rand((batch_size, tries), generator=generator, device=dev)
    ar = torch.exp(log_r)
    cw = torch.sqrt(target * ar).round()
    ch = torch.sqrt(target / ar).round()
    ok = (cw > 0) & (ch > 0) & (cw <= width) & (ch <= height)
    first = torch.where(ok.any(1), ok.float().argmax(1), torch.full((batch_size,), -1, device=dev))
    fy, fx, fh, fw = random_resized_crop_fallback(width, height, ratio)
    pick = first.clamp(min=0).unsqueeze(1)
    valid = first >= 0
    w_c = torch.where(valid, cw.gather(1, pick).squeeze(1), float(fw))
    h_c = torch.where(valid, ch.gather(1, pick).squeeze(1), float(fh))
    # torchvision: i = randint(0, height - h + 1), j = randint(0, width - w + 1)
    y0 = torch.floor(torch.rand((batch_size,), generator=generator, device=dev) * (height - h_c + 1))
    x0 = torch.floor(torch.rand((batch_size,), generator=generator, device=dev) * (width - w_c + 1))
    y0 = torch.where(valid, y0, float(fy))
    x0 = torch.where(valid, x0, float(fx))
    flip = torch.rand((batch_size,), generator=generator, device=dev) < flip_p
    return AffineParams(matrix=crop_matrix(x0, y0, w_c, h_c, out_h, out_w, flip), size=(out_h, out_w))


def sample_pad_crop_flip(
    batch_size: int,
    height: int,
    width: int,
    *,
    padding: int = 4,
    flip_p: float = 0.5,
    generator: Optional[torch.Generator] = None,
    device: Any = None,
) -> AffineParams:
    """Per-sample zero-pad-and-random-crop + horizontal flip (the standard CIFAR training augmentation).

    Equivalent to ``RandomCrop(size, padding=padding)`` + ``RandomHorizontalFlip(flip_p)``: a whole-pixel shift
    uniform in ``[-padding, padding]`` on each axis with zero fill, then a flip.

    Args:
        batch_size, height, width: batch size and image size in pixels (the output has the same size).
        padding: largest shift in pixels.
        flip_p: probability of a horizontal flip.
        generator, device: see :func:`sample_trivial_augment`.

    Returns:
        :class:`AffineParams` (``float32 [B, 2, 3]`` on ``device``, size ``(height, width)``).

    Raises:
        ValueError: ``batch_size < 1``, negative ``padding`` or ``flip_p`` outside ``[0, 1]``.
    """
    check_positive_int(batch_size, "batch_size")
    check_positive_int(padding, "padding", 0)
    check_probability(flip_p, "flip_p")
    dev = parameter_device(generator, device)
    shift = torch.randint(-padding, padding + 1, (batch_size, 2), generator=generator, device=dev).to(WARP_DTYPE)
    flip = torch.rand((batch_size,), generator=generator, device=dev) < flip_p
    mat = torch.zeros(batch_size, 2, 3, device=dev, dtype=WARP_DTYPE)
    mat[:, 0, 0] = 1.0
    mat[:, 1, 1] = 1.0
    mat[:, :, 2] = shift
    return AffineParams(matrix=flip_matrix(mat, flip, width), size=(height, width))
