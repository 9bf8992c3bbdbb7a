"""The JPEG end-of-image check and the libjpeg DCT-scale choice: bytes and sizes in, answers out (no decoding).

Sources: ITU-T T.81 (JPEG) B.1.1.3 markers; libjpeg DCT scaling, which Pillow exposes as
``Image.draft(mode, size)``: it picks the largest scale ``s`` in {1, 2, 4, 8} with
``stored_size // requested_size >= s`` (``PIL/JpegImagePlugin.py::draft``).
"""

from __future__ import annotations

__all__ = ["jpeg_draft_scale", "jpeg_ends_with_eoi"]


def jpeg_ends_with_eoi(data: bytes | bytearray | memoryview) -> bool:
    """True if the JPEG data ends with its end-of-image marker ``FF D9`` (trailing zero padding allowed).

    In entropy-coded data ``FF`` is always followed by ``00`` or a restart marker, so ``FF D9`` at the end means
    the scan data is complete. The nvJPEG path checks it in the DataLoader worker, so a truncated file is caught
    there (where ``on_error="skip"`` applies) instead of on the device. Files with data after the EOI (e.g. "motion
    photos") do not end with it.
    """
    tail = bytes(data[-16:]).rstrip(b"\x00")
    return tail.endswith(b"\xff\xd9")


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

    For example, a 2592x1944 photo, centre box 1701x1701, output 112x112: ratio 15.2 -> scale 8 with ``gap=1``
    (decode 324x243), scale 4 with ``gap=2``.
    """
    ratio = min(box_w / out_w, box_h / out_h) / gap
    for s in (8, 4, 2):
        if ratio >= s:
            return s
    return 1
