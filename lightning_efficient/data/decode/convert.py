"""Pixel-format conversions after a Pillow decode: any mode -> ``RGB``/``L``, and ``PIL.Image`` -> ``uint8`` CHW."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

__all__ = ["pil_to_uint8_chw", "to_rgb_or_l"]


def to_rgb_or_l(img: Image.Image) -> Image.Image:
    """Decoded image -> mode ``RGB`` or ``L`` (L is kept so the resize touches one channel; callers expand it).

    * ``P`` with transparency goes through ``RGBA`` (avoids Pillow's palette-transparency warning); alpha
      (``RGBA``, ``LA``, ``PA``) is dropped without compositing, as torchvision's ``ImageFolder`` loader does.
    * 16-bit grayscale (``I;16*``, e.g. 16-bit PNG) is scaled to 8 bits (``>> 8``); Pillow's own ``convert`` would
      clip everything above 255 to white (so here FastImageFolder deliberately differs from ``ImageFolder``).
    * ``CMYK``, ``YCbCr``, ``1``, ``I``, ``F`` and the rest use Pillow's ``convert("RGB")``.
    """
    mode = img.mode
    if mode in ("RGB", "L"):
        return img
    if mode == "P" and "transparency" in img.info:
        return img.convert("RGBA").convert("RGB")
    if mode.startswith("I;16"):
        arr = np.asarray(img).astype(np.uint16)  # native-endian copy whatever the stored byte order
        return Image.fromarray((arr >> 8).astype(np.uint8), "L")
    return img.convert("RGB")


def pil_to_uint8_chw(img: Image.Image) -> torch.Tensor:
    """``PIL.Image`` (converted to RGB if needed) -> contiguous ``uint8`` tensor ``[3, H, W]`` (0..255, no floats).

    The HWC -> CHW copy is done by NumPy on the calling thread: torch's parallel copy would start its intra-op
    thread pool in every DataLoader worker (and, with ``num_workers=0``, contend with the training threads).
    """
    if img.mode != "RGB":
        img = img.convert("RGB")
    chw = np.ascontiguousarray(np.asarray(img, dtype=np.uint8).transpose(2, 0, 1))
    return torch.from_numpy(chw)
