"""The factory: a preset name or a user callable -> a picklable ``fn(images, masks=None, generator=None)``.

The wrappers are classes rather than closures because callbacks are pickled by ``ddp_spawn``.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from lightning_efficient.functional.augment.masks import restore_masks
from lightning_efficient.functional.augment.presets import PRESETS

__all__ = ["Augmentation", "build_augmentation"]

#: A user augmentation: ``fn(images) -> images``, or ``fn(images, masks) -> (images, masks)`` with masks.
Augmentation = Callable[..., Any]


def _freeze(module: torch.nn.Module) -> torch.nn.Module:
    for p in module.parameters():
        p.requires_grad_(False)
    return module


class _Preset:
    """Picklable ``fn(images, masks=None, generator=None)`` for a preset (callbacks are pickled by ddp_spawn)."""

    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.name = name
        self.kwargs = kwargs

    def __call__(
        self, images: Tensor, masks: Optional[Tensor] = None, generator: Optional[torch.Generator] = None, **extra: Any
    ):
        """Apply the preset; ``extra``: options set per batch (e.g. ``pixel_scale``) over the preset's own."""
        return PRESETS[self.name](images, masks=masks, generator=generator, **{**self.kwargs, **extra})

    def takes(self, option: str) -> bool:
        """Whether the preset has the keyword option ``option`` (and the user did not set it)."""
        return option in inspect.signature(PRESETS[self.name]).parameters and option not in self.kwargs

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
        who = f"The augmentation {type(self.augmentation).__name__}"
        out_images, out_masks = out[0], restore_masks(out[1], masks, who=who)
        if isinstance(out_images, Tensor) and out_images.ndim == 4 and out_masks.shape[-2:] != out_images.shape[-2:]:
            raise ValueError(
                f"{who} returned images of size {tuple(out_images.shape[-2:])} but masks of size "
                f"{tuple(out_masks.shape[-2:])}; images and masks must get the same geometric transform."
            )
        return out_images, out_masks

    def __repr__(self) -> str:
        return repr(self.augmentation)


def build_augmentation(augmentation: Union[str, Augmentation], **kwargs: Any) -> Callable[..., Any]:
    """Turn a preset name or a user callable into ``fn(images, masks=None, generator=None)``.

    Args:
        augmentation: one of :data:`PRESETS` (``"trivial_augment"``, ``"rand_augment"``, ``"imagenet"``,
            ``"cifar"``, ``"flip"``), or any callable / ``nn.Module`` taking a float ``[B, C, H, W]`` batch in
            ``[0, 1]`` and returning one (e.g. a Kornia ``AugmentationSequential``). A module's parameters are frozen
            (``requires_grad=False``; Kornia's auto policies hold trainable ``nn.Parameter`` s). With masks a
            callable is called as ``augmentation(images, masks)`` and must return ``(images, masks)`` (Kornia's
            ``AugmentationSequential(..., data_keys=["input", "mask"])`` does); the masks it returns are given
            back in the shape and dtype they came in with (:func:`~.masks.restore_masks`: Kornia's
            ``[B, 1, H, W]`` answer to ``[B, H, W]`` masks is squeezed, float answers to integer labels rounded).
        **kwargs: keyword arguments of the preset function (e.g. ``num_ops=2, magnitude=9`` for
            ``"rand_augment"``, ``size=224`` for ``"imagenet"``); not allowed with a callable.

    Returns:
        A picklable ``fn(images, masks=None, generator=None)`` returning images, or ``(images, masks)`` when masks
        are given, masks of the shape (up to the spatial size) and dtype given. Custom callables ignore
        ``generator`` (they draw from the global RNG).

    Raises:
        ValueError: unknown preset name or unknown keyword for it; kwargs given with a callable. When called: a
            custom callable's masks that cannot be mapped back onto the given layout (other batch size or
            channel count) or whose spatial size differs from its images'.
        TypeError: ``augmentation`` neither a string nor callable. When called: a custom callable that does not
            return ``(images, masks)`` with a mask tensor.
    """
    if isinstance(augmentation, str):
        if augmentation not in PRESETS:
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
