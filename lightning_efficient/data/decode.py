"""Pure decode/crop functions behind :class:`~lightning_efficient.data.FastImageFolder`.

The functional core: crop-box geometry (no I/O), the JPEG DCT-scale choice, EXIF-orientation box mapping, and one
function that turns an image file into a fixed-size ``uint8`` RGB image with a single resample.

Coordinates: ``(width, height)`` and boxes ``(left, top, right, bottom)`` are in **pixels** of the image as the
viewer sees it (after EXIF orientation), unless a name says ``stored``. Boxes may be fractional (Pillow's
``Image.resize(box=...)`` accepts float boxes).

Sources:
    * torchvision ``transforms.RandomResizedCrop.get_params`` (crop sampling, reproduced draw for draw),
      ``transforms.Resize`` (shorter-side rounding) and ``transforms.CenterCrop`` (offset rounding).
    * libjpeg DCT scaling: the decoder can produce 1/2, 1/4 or 1/8 of the stored size almost for free; Pillow
      exposes it as ``Image.draft(mode, size)`` which picks the largest scale ``s`` with
      ``stored_size // requested_size >= s`` (``PIL/JpegImagePlugin.py::draft``).
    * EXIF orientation tag 274 and the transposes of ``PIL.ImageOps.exif_transpose``.
    * Pillow-SIMD is a drop-in fork of Pillow with SIMD resize/convert; its versions carry a ``.postN`` suffix
      (MosaicML Composer's performance notes recommend it for CPU-bound data loading).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from PIL import Image

__all__ = [
    "ImageDecodeError",
    "RESAMPLE",
    "center_crop_box",
    "decode_crop_resize",
    "jpeg_draft_scale",
    "oriented_to_stored_box",
    "pil_flavour",
    "pil_to_uint8_chw",
    "random_resized_crop_box",
    "stored_size_is_swapped",
    "to_rgb_or_l",
]

Box = tuple[float, float, float, float]

#: Interpolation names accepted by ``FastImageFolder`` -> Pillow resampling filters.
RESAMPLE: dict[str, Image.Resampling] = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}

# EXIF orientation -> transpose that turns the stored image into the oriented one (as PIL.ImageOps.exif_transpose).
_ORIENTATION_TRANSPOSE: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_EXIF_ORIENTATION_TAG = 0x0112


class ImageDecodeError(OSError):
    """An image file could not be opened or decoded (truncated, corrupt, or not an image).

    The message names the file and the fix. Subclass of :class:`OSError`, like Pillow's own decode errors.
    """


def pil_flavour() -> str:
    """Name and version of the installed PIL: ``"Pillow 13.0.0"`` or ``"Pillow-SIMD 9.5.0.post2"``.

    Pillow-SIMD installs under the same import name ``PIL``; it is recognised by the ``.postN`` suffix its
    releases carry (e.g. ``9.0.0.post1``). It is used automatically when installed: nothing here selects it.
    """
    import PIL

    version = getattr(PIL, "__version__", "unknown")
    name = "Pillow-SIMD" if ".post" in version else "Pillow"
    return f"{name} {version}"


def random_resized_crop_box(
    width: int,
    height: int,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
) -> tuple[int, int, int, int]:
    """Draw a RandomResizedCrop window from the image size alone, before any pixel is decoded.

    Same algorithm and the same draws from torch's global RNG as torchvision's
    ``transforms.RandomResizedCrop.get_params`` (10 tries, then the central crop clamped to ``ratio``), so
    ``torch.manual_seed``/``seed_everything`` and DataLoader worker seeding make it reproducible, and a given
    seed gives the same window as torchvision.

    Args:
        width: image width in pixels (after EXIF orientation), >= 1.
        height: image height in pixels, >= 1.
        scale: (min, max) fraction of the image area the crop covers.
        ratio: (min, max) aspect ratio ``w / h`` of the crop, before resizing.

    Returns:
        ``(top, left, h, w)`` in pixels (torchvision's ``(i, j, h, w)`` order); always inside the image.
    """
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)).item())
            j = int(torch.randint(0, width - w + 1, size=(1,)).item())
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def center_crop_box(width: int, height: int, size: tuple[int, int], resize_shorter: int) -> Box:
    """Box in the original image equivalent to ``Resize(resize_shorter)`` then ``CenterCrop(size)``.

    Uses torchvision's rounding (the longer side becomes ``int(resize_shorter * long / short)``; the crop offset is
    ``int(round((resized - crop) / 2))``), expressed in original-image pixels so that a single
    ``Image.resize(size, box=box)`` replaces the two resamples.

    Args:
        width: image width in pixels, >= 1.
        height: image height in pixels, >= 1.
        size: output ``(h, w)`` in pixels.
        resize_shorter: length in pixels the shorter side is resized to; must be >= ``max(size)``.

    Returns:
        ``(left, top, right, bottom)`` in original pixels (floats).

    Raises:
        ValueError: if ``resize_shorter < max(size)`` (the centre crop would need padding).
    """
    out_h, out_w = size
    if resize_shorter < max(out_h, out_w):
        raise ValueError(
            f"resize_shorter={resize_shorter} is smaller than the crop size {size}; the centre crop would need "
            f"padding. Use resize_shorter >= {max(out_h, out_w)}."
        )
    if width <= height:
        new_w, new_h = resize_shorter, int(resize_shorter * height / width)
    else:
        new_h, new_w = resize_shorter, int(resize_shorter * width / height)
    top = int(round((new_h - out_h) / 2.0))
    left = int(round((new_w - out_w) / 2.0))
    sx, sy = new_w / width, new_h / height
    return (left / sx, top / sy, (left + out_w) / sx, (top + out_h) / sy)


def jpeg_draft_scale(box_w: float, box_h: float, out_w: int, out_h: int, gap: float = 1.0) -> int:
    """Largest libjpeg DCT scale (1, 2, 4 or 8) at which a crop still covers ``gap`` times the output size.

    Decoding at ``1/s`` shrinks the crop to ``box / s`` pixels; this returns the largest ``s`` in {8, 4, 2, 1} with
    ``box_w / s >= gap * out_w`` and ``box_h / s >= gap * out_h``, so the final resample only downsamples.

    ``gap`` plays the role of Pillow's ``reducing_gap`` (``Image.thumbnail`` uses 2.0): the DCT-scaled decode is
    a little softer/aliased than an antialiased resample, so a gap of 2 keeps the result practically equal to a
    full decode (measured on hymenoptera/imagenette at 64-128 px: mean abs difference <= 0.5 on 0..255) while
    ``gap=1`` decodes up to 2x fewer pixels per side at a cost of about 1-2 (max ~5) on 0..255.

    Args:
        box_w, box_h: crop size in stored pixels.
        out_w, out_h: output size in pixels.
        gap: >= 1.

    Example: a 2592x1944 photo, centre box 1701x1701, output 112x112: ratio 15.2 -> scale 8 with ``gap=1``
    (decode 324x243), scale 4 with ``gap=2``.
    """
    ratio = min(box_w / out_w, box_h / out_h) / gap
    for s in (8, 4, 2):
        if ratio >= s:
            return s
    return 1


def stored_size_is_swapped(orientation: int) -> bool:
    """True for EXIF orientations 5-8, where the stored image is the viewed one turned by 90 degrees."""
    return orientation in (5, 6, 7, 8)


def oriented_to_stored_box(box: Box, orientation: int, stored_size: tuple[int, int]) -> Box:
    """Map a box from oriented (viewed) coordinates to the stored image's coordinates.

    Args:
        box: ``(left, top, right, bottom)`` in oriented pixels.
        orientation: EXIF orientation 1..8 (anything else is treated as 1).
        stored_size: ``(width, height)`` of the stored (un-oriented) image.

    Returns:
        The same region as ``(left, top, right, bottom)`` in stored pixels.
    """
    if orientation not in _ORIENTATION_TRANSPOSE:
        return box
    W, H = stored_size

    def inv(u: float, v: float) -> tuple[float, float]:
        # oriented (u, v) -> stored (x, y); inverse of the transposes in _ORIENTATION_TRANSPOSE
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


def _exif_orientation(img: Image.Image) -> int:
    try:
        value = img.getexif().get(_EXIF_ORIENTATION_TAG, 1)
        return int(value) if int(value) in range(1, 9) else 1
    except Exception:  # malformed EXIF must not make a decodable image fail
        return 1


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
        import numpy as np

        arr = np.asarray(img).astype(np.uint16)  # native-endian copy whatever the stored byte order
        return Image.fromarray((arr >> 8).astype(np.uint8), "L")
    return img.convert("RGB")


def decode_crop_resize(
    path: str,
    size: tuple[int, int],
    choose_box: Callable[[int, int], Box],
    resample: Image.Resampling = Image.Resampling.BILINEAR,
    draft: bool = True,
    draft_gap: float = 1.0,
) -> Image.Image:
    """Open ``path``, pick a crop from its header size, decode at the smallest DCT scale, crop+resize once.

    Steps: read the header (size, EXIF orientation) without decoding; call ``choose_box(width, height)`` with the
    **oriented** size; map the box to stored coordinates; for JPEGs ask libjpeg for the largest 1/2, 1/4, 1/8 scale
    that still covers the box at the output size (``Image.draft``); decode; convert modes other than RGB/L to RGB
    (palette with transparency via RGBA; alpha is dropped, as torchvision's ``ImageFolder`` loader does); one
    ``Image.resize(box=...)``; transpose to the EXIF orientation; L -> RGB last (cheaper after the resize).

    Args:
        path: image file.
        size: output ``(h, w)`` in pixels.
        choose_box: ``(width, height) -> (left, top, right, bottom)`` in oriented pixels.
        resample: Pillow resampling filter.
        draft: use JPEG DCT scaling (no effect on other formats).
        draft_gap: see :func:`jpeg_draft_scale` (1: smallest decode that covers the output; 2: near-lossless).

    Returns:
        An RGB ``PIL.Image`` of size ``(w, h)``, oriented as the viewer sees it.

    Raises:
        OSError, ValueError, SyntaxError, ...: whatever Pillow raises for unreadable files (the dataset wraps these
        into :class:`ImageDecodeError`).
    """
    out_h, out_w = size
    with Image.open(path) as img:
        orientation = _exif_orientation(img)
        stored_w, stored_h = img.size
        swapped = stored_size_is_swapped(orientation)
        oriented_w, oriented_h = (stored_h, stored_w) if swapped else (stored_w, stored_h)
        box = oriented_to_stored_box(choose_box(oriented_w, oriented_h), orientation, (stored_w, stored_h))
        # output size in stored orientation (Pillow sizes are (width, height))
        stored_out = (out_h, out_w) if swapped else (out_w, out_h)
        if draft and img.format == "JPEG":
            s = jpeg_draft_scale(box[2] - box[0], box[3] - box[1], stored_out[0], stored_out[1], draft_gap)
            if s > 1:
                # request (W // s, H // s): Pillow then picks exactly scale s (W // (W // s) is in [s, 2s)).
                drafted = img.draft("RGB", (stored_w // s, stored_h // s))
                if drafted is not None:  # None: Pillow could not draft (e.g. unusual tiling); decode at full size
                    s = stored_w / drafted[1][2]  # the scale Pillow configured (== s)
                    # libjpeg maps stored x -> x / s (decoded size is ceil(W / s)); clamp against rounding.
                    box = (
                        max(0.0, box[0] / s),
                        max(0.0, box[1] / s),
                        min(float(img.size[0]), box[2] / s),
                        min(float(img.size[1]), box[3] / s),
                    )
        img.load()
        work = to_rgb_or_l(img)
        out = work.resize(stored_out, resample, box=box)
    if orientation in _ORIENTATION_TRANSPOSE:
        out = out.transpose(_ORIENTATION_TRANSPOSE[orientation])
    if out.mode != "RGB":
        out = out.convert("RGB")
    return out


def pil_to_uint8_chw(img: Image.Image) -> torch.Tensor:
    """RGB ``PIL.Image`` -> contiguous ``uint8`` tensor ``[3, H, W]`` (values 0..255, no float conversion).

    The HWC -> CHW copy is done by NumPy on the calling thread: torch's parallel copy would start its intra-op
    thread pool in every DataLoader worker (and, with ``num_workers=0``, contend with the training threads).
    """
    import numpy as np

    if img.mode != "RGB":
        img = img.convert("RGB")
    chw = np.ascontiguousarray(np.asarray(img, dtype=np.uint8).transpose(2, 0, 1))
    return torch.from_numpy(chw)
