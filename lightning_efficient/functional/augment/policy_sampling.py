"""Drawing policy parameters per sample: the TrivialAugmentWide and RandAugment magnitude tables and samplers.

The tables are torchvision's ``_AUGMENTATION_SPACE`` of ``TrivialAugmentWide`` and ``RandAugment``
(``torchvision/transforms/v2/_auto_augment.py``, torchvision 0.29) over :data:`OPS`. Sources: TrivialAugment
(Müller & Hutter, ICCV 2021, arXiv:2103.10158); RandAugment (Cubuk et al., 2020, arXiv:1909.13719).
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_efficient.functional.augment.params import OPS, PolicyParams
from lightning_efficient.functional.augment.validation import check_positive_int, parameter_device

__all__ = ["rand_augment_space", "sample_rand_augment", "sample_trivial_augment", "trivial_augment_space"]


def _space(
    num_bins: int, *, shear: float, translate: tuple[float, float], rotate: float, enhance: float, posterize: int
) -> tuple[Tensor, Tensor]:
    """Magnitude table ``[len(OPS), num_bins]`` and signed flags ``[len(OPS)]`` from the ranges' upper ends."""
    lin = lambda hi: torch.linspace(0.0, hi, num_bins)  # noqa: E731
    zero = torch.zeros(num_bins)
    bits = (8 - (torch.arange(num_bins) / ((num_bins - 1) / posterize))).round().int().float()
    rows = {
        "Identity": (zero, False),
        "ShearX": (lin(shear), True),
        "ShearY": (lin(shear), True),
        "TranslateX": (lin(translate[0]), True),
        "TranslateY": (lin(translate[1]), True),
        "Rotate": (lin(rotate), True),
        "Brightness": (lin(enhance), True),
        "Color": (lin(enhance), True),
        "Contrast": (lin(enhance), True),
        "Sharpness": (lin(enhance), True),
        "Posterize": (bits, False),
        "Solarize": (torch.linspace(1.0, 0.0, num_bins), False),
        "AutoContrast": (zero, False),
        "Equalize": (zero, False),
    }
    table = torch.stack([rows[name][0] for name in OPS])
    signed = torch.tensor([rows[name][1] for name in OPS])
    return table, signed


@functools.lru_cache(maxsize=8)
def trivial_augment_space(num_bins: int) -> tuple[Tensor, Tensor]:
    """TrivialAugmentWide's magnitudes: ``float32 [len(OPS), num_bins]`` (units of :class:`PolicyParams`, before
    the random sign) and ``bool [len(OPS)]`` flags of the operations torchvision signs randomly.

    The result is cached: do not modify it in place.
    """
    return _space(num_bins, shear=0.99, translate=(32.0, 32.0), rotate=135.0, enhance=0.99, posterize=6)


@functools.lru_cache(maxsize=32)
def rand_augment_space(num_bins: int, height: int, width: int) -> tuple[Tensor, Tensor]:
    """RandAugment's magnitudes for ``height x width`` images (translation up to ``150/331`` of the size in
    pixels), as in :func:`trivial_augment_space`. The result is cached: do not modify it in place."""
    translate = (150.0 / 331.0 * width, 150.0 / 331.0 * height)
    return _space(num_bins, shear=0.3, translate=translate, rotate=30.0, enhance=0.9, posterize=4)


def _signs(signed: Tensor, ops: Tensor, generator: Optional[torch.Generator], device: torch.device) -> Tensor:
    # torchvision: `if signed and torch.rand(()) <= 0.5: magnitude *= -1`
    flip = torch.rand(ops.shape, generator=generator, device=device) <= 0.5
    return torch.where(signed.to(device)[ops] & flip, -1.0, 1.0)


