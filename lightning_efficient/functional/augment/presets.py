"""The named augmentations: draw parameters per sample, then apply them, in one call; and their registry.

Each preset takes ``images`` ``[B, C, H, W]`` (``uint8`` or float in ``[0, 1]``) and the keyword-only options
``masks=`` and ``generator=`` (plus its own); :data:`PRESETS` maps the names that
:func:`~lightning_efficient.functional.augment.build_augmentation` and ``GPUAugmentation`` accept to them.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from lightning_efficient.functional.augment.convert import to_float
from lightning_efficient.functional.augment.crop_sampling import sample_pad_crop_flip, sample_random_resized_crop_flip
from lightning_efficient.functional.augment.policy import apply_policy
from lightning_efficient.functional.augment.policy_sampling import sample_rand_augment, sample_trivial_augment
from lightning_efficient.functional.augment.validation import check_images, check_probability
from lightning_efficient.functional.augment.warp import apply_affine

__all__ = [
    "PRESETS",
    "cifar_augment",
    "flip_augment",
    "imagenet_augment",
    "rand_augment",
    "random_hflip",
    "trivial_augment",
]


def random_hflip(
    images: Tensor,
    masks: Optional[Tensor] = None,
    *,
    flip_p: float = 0.5,
    generator: Optional[torch.Generator] = None,
) -> tuple[Tensor, Optional[Tensor]]:
    """Flip each image (and its mask) left-right with probability ``flip_p``, drawn per sample from ``generator``
    on the images' device (torchvision's ``RandomHorizontalFlip``, per sample). ``images`` ``[B, C, H, W]``,
    ``masks`` ``[B, H, W]`` or ``[B, K, H, W]``, any dtype; returned with the same shapes and dtypes. Nothing is
    drawn when ``flip_p`` is 0.

    Raises:
        ValueError: ``flip_p`` outside ``[0, 1]``.
    """
    check_probability(flip_p, "flip_p")
    if flip_p == 0:
        return images, masks
    flips = torch.rand(images.shape[0], generator=generator, device=images.device) < flip_p
    images = torch.where(flips.view(-1, 1, 1, 1), images.flip(-1), images)
    if masks is not None:
        masks = torch.where(flips.view(-1, *[1] * (masks.dim() - 1)), masks.flip(-1), masks)
    return images, masks


def trivial_augment(
    images: Tensor,
    *,
    masks: Optional[Tensor] = None,
    num_bins: int = 31,
    interpolation: str = "nearest",
    fill: float = 0.0,
    mask_fill: float = 0.0,
    flip_p: float = 0.0,
    pixel_scale: float = 1.0,
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """TrivialAugmentWide per sample (Müller & Hutter 2021; torchvision ``TrivialAugmentWide`` ranges).

    Each image gets one operation from :data:`OPS` and one magnitude, drawn independently per image, on the
    images' device (:func:`sample_trivial_augment`, then :func:`apply_policy`). With ``flip_p > 0`` each image is
    first flipped left-right with that probability (:func:`random_hflip`; torchvision's ImageNet recipe:
    ``RandomResizedCrop``, ``RandomHorizontalFlip``, ``TrivialAugmentWide``, where the crop is the dataset's, e.g.
    :class:`~lightning_efficient.FastImageFolder`'s). ``pixel_scale``: see :func:`sample_trivial_augment` (set by
    ``GPUAugmentation`` under ``ProgressiveResize``). Shapes, dtypes and errors as in :func:`apply_policy`.

    Example:
        ```pycon
        >>> x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
        >>> y = trivial_augment(x)
        >>> y.shape, y.dtype
        (torch.Size([8, 3, 32, 32]), torch.float32)
        ```
    """
    images = check_images(images)
    images, masks = random_hflip(images, masks, flip_p=flip_p, generator=generator)
    params = sample_trivial_augment(
        images.shape[0], num_bins=num_bins, pixel_scale=pixel_scale, generator=generator, device=images.device
    )
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
    flip_p: float = 0.0,
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """RandAugment per sample (Cubuk et al. 2020; torchvision ``RandAugment`` ranges and defaults ``num_ops=2,
    magnitude=9, num_bins=31``): :func:`sample_rand_augment`, then :func:`apply_policy`; ``flip_p`` as in
    :func:`trivial_augment`. Shapes, dtypes and errors as in :func:`apply_policy`."""
    images = check_images(images)
    images, masks = random_hflip(images, masks, flip_p=flip_p, generator=generator)
    b, _, h, w = images.shape
    params = sample_rand_augment(
        b, h, w, num_ops=num_ops, magnitude=magnitude, num_bins=num_bins, generator=generator, device=images.device
    )
    return apply_policy(images, params, masks=masks, interpolation=interpolation, fill=fill, mask_fill=mask_fill)


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
    """RandomResizedCrop + horizontal flip per sample (:func:`sample_random_resized_crop_flip`, then
    :func:`apply_affine`).

    Returns ``[B, C, *size]`` (default: the input size), float in ``[0, 1]`` (float32 for ``uint8`` input, else
    the input dtype); with ``masks``, ``(images, masks)``. Errors as in the two functions.
    """
    images = check_images(images)
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
    """Zero-pad ``padding`` pixels, random crop back to the input size, horizontal flip; per sample
    (:func:`sample_pad_crop_flip`, then :func:`apply_affine`).

    Returns the input's shape, float in ``[0, 1]``; with ``masks``, ``(images, masks)``. Whole-pixel shifts, so
    the values are exact copies.
    """
    images = check_images(images)
    b, _, h, w = images.shape
    params = sample_pad_crop_flip(b, h, w, padding=padding, flip_p=flip_p, generator=generator, device=images.device)
    return apply_affine(images, params, masks=masks, interpolation="nearest")


def flip_augment(
    images: Tensor,
    *,
    masks: Optional[Tensor] = None,
    flip_p: float = 0.5,
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """Horizontal flip per sample and nothing else (:func:`random_hflip`): with the dataset's
    ``RandomResizedCrop`` (e.g. :class:`~lightning_efficient.FastImageFolder`'s), the classic ImageNet
    augmentation without a policy. For short runs (a few epochs), where a policy such as TrivialAugment
    regularises more than the run can use (fastai's idea: its milder default augmentation; measured on
    ResNet-18 from scratch in 4-epoch runs, docs/practices/gpu-augmentation.md).

    Returns the input's shape, float in ``[0, 1]`` (float32 for ``uint8`` input, else the input dtype); with
    ``masks``, ``(images, masks)``, the masks flipped with their images. Errors as in :func:`random_hflip`.
    """
    images = check_images(images)
    images = to_float(images, images.dtype if images.is_floating_point() else torch.float32)
    images, masks = random_hflip(images, masks, flip_p=flip_p, generator=generator)
    return images if masks is None else (images, masks)


#: Preset name -> function ``fn(images, *, masks=None, generator=None, **options)``.
PRESETS: dict[str, Callable[..., Any]] = {
    "trivial_augment": trivial_augment,
    "rand_augment": rand_augment,
    "imagenet": imagenet_augment,
    "cifar": cifar_augment,
    "flip": flip_augment,
}
