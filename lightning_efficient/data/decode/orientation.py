"""EXIF orientation: read it, map boxes between viewed and stored coordinates, and apply it to pixels.

Coordinates: boxes are ``(left, top, right, bottom)`` in pixels, possibly fractional. "Oriented" means as the viewer
sees the image (after EXIF orientation), "stored" as the pixels are laid out in the file.

Source: EXIF orientation tag 274 (``0x0112``) and the transposes of ``PIL.ImageOps.exif_transpose``.
"""

from __future__ import annotations

import torch
from PIL import Image

__all__ = [
    "EXIF_ORIENTATION_TAG",
    "ORIENTATION_TRANSPOSE",
    "exif_orientation",
    "orient_chw",
    "orient_pil",
    "oriented_to_stored_box",
    "stored_size_is_swapped",
]

Box = tuple[float, float, float, float]

#: EXIF tag number of the orientation (274).
EXIF_ORIENTATION_TAG = 0x0112

#: EXIF orientation -> transpose that turns the stored image into the oriented one (as ``PIL.ImageOps.exif_transpose``).
ORIENTATION_TRANSPOSE: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def exif_orientation(img: Image.Image) -> int:
    """EXIF orientation 1..8 of an opened image (1 when absent, out of range or the EXIF block is malformed)."""
    try:
        value = int(img.getexif().get(EXIF_ORIENTATION_TAG, 1))
        return value if value in range(1, 9) else 1
    except Exception:  # noqa: BLE001 - malformed EXIF must not make a decodable image fail
        return 1


def stored_size_is_swapped(orientation: int) -> bool:
    """True for EXIF orientations 5-8, where the stored image is the viewed one turned by 90 degrees."""
    return orientation in (5, 6, 7, 8)


def oriented_to_stored_box(box: Box, orientation: int, stored_size: tuple[int, int]) -> Box:
    """Map a box from oriented (viewed) coordinates to the stored image's coordinates.

    Args:
        box: ``(left, top, right, bottom)`` in oriented pixels.
        orientation: EXIF orientation 1..8 (anything else is treated as 1).
        stored_size: ``(width, height)`` of the stored (un-oriented) image, in pixels.

    Returns:
        The same region as ``(left, top, right, bottom)`` in stored pixels.
    """
    if orientation not in ORIENTATION_TRANSPOSE:
        return box
    W, H = stored_size

    def inv(u: float, v: float) -> tuple[float, float]:
        # oriented (u, v) -> stored (x, y); inverse of the transposes in ORIENTATION_TRANSPOSE
        return {
            2: (W - u, v),
            3: (W - u, H - v),
            4: (u, H - v),
            5: (v, u),
            6: (v, H - u),
            7: (W - v, H - u),
            8: (W - v, u),
        }[orientation]

    (x0, y0), (x1, y1) = inv(box[0], box[1]), inv(box[2], box[3])
    return (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))


def orient_pil(image: Image.Image, orientation: int) -> Image.Image:
    """Apply an EXIF orientation (1..8) to a stored ``PIL.Image`` (the transpose of ``exif_transpose``)."""
    if orientation in ORIENTATION_TRANSPOSE:
        return image.transpose(ORIENTATION_TRANSPOSE[orientation])
    return image


def orient_chw(image: torch.Tensor, orientation: int) -> torch.Tensor:
    """Apply an EXIF orientation (1..8) to a ``[C, H, W]`` tensor (any dtype) on any device.

    Pixel for pixel the same as ``PIL.ImageOps.exif_transpose`` (the transposes of :data:`ORIENTATION_TRANSPOSE`):
    2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 anticlockwise.
    Transposes are views; flips copy.
    """
    if orientation in (5, 6, 7, 8):
        image = image.transpose(-2, -1)
    flip = {2: (-1,), 3: (-2, -1), 4: (-2,), 6: (-1,), 7: (-2, -1), 8: (-2,)}.get(orientation)
    return image.flip(flip) if flip else image
