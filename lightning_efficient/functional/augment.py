"""Per-sample batch augmentation on the device: the functional core of :class:`GPUAugmentation`.

Every function here works on a whole batch ``[B, C, H, W]`` at once and draws its random parameters **per
sample**: each image in a batch gets its own operation and magnitude. This differs from
``torchvision.transforms.v2`` (one parameter set per call on a batched tensor, vision#8484) and from
``kornia.augmentation.auto`` (one operation per batch, only magnitudes per sample).

Following Kornia's design, drawing random parameters is split from applying them:

- ``sample_*`` functions return a small parameter object (tensors on the requested device),
- ``apply_*`` functions apply given parameters deterministically,
- the plain functions (:func:`trivial_augment`, :func:`rand_augment`, :func:`imagenet_augment`,
  :func:`cifar_augment`) do both.

Geometric operations of a batch are applied by **one** :func:`kornia.geometry.transform.warp_affine` call with
per-sample ``2 x 3`` matrices (in pixel-index coordinates, source to destination); colour operations run on the
subset of the batch that drew them, with per-sample factors.

Value conventions: images are floating point in ``[0, 1]`` (``uint8`` input is converted by :func:`to_float`);
outputs stay in ``[0, 1]`` and keep the input's floating dtype. Optional masks (segmentation labels) follow the
geometric part of the transform with nearest interpolation and keep their dtype and label values.

Sources: TrivialAugment (Müller & Hutter, "TrivialAugment: Tuning-free Yet State-of-the-Art Data Augmentation",
ICCV 2021, arXiv:2103.10158) with the operation set and magnitude ranges of torchvision's
``TrivialAugmentWide``; RandAugment (Cubuk et al., 2020, arXiv:1909.13719) with torchvision's ``RandAugment``
ranges; operation semantics follow ``torchvision.transforms.v2.functional`` (equalize and autocontrast call it
directly); warping uses Kornia.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import torch
from kornia.geometry.transform import warp_affine
from torch import Tensor
from torchvision.transforms.v2 import functional as TF

__all__ = [
    "OPS",
    "GEOMETRIC_OPS",
    "PolicyParams",
    "AffineParams",
    "to_float",
    "normalize",
    "sample_trivial_augment",
    "apply_trivial_augment",
    "trivial_augment",
    "sample_rand_augment",
    "apply_rand_augment",
    "rand_augment",
    "apply_policy",
    "sample_random_resized_crop_flip",
    "sample_pad_crop_flip",
    "apply_affine",
    "imagenet_augment",
    "cifar_augment",
    "PRESETS",
    "build_augmentation",
    "preview",
]

#: Operation names, in torchvision's ``TrivialAugmentWide._AUGMENTATION_SPACE`` order. Parameter objects store
#: indices into this tuple.
OPS: tuple[str, ...] = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
)
#: The geometric operations (indices 1..5 of :data:`OPS`, contiguous on purpose).
GEOMETRIC_OPS: tuple[str, ...] = OPS[1:6]
_OP_INDEX = {name: i for i, name in enumerate(OPS)}
_INTERPOLATIONS = ("nearest", "bilinear")

Augmentation = Callable[..., Any]


# --------------------------------------------------------------------------------------------------------------
# Parameter containers
# --------------------------------------------------------------------------------------------------------------
@dataclass
class PolicyParams:
    """Per-sample parameters of an operation policy (TrivialAugment, RandAugment).

    Attributes:
        ops: ``int64 [B, N]``, indices into :data:`OPS`; column ``n`` is the ``n``-th operation applied
            (``N = 1`` for TrivialAugment, ``num_ops`` for RandAugment).
        magnitudes: ``float32 [B, N]``, signed magnitudes in torchvision's units: shear as the shear factor
            (tan of the angle), translation in pixels (truncated to an integer like torchvision), rotation in
            degrees counter-clockwise, Brightness/Color/Contrast/Sharpness as ``factor - 1``, Posterize in bits
            kept, Solarize as threshold in ``[0, 1]``; 0 for operations without magnitude.
    """

    ops: Tensor
    magnitudes: Tensor

    def op_names(self) -> list[list[str]]:
        """Operation names per sample, ``[B][N]`` (for inspection and tests)."""
        return [[OPS[i] for i in row] for row in self.ops.tolist()]


@dataclass
class AffineParams:
    """Per-sample affine warp (crop, resize, flip, translate).

    Attributes:
        matrix: ``float32 [B, 2, 3]`` source-to-destination affine matrices in pixel-index coordinates
            (pixel ``(x, y)`` centre at ``(x, y)``), the convention of
            :func:`kornia.geometry.transform.warp_affine` with ``align_corners=True``.
        size: output ``(height, width)`` in pixels.
    """

    matrix: Tensor
    size: tuple[int, int]


# --------------------------------------------------------------------------------------------------------------
# Conversion and normalisation
# --------------------------------------------------------------------------------------------------------------
def _check_images(images: Any, name: str = "images") -> Tensor:
    if not isinstance(images, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor of shape [B, C, H, W], got {type(images).__name__}.")
    if images.ndim != 4:
        raise ValueError(
            f"`{name}` must have shape [B, C, H, W] (a batch of images), got shape {tuple(images.shape)}; "
            "add a batch dimension with `images.unsqueeze(0)` for a single image."
        )
    return images


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
    """
    _check_images(images)
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
        New ``[B, C, H, W]`` tensor of the same dtype.

    Raises:
        TypeError: ``images`` not floating point.
        ValueError: wrong number of values, or a non-positive ``std``.
    """
    _check_images(images)
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


# --------------------------------------------------------------------------------------------------------------
# Policy sampling (TrivialAugmentWide, RandAugment)
# --------------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _trivial_table(num_bins: int) -> tuple[Tensor, Tensor]:
    """Magnitude table ``[len(OPS), num_bins]`` and signed flags ``[len(OPS)]`` of TrivialAugmentWide.

    Copied from ``torchvision.transforms.v2.TrivialAugmentWide._AUGMENTATION_SPACE`` (torchvision 0.29).
    """
    lin = lambda hi: torch.linspace(0.0, hi, num_bins)  # noqa: E731
    zero = torch.zeros(num_bins)
    posterize = (8 - (torch.arange(num_bins) / ((num_bins - 1) / 6))).round().int().float()
    rows = {
        "Identity": (zero, False),
        "ShearX": (lin(0.99), True),
        "ShearY": (lin(0.99), True),
        "TranslateX": (lin(32.0), True),
        "TranslateY": (lin(32.0), True),
        "Rotate": (lin(135.0), True),
        "Brightness": (lin(0.99), True),
        "Color": (lin(0.99), True),
        "Contrast": (lin(0.99), True),
        "Sharpness": (lin(0.99), True),
        "Posterize": (posterize, False),
        "Solarize": (torch.linspace(1.0, 0.0, num_bins), False),
        "AutoContrast": (zero, False),
        "Equalize": (zero, False),
    }
    table = torch.stack([rows[name][0] for name in OPS])
    signed = torch.tensor([rows[name][1] for name in OPS])
    return table, signed


@functools.lru_cache(maxsize=32)
def _rand_table(num_bins: int, height: int, width: int) -> tuple[Tensor, Tensor]:
    """Magnitude table of torchvision's ``RandAugment._AUGMENTATION_SPACE`` (torchvision 0.29)."""
    lin = lambda hi: torch.linspace(0.0, hi, num_bins)  # noqa: E731
    zero = torch.zeros(num_bins)
    posterize = (8 - (torch.arange(num_bins) / ((num_bins - 1) / 4))).round().int().float()
    rows = {
        "Identity": (zero, False),
        "ShearX": (lin(0.3), True),
        "ShearY": (lin(0.3), True),
        "TranslateX": (lin(150.0 / 331.0 * width), True),
        "TranslateY": (lin(150.0 / 331.0 * height), True),
        "Rotate": (lin(30.0), True),
        "Brightness": (lin(0.9), True),
        "Color": (lin(0.9), True),
        "Contrast": (lin(0.9), True),
        "Sharpness": (lin(0.9), True),
        "Posterize": (posterize, False),
        "Solarize": (torch.linspace(1.0, 0.0, num_bins), False),
        "AutoContrast": (zero, False),
        "Equalize": (zero, False),
    }
    table = torch.stack([rows[name][0] for name in OPS])
    signed = torch.tensor([rows[name][1] for name in OPS])
    return table, signed


