"""The error raised for image files that cannot be decoded."""

from __future__ import annotations

__all__ = ["ImageDecodeError"]


class ImageDecodeError(OSError):
    """An image file could not be opened or decoded (truncated, corrupt, or not an image).

    The message names the file and the fix. Subclass of :class:`OSError`, like Pillow's own decode errors.
    """
