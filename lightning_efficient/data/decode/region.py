"""Open an image file, choose its crop from the header, and decode only what the crop needs (a
:class:`DecodedRegion`, resized afterwards by :mod:`~lightning_efficient.data.decode.resize`).

Coordinates: ``(width, height)`` and boxes ``(left, top, right, bottom)`` are in **pixels**; ``choose_box``
works in the oriented image (as the viewer sees it, after EXIF orientation), :class:`DecodedRegion` in the stored
one. Boxes may be fractional (Pillow's ``Image.resize(box=...)`` accepts float boxes).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image

from lightning_efficient.data.decode.convert import to_rgb_or_l
from lightning_efficient.data.decode.jpeg import jpeg_draft_scale
from lightning_efficient.data.decode.orientation import (
    exif_orientation,
    oriented_to_stored_box,
    stored_size_is_swapped,
)

__all__ = ["Box", "DecodedRegion", "crop_geometry", "decode_region", "open_image_bytes"]

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class DecodedRegion:
    """A decoded image plus the crop box to resample from it, before the resize (see :func:`decode_region`).

    Attributes:
        image: ``PIL.Image`` in mode ``RGB`` or ``L``, loaded, in the file's **stored** orientation and at the decoded
            (possibly 1/2, 1/4, 1/8 DCT-reduced) size.
        box: ``(left, top, right, bottom)`` in ``image`` pixels (floats).
        out_size: ``(width, height)`` to resize the box to, in stored orientation (swapped for EXIF 5-8).
        orientation: EXIF orientation 1..8 to apply after the resize.
        scale: the libjpeg DCT scale the image was decoded at (1, 2, 4 or 8; 1 for non-JPEGs).
    """

    image: Image.Image
    box: Box
    out_size: tuple[int, int]
    orientation: int
    scale: int


def open_image_bytes(data: bytes | io.BytesIO, path: str) -> Image.Image:
    """``Image.open`` on a file's bytes (or a ``BytesIO`` of them), with Pillow's "cannot identify" error naming
    the file, not the buffer.

    Raises:
        PIL.UnidentifiedImageError: not an image Pillow can open (the message names ``path``).
    """
    buffer = data if isinstance(data, io.BytesIO) else io.BytesIO(data)
    try:
        return Image.open(buffer)
    except Image.UnidentifiedImageError as err:
        raise Image.UnidentifiedImageError(f"cannot identify image file {path!r}") from err


def crop_geometry(
    img: Image.Image, size: tuple[int, int], choose_box: Callable[[int, int], Box]
) -> tuple[int, Box, tuple[int, int]]:
    """From an opened (not decoded) image: its EXIF orientation, the crop box in **stored** pixels, and the output
    size ``(width, height)`` in stored orientation.

    ``choose_box(width, height)`` is called with the **oriented** size (as the viewer sees the image) and returns
    ``(left, top, right, bottom)`` in oriented pixels; ``size`` is the output ``(h, w)`` as the viewer sees it.
    """
    orientation = exif_orientation(img)
    stored_w, stored_h = img.size
    swapped = stored_size_is_swapped(orientation)
    oriented_w, oriented_h = (stored_h, stored_w) if swapped else (stored_w, stored_h)
    box = oriented_to_stored_box(choose_box(oriented_w, oriented_h), orientation, (stored_w, stored_h))
    out_h, out_w = size
    return orientation, box, ((out_h, out_w) if swapped else (out_w, out_h))


def decode_region(
    path: str,
    size: tuple[int, int],
    choose_box: Callable[[int, int], Box],
    draft: bool = True,
    draft_gap: float = 1.0,
) -> DecodedRegion:
    """Open ``path``, pick a crop from its header size, and decode it at the smallest DCT scale that covers the crop.

    Steps: read the header (size, EXIF orientation) without decoding; call ``choose_box(width, height)`` with the
    **oriented** size; map the box to stored coordinates; for JPEGs ask libjpeg for the largest 1/2, 1/4, 1/8 scale
    that still covers the box at the output size (``Image.draft``); decode; convert modes other than RGB/L to
    RGB (:func:`~lightning_efficient.data.decode.convert.to_rgb_or_l`). The resize is left to
    :func:`~lightning_efficient.data.decode.resize_region_pil` or
    :func:`~lightning_efficient.data.decode.resize_region_uint8`. The pixels inside the box are exactly those of a
    full decode at the same DCT scale.

    Args:
        path: image file.
        size: output ``(h, w)`` in pixels.
        choose_box: ``(width, height) -> (left, top, right, bottom)`` in oriented pixels.
        draft: use JPEG DCT scaling (no effect on other formats).
        draft_gap: see :func:`~lightning_efficient.data.decode.jpeg_draft_scale` (1: smallest decode that covers
            the output; 2: near-lossless).

    Raises:
        OSError, ValueError, SyntaxError, ...: whatever Pillow raises for unreadable files (the dataset wraps these
        into :class:`~lightning_efficient.data.ImageDecodeError`).
    """
    with open(path, "rb") as fh:
        data = fh.read()
    buffer = io.BytesIO(data)
    with open_image_bytes(buffer, path) as img:
        stored_w, stored_h = img.size
        orientation, box, stored_out = crop_geometry(img, size, choose_box)
        scale = 1
        if img.format == "JPEG":
            s = jpeg_draft_scale(box[2] - box[0], box[3] - box[1], stored_out[0], stored_out[1], draft_gap)
            if draft and s > 1:
                # request (W // s, H // s): Pillow then picks exactly scale s (W // (W // s) is in [s, 2s)).
                drafted = img.draft("RGB", (stored_w // s, img.size[1] // s))
                if drafted is not None:  # None: Pillow could not draft (e.g. unusual tiling); decode at full size
                    actual = stored_w / drafted[1][2]  # the scale Pillow configured (== s)
                    scale = int(round(actual))
                    # libjpeg maps stored x -> x / s (decoded size is ceil(W / s)); clamp against rounding.
                    box = (
                        max(0.0, box[0] / actual),
                        max(0.0, box[1] / actual),
                        min(float(img.size[0]), box[2] / actual),
                        min(float(img.size[1]), box[3] / actual),
                    )
        img.load()
        work = to_rgb_or_l(img)  # loaded pixels stay valid after the file is closed
    return DecodedRegion(work, box, stored_out, orientation, scale)
