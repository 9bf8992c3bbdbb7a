"""Row-limited JPEG decode: make Pillow/libjpeg stop decoding below the crop. The one place that touches Pillow's
private attributes.

How: libjpeg reads the image height from the frame header (SOF) when it decodes, so the header bytes in the
in-memory buffer are rewritten to the number of rows wanted, and Pillow's image size (the private ``_size`` behind
the read-only ``Image.size``) and its decoder ``tile`` are shortened to match. libjpeg then decodes the first rows
exactly as a full decode would (the entropy-coded data of those MCU rows is unchanged) and skips the rest of the
scan data to the end-of-image marker; a truncated file still raises Pillow's "image file is truncated".

Why it is kept: it pays on large photos, whose crops rarely reach the bottom rows; the figures (row-limited decode
on vs off through ``FastImageFolder`` at 224 px) are in ``benchmarks/results/row_limited_decode.md``, produced by
``benchmarks/row_limited_decode.py``.

Guard: :func:`row_limit_available` checks once per process that the installed Pillow still has what the trick
relies on (a ``size`` property over an instance ``_size``, 4-field decoder tiles, and a real decode on a small
in-memory JPEG that comes out right). If not, :func:`limit_jpeg_rows` changes nothing (a normal full decode
follows) and a ``RuntimeWarning`` is issued once. Switch it off with ``FastImageFolder(..., row_limited_decode=False)``
or ``decode_region(..., limit_rows=False)``. ``tests/data/test_row_limit.py`` fails when Pillow changes.
"""

from __future__ import annotations

import functools
import io
import warnings

import numpy as np
from PIL import Image

from lightning_efficient.data.decode.jpeg import JpegFrame, jpeg_frame

__all__ = ["limit_jpeg_rows", "row_limit_available", "row_limit_self_test"]

_warned = False


def _has_required_attributes(img: Image.Image) -> bool:
    size_attr = getattr(type(img), "size", None)
    tile = getattr(img, "tile", None)
    return (
        isinstance(size_attr, property)
        and isinstance(vars(img).get("_size"), tuple)
        and isinstance(tile, list)
        and len(tile) == 1
        and len(tuple(tile[0])) == 4
    )


def _shorten(img: Image.Image, buffer: io.BytesIO, frame: JpegFrame, rows: int) -> bool:
    """The trick itself, unguarded (callers: :func:`limit_jpeg_rows` and :func:`row_limit_self_test`)."""
    if rows >= frame.height or not _has_required_attributes(img) or img.size != (frame.width, frame.height):
        return False
    name, extents, offset, args = img.tile[0]
    if tuple(extents) != (0, 0, frame.width, frame.height):
        return False
    old_size, old_tile = img._size, img.tile  # Pillow private: Image.size is a read-only property over _size
    tile = (name, (0, 0, frame.width, rows), offset, args)
    try:
        img._size = (frame.width, rows)
        img.tile = [type(old_tile[0])(*tile) if hasattr(old_tile[0], "_fields") else tile]
        if img.size != (frame.width, rows):
            raise AttributeError("Image.size does not follow Image._size")
    except (AttributeError, TypeError):
        img._size, img.tile = old_size, old_tile
        return False
    with buffer.getbuffer() as view:  # last, once nothing else can fail: the header now says `rows` rows
        view[frame.height_offset : frame.height_offset + 2] = rows.to_bytes(2, "big")
    return True


def row_limit_self_test() -> bool:
    """Decode a small in-memory JPEG (64x48, 4:2:0) with and without the row limit; True when the limited decode
    has the shortened size and the same top rows as the full one. Not cached (see :func:`row_limit_available`)."""
    y, x = np.mgrid[0:48, 0:64]
    pixels = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, "JPEG", quality=90, subsampling=2)
    data = out.getvalue()
    try:
        with Image.open(io.BytesIO(data)) as full_img:
            full = np.asarray(full_img.convert("RGB"))
        frame = jpeg_frame(data)
        if frame is None or frame.mcu_height != 16:
            return False
        buffer = io.BytesIO(data)
        with Image.open(buffer) as img:
            if not _shorten(img, buffer, frame, 32):
                return False
            img.load()
            limited = np.asarray(img.convert("RGB"))
    except Exception:  # noqa: BLE001 - any failure means the trick does not work with this Pillow
        return False
    return limited.shape == (32, 64, 3) and np.array_equal(limited[:16], full[:16])


@functools.lru_cache(maxsize=1)
def row_limit_available() -> bool:
    """Whether the row-limited decode works with the installed Pillow (:func:`row_limit_self_test`, run once per
    process)."""
    return row_limit_self_test()


def limit_jpeg_rows(img: Image.Image, buffer: io.BytesIO, frame: JpegFrame, rows: int) -> bool:
    """Make Pillow/libjpeg decode only the first ``rows`` rows of ``img`` (opened from ``buffer``, not loaded).

    Args:
        img: a JPEG ``PIL.Image`` opened from ``buffer``, not loaded yet.
        buffer: the file's bytes; its frame header is rewritten in place.
        frame: ``jpeg_frame`` of the same bytes.
        rows: image rows to decode (see ``jpeg_rows_needed``).

    Returns:
        True if the decode is now limited; False, with nothing changed, where it does not apply (``rows`` covers
        the image, unusual tiling) or where the installed Pillow no longer supports the trick (then a
        ``RuntimeWarning`` is issued once per process and images are decoded in full).
    """
    if not row_limit_available():
        global _warned
        if not _warned:
            _warned = True
            import PIL

            warnings.warn(
                f"The row-limited JPEG decode does not work with the installed Pillow {PIL.__version__} (it relies "
                "on Pillow's private Image._size and decoder tiles); images are decoded in full, which is correct "
                "but slower. Pass FastImageFolder(row_limited_decode=False) to silence this warning.",
                RuntimeWarning,
                stacklevel=2,
            )
        return False
    return _shorten(img, buffer, frame, rows)