def _gen_device(generator: Optional[torch.Generator], device: Any) -> torch.device:
    if device is not None:
        return torch.device(device)
    if generator is not None:
        return generator.device
    return torch.device("cpu")


def _check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return value


def _signs(signed: Tensor, ops: Tensor, generator: Optional[torch.Generator], device: torch.device) -> Tensor:
    # torchvision: `if signed and torch.rand(()) <= 0.5: magnitude *= -1`
    flip = torch.rand(ops.shape, generator=generator, device=device) <= 0.5
    return torch.where(signed.to(device)[ops] & flip, -1.0, 1.0)


def sample_trivial_augment(
    batch_size: int,
    *,
    num_bins: int = 31,
    generator: Optional[torch.Generator] = None,
    device: Any = None,
) -> PolicyParams:
    """Draw TrivialAugmentWide parameters per sample: one operation uniformly from :data:`OPS` and one of
    ``num_bins`` magnitudes uniformly, negated with probability 1/2 for signed operations (torchvision's rule).

    Args:
        batch_size: ``B >= 1``.
        num_bins: number of magnitude bins (torchvision default 31).
        generator: random generator; ``None`` uses the global torch RNG of ``device`` (so results are
            reproducible under ``seed_everything``). Must live on ``device``.
        device: where the parameter tensors are drawn and live; default the generator's device, else CPU.

    Returns:
        :class:`PolicyParams` with ``ops``/``magnitudes`` of shape ``[B, 1]``.

    Raises:
        ValueError: ``batch_size < 1`` or ``num_bins < 2``.
    """
    _check_positive_int(batch_size, "batch_size")
    _check_positive_int(num_bins, "num_bins", 2)
    dev = _gen_device(generator, device)
    table, signed = _trivial_table(num_bins)
    ops = torch.randint(len(OPS), (batch_size, 1), generator=generator, device=dev)
    bins = torch.randint(num_bins, (batch_size, 1), generator=generator, device=dev)
    mags = table.to(dev)[ops, bins] * _signs(signed, ops, generator, dev)
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
    _check_positive_int(batch_size, "batch_size")
    _check_positive_int(num_ops, "num_ops", 0)
    _check_positive_int(num_bins, "num_bins", 2)
    if isinstance(magnitude, bool) or not isinstance(magnitude, int) or not 0 <= magnitude < num_bins:
        raise ValueError(f"`magnitude` must be an int bin index in [0, {num_bins}), got {magnitude!r}.")
    dev = _gen_device(generator, device)
    table, signed = _rand_table(num_bins, height, width)
    ops = torch.randint(len(OPS), (batch_size, num_ops), generator=generator, device=dev)
    mags = table[:, magnitude].to(dev)[ops] * _signs(signed, ops, generator, dev)
    return PolicyParams(ops=ops, magnitudes=mags)


