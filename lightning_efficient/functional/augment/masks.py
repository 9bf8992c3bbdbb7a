"""Giving label masks back in the layout and dtype they came in with, whatever augmented them.

Our presets keep a mask's shape and dtype; other modules do not all do so. Kornia's
``AugmentationSequential(..., data_keys=["input", "mask"])`` returns ``[B, H, W]`` masks as ``[B, 1, H, W]``
(kornia#4750), and other callables may answer integer labels with floats. A segmentation model written for
``[B, H, W]`` integer targets then works in validation (masks untouched) but crashes in training
(``cross_entropy`` gets ``[B, 1, H, W]``). :func:`restore_masks` undoes such changes of layout and dtype.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

__all__ = ["restore_masks"]


def restore_masks(masks: Any, like: Tensor, *, who: str = "the augmentation") -> Tensor:
    """``masks`` (returned by an augmentation) in the layout and dtype of ``like`` (the masks it was given).

    Layout: ``like`` of shape ``[B, H, W]`` accepts ``[B, H', W']`` or ``[B, 1, H', W']`` (squeezed back);
    ``like`` of shape ``[B, K, H, W]`` accepts ``[B, K, H', W']``, and ``[B, H', W']`` when ``K == 1``
    (unsqueezed back). The spatial size may change (crops, resizes); batch size and ``K`` may not.

    Dtype: cast to ``like.dtype``; floating values are rounded to the nearest label first when ``like`` holds
    integer or boolean labels (a nearest-resampled label map holds whole numbers, so nothing changes but the
    dtype).

    Args:
        masks: what the augmentation returned for the masks.
        like: the ``[B, H, W]`` or ``[B, K, H, W]`` masks given to the augmentation (any dtype).
        who: names the augmentation in error messages.

    Returns:
        A tensor of ``like``'s rank and dtype (``masks`` itself when nothing needs changing), same device as
        ``masks``.

    Raises:
        TypeError: ``masks`` is not a tensor.
        ValueError: a batch size, channel count or rank that cannot be mapped back onto ``like``'s layout; the
            message gives both shapes.
    """
    if not isinstance(masks, Tensor):
        raise TypeError(f"{who} returned masks of type {type(masks).__name__}; it must return a tensor of masks.")
    shape, given = tuple(masks.shape), tuple(like.shape)
    out = masks
    if like.ndim == 3 and masks.ndim == 4 and masks.shape[1] == 1:
        out = masks.squeeze(1)
    elif like.ndim == 4 and like.shape[1] == 1 and masks.ndim == 3:
        out = masks.unsqueeze(1)
    if out.ndim != like.ndim or out.shape[0] != like.shape[0] or out.shape[1:-2] != like.shape[1:-2]:
        raise ValueError(
            f"{who} returned masks of shape {shape} for masks of shape {given}; cannot give them back as "
            f"{'[B, H, W]' if like.ndim == 3 else '[B, K, H, W]'} (batch size and channels must stay). Fix: make it "
            "return one mask per image with the channels it was given."
        )
    if out.dtype == like.dtype:
        return out
    if out.is_floating_point() and not like.is_floating_point():
        out = out.round()
    return out.to(like.dtype)
