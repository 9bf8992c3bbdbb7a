"""The decompression-bomb limit (Pillow's ``PIL.Image.MAX_IMAGE_PIXELS``), one rule for every backend.

Pillow checks an image's size when it reads the header (``Image.open``), before any pixel is decoded: above
``MAX_IMAGE_PIXELS`` it warns (``PIL.Image.DecompressionBombWarning``), above twice that it raises
``PIL.Image.DecompressionBombError``; ``MAX_IMAGE_PIXELS = None`` turns the check off. ``torchvision.io`` decoders
do not look at the setting. ``FastImageFolder`` therefore opens every file's header with Pillow whatever the
backend (``"pil"`` and ``"nvjpeg"`` always did; ``"torchvision"`` does so before ``decode_image``), and applies
:func:`check_pixel_limit`, the same rule, to the rare file that only torchvision can read (there after decoding,
since no header reader is at hand). The dataset turns the error into an
:class:`~lightning_efficient.data.ImageDecodeError` that names the file.

The limit is read at call time from ``PIL.Image.MAX_IMAGE_PIXELS``: set it in the process that decodes, i.e.
at import time of your training script (DataLoader workers started with ``fork`` inherit it; with ``spawn``
or ``forkserver`` set it in ``worker_init_fn`` too).
"""

from __future__ import annotations

import warnings

from PIL import Image

__all__ = ["check_pixel_limit"]


def check_pixel_limit(size: tuple[int, int], path: str) -> None:
    """Pillow's decompression-bomb rule for an image of ``size = (width, height)`` pixels read from ``path``.

    With ``limit = PIL.Image.MAX_IMAGE_PIXELS`` (read now) and ``pixels = max(1, width) * max(1, height)``:
    nothing if ``limit`` is ``None`` or ``pixels <= limit``; a ``PIL.Image.DecompressionBombWarning`` if
    ``limit < pixels <= 2 * limit``; ``PIL.Image.DecompressionBombError`` if ``pixels > 2 * limit``. These are
    the thresholds of Pillow's own check in ``Image.open``; the messages here also name the file and the fix.

    Args:
        size: ``(width, height)`` in pixels.
        path: the file, for the messages.

    Raises:
        PIL.Image.DecompressionBombError: more than twice ``MAX_IMAGE_PIXELS`` pixels.
    """
    limit = Image.MAX_IMAGE_PIXELS
    if limit is None:
        return
    pixels = max(1, int(size[0])) * max(1, int(size[1]))
    fix = (
        "if the file is trusted, raise the limit (PIL.Image.MAX_IMAGE_PIXELS = <pixels>, or None to turn the "
        "check off) in the process that decodes"
    )
    if pixels > 2 * limit:
        raise Image.DecompressionBombError(
            f"{path}: image size ({pixels} pixels) exceeds limit of {2 * limit} pixels (2 x "
            f"PIL.Image.MAX_IMAGE_PIXELS), could be decompression bomb DOS attack; {fix}."
        )
    if pixels > limit:
        warnings.warn(
            f"{path}: image size ({pixels} pixels) exceeds limit of {limit} pixels (PIL.Image.MAX_IMAGE_PIXELS), "
            f"could be decompression bomb DOS attack; {fix}.",
            Image.DecompressionBombWarning,
            stacklevel=2,
        )