# --------------------------------------------------------------------------------------------------------------
# Policy application
# --------------------------------------------------------------------------------------------------------------
def _geometric_matrices(ops: Tensor, mags: Tensor, height: int, width: int) -> Tensor:
    """Source-to-destination ``[B, 2, 3]`` matrices in pixel-index coordinates, matching torchvision's
    ``F.affine``/``F.rotate`` calls in ``_apply_image_or_video_transform`` (identity for other operations).

    ShearX/ShearY shear about the image's top-left corner (torchvision ``center=[0, 0]``, i.e. pixel coordinate
    ``-0.5``); Rotate turns counter-clockwise about the centre ``((W-1)/2, (H-1)/2)``; translations are truncated
    to whole pixels (torchvision ``int(magnitude)``).
    """
    b = ops.shape[0]
    m = mags.float()
    mat = torch.zeros(b, 2, 3, device=ops.device)
    mat[:, 0, 0] = 1.0
    mat[:, 1, 1] = 1.0
    # ShearX: x' = x - s (y + 0.5)    (PIL/AutoAugment inverse map x = x' + s y')
    sx = torch.where(ops == _OP_INDEX["ShearX"], m, 0.0)
    mat[:, 0, 1] -= sx
    mat[:, 0, 2] -= 0.5 * sx
    sy = torch.where(ops == _OP_INDEX["ShearY"], m, 0.0)
    mat[:, 1, 0] -= sy
    mat[:, 1, 2] -= 0.5 * sy
    mat[:, 0, 2] += torch.where(ops == _OP_INDEX["TranslateX"], torch.trunc(m), 0.0)
    mat[:, 1, 2] += torch.where(ops == _OP_INDEX["TranslateY"], torch.trunc(m), 0.0)
    rot = ops == _OP_INDEX["Rotate"]
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


