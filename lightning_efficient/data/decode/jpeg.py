"""JPEG marker parsing and the libjpeg DCT-scale choice: bytes and sizes in, numbers out (no decoding).

Sources: ITU-T T.81 (JPEG) B.1.1.3 marker segments and B.2.2 frame header; libjpeg DCT scaling, which Pillow
exposes as ``Image.draft(mode, size)``: it picks the largest scale ``s`` in {1, 2, 4, 8} with
``stored_size // requested_size >= s`` (``PIL/JpegImagePlugin.py::draft``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["JpegFrame", "jpeg_draft_scale", "jpeg_ends_with_eoi", "jpeg_frame", "jpeg_rows_needed"]

# SOF markers of the DCT processes libjpeg decodes (baseline, extended, progressive, arithmetic); not DHT/DAC/JPG.
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


@dataclass(frozen=True)
class JpegFrame:
    """Where a JPEG's frame header (SOF) says how tall the image is.

    Attributes:
        height_offset: byte offset of the 16-bit big-endian image height in the file.
        width, height: stored image size in pixels.
        mcu_height: rows per MCU row in pixels (8 x the largest vertical sampling factor).
    """

    height_offset: int
    width: int
    height: int
    mcu_height: int


def jpeg_frame(data: bytes | bytearray | memoryview) -> JpegFrame | None:
    """Find the frame header (SOF) of a JPEG by walking its marker segments; ``None`` if it is not a JPEG whose
    SOF comes before the first scan, or if anything looks malformed (the caller then decodes normally).

    Source: ITU-T T.81 (JPEG) B.1.1.3 marker segments, B.2.2 frame header (``P, Y, X, Nf, {C, H|V, Tq}``).
    """
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    i = 2
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # TEM, RSTn: no length
            i += 2
            continue
        if marker in (0xD8, 0xD9, 0xDA):  # SOI again, EOI or a scan before any frame header
            return None
        length = (data[i + 2] << 8) | data[i + 3]
        if length < 2:
            return None
        if marker in _SOF_MARKERS:
            seg = i + 4
            if length < 8 or seg + length - 2 > n:
                return None
            height = (data[seg + 1] << 8) | data[seg + 2]
            width = (data[seg + 3] << 8) | data[seg + 4]
            components = data[seg + 5]
            if height == 0 or width == 0 or components == 0 or length < 8 + 3 * components:
                return None
            v_max = max(data[seg + 6 + 3 * k + 1] & 0x0F for k in range(components))
            if not 1 <= v_max <= 4:
                return None
            return JpegFrame(seg + 1, width, height, 8 * v_max)
        i += 2 + length
    return None


def jpeg_ends_with_eoi(data: bytes | bytearray | memoryview) -> bool:
    """True if the JPEG data ends with its end-of-image marker ``FF D9`` (trailing zero padding allowed).

    In entropy-coded data ``FF`` is always followed by ``00`` or a restart marker, so ``FF D9`` at the end means
    the scan data is complete. Pillow only notices a truncated file when it runs out of data before the last row it
    decodes; a row-limited decode must therefore check completeness itself, or a file cut below the crop would pass
    in one epoch and fail in the next. Files with data after the EOI (e.g. "motion photos") are decoded in full.
    """
    tail = bytes(data[-16:]).rstrip(b"\x00")
    return tail.endswith(b"\xff\xd9")


def jpeg_rows_needed(bottom: float, frame: JpegFrame) -> int:
    """Image rows to decode so that rows ``[0, bottom)`` come out exactly as in a full decode.

    ``bottom`` rounded up to whole MCU rows, plus one MCU row (the chroma upsampling of a row reads the chroma row
    below it, and libjpeg treats the last decoded row as the image edge), capped at the image height.
    """
    mcu = frame.mcu_height
    return min(frame.height, -(-math.ceil(bottom) // mcu) * mcu + mcu)


def jpeg_draft_scale(box_w: float, box_h: float, out_w: int, out_h: int, gap: float = 1.0) -> int:
    """Largest libjpeg DCT scale (1, 2, 4 or 8) at which a crop still covers ``gap`` times the output size.

    Decoding at ``1/s`` shrinks the crop to ``box / s`` pixels; this returns the largest ``s`` in {8, 4, 2, 1} with
    ``box_w / s >= gap * out_w`` and ``box_h / s >= gap * out_h``, so the final resample only downsamples.

    ``gap`` plays the role of Pillow's ``reducing_gap`` (``Image.thumbnail`` uses 2.0): the DCT-scaled decode is
    a little softer/aliased than an antialiased resample, so a gap of 2 keeps the result practically equal to a
    full decode while ``gap=1`` decodes up to 2x fewer pixels per side at a small cost in fidelity (the deviations
    are asserted in ``tests/data/test_fast_image_folder.py``; speed in ``benchmarks/results/decoding.md``, rows
    ``draft=False``).

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