def sample_trivial_augment(
    batch_size: int,
    *,
    num_bins: int = 31,
    pixel_scale: float = 1.0,
    generator: Optional[torch.Generator] = None,
    device: Any = None,
) -> PolicyParams:
    """Draw TrivialAugmentWide parameters per sample: one operation uniformly from :data:`OPS` and one of
    ``num_bins`` magnitudes uniformly, negated with probability 1/2 for signed operations (torchvision's rule).

    Args:
        batch_size: ``B >= 1``.
        num_bins: number of magnitude bins (torchvision default 31).
        pixel_scale: factor on the magnitudes given in pixels (the translations, up to 32 px): the images' side
            over the side the ranges are meant for. :class:`~lightning_efficient.ProgressiveResize` passes the
            scheduled side over the final one, so a translation moves the same share of the image at every side
            (as when the images are augmented at full size and then made smaller). Default 1: torchvision's.
        generator: random generator; ``None`` uses the global torch RNG of ``device`` (so results are
            reproducible under ``seed_everything``). Must live on ``device``.
        device: where the parameter tensors are drawn and live; default the generator's device, else CPU.

    Returns:
        :class:`PolicyParams` with ``ops``/``magnitudes`` of shape ``[B, 1]``.

    Raises:
        ValueError: ``batch_size < 1``, ``num_bins < 2`` or ``pixel_scale <= 0``.
    """
    check_positive_int(batch_size, "batch_size")
    check_positive_int(num_bins, "num_bins", 2)
    if not pixel_scale > 0:
        raise ValueError(f"`pixel_scale` must be > 0 (the images' side over the reference side), got {pixel_scale}.")
    dev = parameter_device(generator, device)
    table, signed = trivial_augment_space(num_bins)
    ops = torch.randint(len(OPS), (batch_size, 1), generator=generator, device=dev)
    bins = torch.randint(num_bins, (batch_size, 1), generator=generator, device=dev)
    mags = table.to(dev)[ops, bins] * _signs(signed, ops, generator, dev)
    if pixel_scale != 1.0:
        in_pixels = (ops == OPS.index("TranslateX")) | (ops == OPS.index("TranslateY"))
        mags = torch.where(in_pixels, mags * pixel_scale, mags)
    return PolicyParams(ops=ops, magnitudes=mags)


def sample_rand_augment(
    batch_size: int,
    height: int,
    width: int,
    *,
    num_ops: int = 2,
    magnitude: int = 9,
    num_bins: int = 31,
    generator: Optional[torch.Generator] = None,
    device: Any = None,
) -> PolicyParams:
    """Draw RandAugment parameters per sample: ``num_ops`` operations uniformly from :data:`OPS` (with
    replacement, like torchvision) at the fixed magnitude bin ``magnitude``, signed randomly where torchvision
    signs them.

    Args:
        batch_size: ``B >= 1``.
        height, width: image size in pixels (the translation range is ``150/331`` of it, as in torchvision).
        num_ops: operations per image (torchvision default 2).
        magnitude: magnitude bin index in ``[0, num_bins)`` (torchvision default 9).
        num_bins: number of magnitude bins (default 31).
        generator, device: see :func:`sample_trivial_augment`.

    Returns:
        :class:`PolicyParams` with shape ``[B, num_ops]``.

    Raises:
        ValueError: on out-of-range arguments.
    """
    check_positive_int(batch_size, "batch_size")
    check_positive_int(num_ops, "num_ops", 0)
    check_positive_int(num_bins, "num_bins", 2)
    if isinstance(magnitude, bool) or not isinstance(magnitude, int) or not 0 <= magnitude < num_bins:
        raise ValueError(f"`magnitude` must be an int bin index in [0, {num_bins}), got {magnitude!r}.")
    dev = parameter_device(generator, device)
    table, signed = rand_augment_space(num_bins, height, width)
    ops = torch.randint(len(OPS), (batch_size, num_ops), generator=generator, device=dev)
    mags = table[:, magnitude].to(dev)[ops] * _signs(signed, ops, generator, dev)
    return PolicyParams(ops=ops, magnitudes=mags)