def _apply_color_op(name: str, img: Tensor, mag: Tensor) -> Tensor:
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
    if name == "Equalize":
        return TF.equalize(img)
    raise AssertionError(name)  # pragma: no cover


def _check_interpolation(interpolation: str) -> str:
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"`interpolation` must be one of {_INTERPOLATIONS}, got {interpolation!r}.")
    return interpolation


def _prepare(images: Tensor, masks: Optional[Tensor]) -> tuple[Tensor, Optional[Tensor], Optional[tuple]]:
    images = _check_images(images)
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


def _warp_masks(masks: Tensor, matrix: Tensor, size: tuple[int, int], fill: float) -> Tensor:
    """Warp masks with nearest interpolation in float32 (exact for labels below 2**24), restore dtype."""
    out = warp_affine(
        masks.to(torch.float32),
        matrix.to(torch.float32),
        size,
        mode="nearest",
        padding_mode="fill" if fill != 0 else "zeros",
        align_corners=True,
        fill_value=torch.full((masks.shape[1],), float(fill), device=masks.device) if fill != 0 else None,
    )
    if masks.dtype.is_floating_point:
        return out.to(masks.dtype)
    return out.round_().to(masks.dtype)


def _warp_images(images: Tensor, matrix: Tensor, size: tuple[int, int], mode: str, fill: float) -> Tensor:
    kwargs: dict[str, Any] = {"mode": mode, "align_corners": True}
    if fill != 0:
        kwargs["padding_mode"] = "fill"
        kwargs["fill_value"] = torch.full((images.shape[1],), float(fill), device=images.device, dtype=images.dtype)
    return warp_affine(images, matrix.to(images.dtype), size, **kwargs)


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
        ``masks``, the tuple ``(images, masks)``.

    Raises:
        TypeError / ValueError: wrong shapes, dtypes, channel count or interpolation.
    """
    images, masks4, mask_shape = _prepare(images, masks)
    _check_interpolation(interpolation)
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
        geo_lo, geo_hi = starts[1], starts[6]  # ops 1..5 are geometric
        if geo_hi > geo_lo:
            idx = order[geo_lo:geo_hi]
            matrix = _geometric_matrices(ops[idx], mags[idx], h, w)
            out[idx] = _warp_images(out[idx], matrix, (h, w), interpolation, fill)
            if masks4 is not None:
                masks4 = masks4.clone()
                masks4[idx] = _warp_masks(masks4[idx], matrix, (h, w), mask_fill)
        for k in range(6, len(OPS)):
            if counts[k] == 0:
                continue
            idx = order[starts[k] : starts[k + 1]]
            out[idx] = _apply_color_op(OPS[k], out[idx], mags[idx])
    if masks4 is None:
        return out
    return out, masks4.reshape(mask_shape)


def apply_trivial_augment(images: Tensor, params: PolicyParams, **kwargs: Any) -> Union[Tensor, tuple]:
    """Apply TrivialAugment parameters from :func:`sample_trivial_augment`; see :func:`apply_policy`."""
    return apply_policy(images, params, **kwargs)


def apply_rand_augment(images: Tensor, params: PolicyParams, **kwargs: Any) -> Union[Tensor, tuple]:
    """Apply RandAugment parameters from :func:`sample_rand_augment`; see :func:`apply_policy`."""
    return apply_policy(images, params, **kwargs)


def trivial_augment(
    images: Tensor,
    *,
    masks: Optional[Tensor] = None,
    num_bins: int = 31,
    interpolation: str = "nearest",
    fill: float = 0.0,
    mask_fill: float = 0.0,
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """TrivialAugmentWide per sample (Müller & Hutter 2021; torchvision ``TrivialAugmentWide`` ranges).

    Each image gets one operation from :data:`OPS` and one magnitude, drawn independently per image, on the
    images' device. Shapes, dtypes and errors as in :func:`apply_policy`.

    Example::

        >>> x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
        >>> y = trivial_augment(x)
        >>> y.shape, y.dtype
        (torch.Size([8, 3, 32, 32]), torch.float32)
    """
    images = _check_images(images)
    params = sample_trivial_augment(images.shape[0], num_bins=num_bins, generator=generator, device=images.device)
    return apply_policy(images, params, masks=masks, interpolation=interpolation, fill=fill, mask_fill=mask_fill)


def rand_augment(
    images: Tensor,
    *,
    masks: Optional[Tensor] = None,
    num_ops: int = 2,
    magnitude: int = 9,
    num_bins: int = 31,
    interpolation: str = "nearest",
    fill: float = 0.0,
    mask_fill: float = 0.0,
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """RandAugment per sample (Cubuk et al. 2020; torchvision ``RandAugment`` ranges and defaults ``num_ops=2,
    magnitude=9, num_bins=31``). Shapes, dtypes and errors as in :func:`apply_policy`."""
    images = _check_images(images)
    b, _, h, w = images.shape
    params = sample_rand_augment(
        b, h, w, num_ops=num_ops, magnitude=magnitude, num_bins=num_bins, generator=generator, device=images.device
    )
    return apply_policy(images, params, masks=masks, interpolation=interpolation, fill=fill, mask_fill=mask_fill)


# --------------------------------------------------------------------------------------------------------------
# Crop / flip presets (one affine warp per batch)
# --------------------------------------------------------------------------------------------------------------
def _rand(shape: tuple, generator: Optional[torch.Generator], device: torch.device) -> Tensor:
    return torch.rand(shape, generator=generator, device=device)


def _flip_matrix(mat: Tensor, flip: Tensor, out_w: int) -> Tensor:
    """Compose a horizontal flip ``x' -> (out_w - 1) - x'`` after ``mat`` where ``flip`` is True."""
    flipped = mat.clone()
    flipped[:, 0, :] = -mat[:, 0, :]
    flipped[:, 0, 2] += out_w - 1
    return torch.where(flip.view(-1, 1, 1), flipped, mat)


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
    log-aspect-ratio uniform in ``log(ratio)``, 10 tries per image (vectorised), falling back to the central crop
    clamped to ``ratio``. The crop is then resized to ``size`` by the affine warp (no antialiasing, like
    Kornia's ``RandomResizedCrop``; torchvision antialiases when downscaling).

    Args:
        batch_size, height, width: batch size and source image size in pixels.
        size: output ``(height, width)`` or an int for square; default the source size. May exceed the source
            (crops are upsampled).
        scale: range of the crop's area as a fraction of the image area, ``0 < lo <= hi <= 1``.
        ratio: range of width/height aspect ratios, ``0 < lo <= hi``.
        flip_p: probability of a horizontal flip.
        generator, device: see :func:`sample_trivial_augment`.

    Returns:
        :class:`AffineParams`.

    Raises:
        ValueError: on invalid ranges or sizes.
    """
    _check_positive_int(batch_size, "batch_size")
    out_h, out_w = _size(size, height, width)
    if not (0 < scale[0] <= scale[1] <= 1):
        raise ValueError(f"`scale` must satisfy 0 < lo <= hi <= 1, got {scale}.")
    if not (0 < ratio[0] <= ratio[1]):
        raise ValueError(f"`ratio` must satisfy 0 < lo <= hi, got {ratio}.")
    if not 0.0 <= flip_p <= 1.0:
        raise ValueError(f"`flip_p` must be a probability in [0, 1], got {flip_p}.")
    dev = _gen_device(generator, device)
    tries = 10
    area = float(height * width)
    target = area * (scale[0] + (scale[1] - scale[0]) * _rand((batch_size, tries), generator, dev))
    log_r = math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * _rand((batch_size, tries), generator, dev)
    ar = torch.exp(log_r)
    cw = torch.sqrt(target * ar).round()
    ch = torch.sqrt(target / ar).round()
    ok = (cw > 0) & (ch > 0) & (cw <= width) & (ch <= height)
    first = torch.where(ok.any(1), ok.float().argmax(1), torch.full((batch_size,), -1, device=dev))
    # fallback: central crop
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        fw, fh = int(round(height * ratio[1])), height
    else:
        fw, fh = width, height
    pick = first.clamp(min=0).unsqueeze(1)
    valid = first >= 0
    w_c = torch.where(valid, cw.gather(1, pick).squeeze(1), float(fw))
    h_c = torch.where(valid, ch.gather(1, pick).squeeze(1), float(fh))
    # torchvision: i = randint(0, height - h + 1), j = randint(0, width - w + 1)
    y0 = torch.floor(_rand((batch_size,), generator, dev) * (height - h_c + 1))
    x0 = torch.floor(_rand((batch_size,), generator, dev) * (width - w_c + 1))
    y0 = torch.where(valid, y0, float((height - fh) // 2))
    x0 = torch.where(valid, x0, float((width - fw) // 2))
    flip = _rand((batch_size,), generator, dev) < flip_p
    return AffineParams(matrix=_crop_matrix(x0, y0, w_c, h_c, out_h, out_w, flip), size=(out_h, out_w))


def _crop_matrix(x0: Tensor, y0: Tensor, w_c: Tensor, h_c: Tensor, out_h: int, out_w: int, flip: Tensor) -> Tensor:
    """Map the crop box's pixel edges onto the output's pixel edges (``x0 - 0.5 -> -0.5``,
    ``x0 + w_c - 0.5 -> out_w - 0.5``), i.e. area-preserving resize semantics in pixel-index coordinates."""
    sx = out_w / w_c
    sy = out_h / h_c
    mat = torch.zeros(x0.shape[0], 2, 3, device=x0.device)
    mat[:, 0, 0] = sx
    mat[:, 0, 2] = (0.5 - x0) * sx - 0.5
    mat[:, 1, 1] = sy
    mat[:, 1, 2] = (0.5 - y0) * sy - 0.5
    return _flip_matrix(mat, flip, out_w)


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

    Raises:
        ValueError: negative ``padding`` or ``flip_p`` outside ``[0, 1]``.
    """
    _check_positive_int(batch_size, "batch_size")
    _check_positive_int(padding, "padding", 0)
    if not 0.0 <= flip_p <= 1.0:
        raise ValueError(f"`flip_p` must be a probability in [0, 1], got {flip_p}.")
    dev = _gen_device(generator, device)
    shift = torch.randint(-padding, padding + 1, (batch_size, 2), generator=generator, device=dev).float()
    flip = _rand((batch_size,), generator, dev) < flip_p
    mat = torch.zeros(batch_size, 2, 3, device=dev)
    mat[:, 0, 0] = 1.0
    mat[:, 1, 1] = 1.0
    mat[:, :, 2] = shift
    return AffineParams(matrix=_flip_matrix(mat, flip, width), size=(height, width))


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
        ``[B, C, *params.size]`` images (and masks ``[B, (K,) *params.size]`` when given).
    """
    images, masks4, mask_shape = _prepare(images, masks)
    _check_interpolation(interpolation)
    if params.matrix.shape[0] != images.shape[0]:
        raise ValueError(f"params are for {params.matrix.shape[0]} samples but the batch has {images.shape[0]}.")
    matrix = params.matrix.to(images.device)
    out = _warp_images(images, matrix, params.size, interpolation, fill)
    if masks4 is None:
        return out
    warped = _warp_masks(masks4, matrix, params.size, mask_fill)
    return out, warped.reshape(*mask_shape[:-2], *params.size)


def _size(size: Optional[Union[int, Sequence[int]]], height: int, width: int) -> tuple[int, int]:
    if size is None:
        return height, width
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    size = tuple(size)
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"`size` must be a positive int or (height, width), got {size!r}.")
    return size  # type: ignore[return-value]


def imagenet_augment(
    images: Tensor,
    *,
    masks: Optional[Tensor] = None,
    size: Optional[Union[int, tuple[int, int]]] = None,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    flip_p: float = 0.5,
    interpolation: str = "bilinear",
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """RandomResizedCrop + horizontal flip per sample (see :func:`sample_random_resized_crop_flip`).

    Output ``[B, C, *size]`` (default: input size), float in ``[0, 1]``.
    """
    images = _check_images(images)
    b, _, h, w = images.shape
    params = sample_random_resized_crop_flip(
        b, h, w, size=size, scale=scale, ratio=ratio, flip_p=flip_p, generator=generator, device=images.device
    )
    return apply_affine(images, params, masks=masks, interpolation=interpolation)


def cifar_augment(
    images: Tensor,
    *,
    masks: Optional[Tensor] = None,
    padding: int = 4,
    flip_p: float = 0.5,
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """Zero-pad ``padding`` pixels, random crop back to the input size, horizontal flip; per sample.

    Output: same shape as input, float in ``[0, 1]``. Whole-pixel shifts, so the values are exact copies.
    """
    images = _check_images(images)
    b, _, h, w = images.shape
    params = sample_pad_crop_flip(b, h, w, padding=padding, flip_p=flip_p, generator=generator, device=images.device)
    return apply_affine(images, params, masks=masks, interpolation="nearest")


# --------------------------------------------------------------------------------------------------------------
# Presets and custom augmentations
# --------------------------------------------------------------------------------------------------------------
PRESETS: dict[str, Callable[..., Any]] = {
    "trivial_augment": trivial_augment,
    "rand_augment": rand_augment,
    "imagenet": imagenet_augment,
    "cifar": cifar_augment,
}


def _freeze(module: torch.nn.Module) -> torch.nn.Module:
    for p in module.parameters():
        p.requires_grad_(False)
    return module


class _Preset:
    """Picklable ``fn(images, masks=None, generator=None)`` for a preset (callbacks are pickled by ddp_spawn)."""

    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.name = name
        self.kwargs = kwargs

    def __call__(self, images: Tensor, masks: Optional[Tensor] = None, generator: Optional[torch.Generator] = None):
        return PRESETS[self.name](images, masks=masks, generator=generator, **self.kwargs)

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"


class _Custom:
    """Picklable wrapper of a user callable with the ``fn(images, masks=None, generator=None)`` signature."""

    def __init__(self, augmentation: Callable[..., Any]) -> None:
        self.augmentation = augmentation

    def __call__(self, images: Tensor, masks: Optional[Tensor] = None, generator: Optional[torch.Generator] = None):
        if masks is None:
            return self.augmentation(images)
        out = self.augmentation(images, masks)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(
                "With masks, a custom augmentation must return (images, masks); got "
                f"{type(out).__name__}. Use e.g. kornia AugmentationSequential(data_keys=['input', 'mask'])."
            )
        return out[0], out[1]

    def __repr__(self) -> str:
        return repr(self.augmentation)


def build_augmentation(augmentation: Union[str, Augmentation], **kwargs: Any) -> Callable[..., Any]:
    """Turn a preset name or a user callable into ``fn(images, masks=None, generator=None)``.

    Args:
        augmentation: one of :data:`PRESETS` (``"trivial_augment"``, ``"rand_augment"``, ``"imagenet"``,
            ``"cifar"``), or any callable / ``nn.Module`` taking a float ``[B, C, H, W]`` batch in ``[0, 1]`` and
            returning one (e.g. a Kornia ``AugmentationSequential``). A module's parameters are frozen
            (``requires_grad=False``; Kornia's auto policies hold trainable ``nn.Parameter`` s). With masks a
            callable is called as ``augmentation(images, masks)`` and must return ``(images, masks)`` (Kornia's
            ``AugmentationSequential(..., data_keys=["input", "mask"])`` does).
        **kwargs: keyword arguments of the preset function (e.g. ``num_ops=2, magnitude=9`` for
            ``"rand_augment"``, ``size=224`` for ``"imagenet"``); not allowed with a callable.

    Returns:
        A picklable ``fn(images, masks=None, generator=None)`` returning images, or ``(images, masks)`` when masks
        are given. Custom callables ignore ``generator`` (they draw from the global RNG).

    Raises:
        ValueError: unknown preset name or unknown keyword for it; kwargs given with a callable.
        TypeError: ``augmentation`` neither a string nor callable.
    """
    if isinstance(augmentation, str):
        if augmentation not in PRESETS:
            import difflib

            close = difflib.get_close_matches(augmentation, sorted(PRESETS), n=1, cutoff=0.4)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"Unknown augmentation preset {augmentation!r}{hint}; choose one of {sorted(PRESETS)} or pass "
                "a callable / nn.Module."
            )
        params = inspect.signature(PRESETS[augmentation]).parameters
        allowed = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY} - {"masks", "generator"}
        unknown = set(kwargs) - allowed
        if unknown:
            raise ValueError(
                f"Unknown option(s) {sorted(unknown)} for preset {augmentation!r}; allowed: {sorted(allowed)}."
            )
        return _Preset(augmentation, dict(kwargs))
    if not callable(augmentation):
        raise TypeError(
            f"`augmentation` must be a preset name ({sorted(PRESETS)}) or a callable/nn.Module, got "
            f"{type(augmentation).__name__}."
        )
    if kwargs:
        raise ValueError(f"Options {sorted(kwargs)} apply to presets only; configure your callable yourself.")
    if isinstance(augmentation, torch.nn.Module):
        _freeze(augmentation)
    return _Custom(augmentation)


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
        augmentation, kwargs: as in :func:`build_augmentation`.
        nrow: images per row of the grid.
        padding: pixels between tiles (:func:`torchvision.utils.make_grid`).
        generator: random generator for presets.

    Returns:
        ``uint8 [3, H_grid, W_grid]`` tensor on the CPU (grayscale tiled as RGB), e.g. for
        ``torchvision.transforms.v2.functional.to_pil_image`` or TensorBoard's ``add_image``.
    """
    from torchvision.utils import make_grid

    fn = build_augmentation(augmentation, **kwargs)
    with torch.no_grad():
        out = fn(to_float(images), None, generator)
    grid = make_grid(out.float().clamp(0, 1).cpu(), nrow=nrow, padding=padding)
    return (grid * 255.0).round_().to(torch.uint8)
