"""Colour operations of the policies, with a per-sample magnitude: the kernels behind :func:`apply_policy`.

Semantics follow ``torchvision.transforms.v2.functional`` (``adjust_brightness``, ``adjust_saturation``,
``adjust_contrast``, ``adjust_sharpness``, ``posterize``, ``solarize``; ``autocontrast`` and ``equalize`` call it
directly), vectorised over a batch whose samples each have their own factor.

bfloat16 / float16 images are computed in :data:`COLOUR_DTYPE` (float32) and rounded back once. In 8 or 11
significant bits, the roundings of every step of a blend, a Solarize threshold rounded to the images' dtype and the
0-255 scaling of Posterize and Equalize give other images than float32 (Equalize's ``x * 255.999`` becomes 256 for
white pixels, which wrap to black in ``uint8``). float32 and float64 images are computed in their own dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.transforms.v2 import functional as TF

from lightning_efficient.functional.augment.params import OPS

__all__ = ["COLOUR_DTYPE", "COLOUR_OPS", "apply_colour_op"]

#: The colour operations (indices 6.. of :data:`OPS`).
COLOUR_OPS: tuple[str, ...] = OPS[6:]
#: The dtype the colour operations compute in for floating images narrower than it (bfloat16, float16).
COLOUR_DTYPE = torch.float32


def _grayscale(images: Tensor) -> Tensor:
    """ITU-R 601-2 luma (torchvision ``rgb_to_grayscale``), ``[B, 1, H, W]``; 1-channel input returned as is."""
    if images.shape[1] == 1:
        return images
    r, g, b = images.unbind(1)
    return (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(1)


def _blend(img: Tensor, degenerate: Tensor, factor: Tensor) -> Tensor:
    """torchvision ``_blend``: ``clamp(factor * img + (1 - factor) * degenerate, 0, 1)`` with per-sample factor."""
    f = factor.view(-1, 1, 1, 1).to(img.dtype)
    return (f * img + (1.0 - f) * degenerate).clamp_(0.0, 1.0)


def _sharpness(img: Tensor, factor: Tensor) -> Tensor:
    """torchvision ``adjust_sharpness`` with per-sample factor (3x3 smoothing kernel, borders kept)."""
    _, c, h, w = img.shape
    if h <= 2 or w <= 2:
        return img
    a, b = 1.0 / 13.0, 5.0 / 13.0
    kernel = torch.tensor([[a, a, a], [a, b, a], [a, a, a]], dtype=img.dtype, device=img.device)
    degenerate = img.clone()
    degenerate[..., 1:-1, 1:-1] = torch.nn.functional.conv2d(img, kernel.expand(c, 1, 3, 3), groups=c)
    return _blend(img, degenerate, factor)


def _posterize(img: Tensor, bits: Tensor) -> Tensor:
    """Keep the ``bits`` most significant bits of each 8-bit value (torchvision/PIL ``posterize`` on uint8),
    per sample; float images are quantised to 1/255 steps first (exact for images that came from uint8)."""
    q = (img * 255.0).round_().to(torch.int32)
    mask = (0xFF << (8 - bits.to(torch.int32).clamp(0, 8))) & 0xFF
    return (q & mask.view(-1, 1, 1, 1)).to(img.dtype).div_(255.0)


def apply_colour_op(name: str, images: Tensor, magnitudes: Tensor) -> Tensor:
    """Apply the colour operation ``name`` to every image of a batch, each with its own magnitude.

    Args:
        name: one of :data:`COLOUR_OPS`.
        images: floating ``[B, C, H, W]`` in ``[0, 1]``, ``C`` in ``{1, 3}`` (RGB or grayscale).
        magnitudes: ``[B]`` magnitudes in the units of :class:`PolicyParams` (``factor - 1`` for
            Brightness/Color/Contrast/Sharpness, bits kept for Posterize, threshold in ``[0, 1]`` for Solarize;
            ignored by AutoContrast/Equalize).

    Returns:
        ``[B, C, H, W]`` images in ``[0, 1]``, same dtype and device. bfloat16 / float16 images are computed in
        :data:`COLOUR_DTYPE` and rounded back once: ``apply_colour_op(name, x.float(), m).to(x.dtype)``.

    Raises:
        ValueError: ``name`` is not a colour operation.
    """
    if name not in COLOUR_OPS:
        raise ValueError(f"{name!r} is not a colour operation; choose one of {COLOUR_OPS}.")
    if images.is_floating_point() and torch.finfo(images.dtype).bits < torch.finfo(COLOUR_DTYPE).bits:
        return _colour_op(name, images.to(COLOUR_DTYPE), magnitudes).to(images.dtype)
    return _colour_op(name, images, magnitudes)


def _colour_op(name: str, img: Tensor, mag: Tensor) -> Tensor:
    """:func:`apply_colour_op` in ``img``'s dtype (``[B, C, H, W]`` images, ``[B]`` magnitudes)."""
    if name == "Brightness":
        return _blend(img, torch.zeros((), dtype=img.dtype, device=img.device), 1.0 + mag)
    if name == "Color":
        if img.shape[1] == 1:  # torchvision: saturation of a grayscale image is a no-op
            return img
        return _blend(img, _grayscale(img), 1.0 + mag)
    if name == "Contrast":
        mean = _grayscale(img).mean(dim=(-3, -2, -1), keepdim=True)
        return _blend(img, mean, 1.0 + mag)
    if name == "Sharpness":
        return _sharpness(img, 1.0 + mag)
    if name == "Posterize":
        return _posterize(img, mag)
    if name == "Solarize":
        # torchvision v2: threshold = bound * magnitude, invert where img >= threshold
        t = mag.view(-1, 1, 1, 1).to(img.dtype)
        return torch.where(img >= t, 1.0 - img, img)
    if name == "AutoContrast":
        return TF.autocontrast(img)
    return TF.equalize(img)  # Equalize
