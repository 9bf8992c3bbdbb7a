"""Image decoding behind :class:`~lightning_efficient.data.FastImageFolder`: one concept per module.

- :mod:`~lightning_efficient.data.decode.flavour`: which PIL is installed (Pillow or Pillow-SIMD) and which resize
  engine ``resize="auto"`` picks.
- :mod:`lightning_efficient.functional.crop`: crop geometry of torchvision's ``RandomResizedCrop`` and
  ``Resize`` + ``CenterCrop`` (re-exported here as :func:`random_resized_crop_box` and :func:`center_crop_box`).
- :mod:`~lightning_efficient.data.decode.orientation`: EXIF orientation (read, box mapping, apply to pixels).
- :mod:`~lightning_efficient.data.decode.jpeg`: the JPEG end-of-image check and the libjpeg DCT-scale choice.
- :mod:`~lightning_efficient.data.decode.region`: open a file, choose the crop from its header, decode only what it
  needs.
- :mod:`~lightning_efficient.data.decode.resize`: the single resample (Pillow or torch ``uint8`` kernels).
- :mod:`~lightning_efficient.data.decode.convert`: pixel modes -> RGB and ``PIL.Image`` -> ``uint8 [3, H, W]``.
- :mod:`~lightning_efficient.data.decode.errors`: :class:`ImageDecodeError`.
- :mod:`~lightning_efficient.data.decode.limits`: the decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``)
  for every backend.

Coordinates: ``(width, height)`` and boxes ``(left, top, right, bottom)`` are in **pixels** of the image as the
viewer sees it (after EXIF orientation), unless a name says ``stored``. Boxes may be fractional.
"""

from __future__ import annotations

from lightning_efficient.data.decode.convert import pil_to_uint8_chw, to_rgb_or_l
from lightning_efficient.data.decode.errors import ImageDecodeError
from lightning_efficient.data.decode.flavour import (
    RESAMPLE,
    TORCH_INTERPOLATIONS,
    is_pillow_simd,
    pil_distribution,
    pil_flavour,
    resolve_resize,
)
from lightning_efficient.data.decode.jpeg import jpeg_draft_scale, jpeg_ends_with_eoi
from lightning_efficient.data.decode.limits import check_pixel_limit
from lightning_efficient.data.decode.orientation import (
    exif_orientation,
    orient_chw,
    orient_pil,
    oriented_to_stored_box,
    stored_size_is_swapped,
)
from lightning_efficient.data.decode.region import Box, DecodedRegion, crop_geometry, decode_region, open_image_bytes
from lightning_efficient.data.decode.resize import (
    decode_crop_resize,
    integer_box,
    resize_region_pil,
    resize_region_uint8,
)
from lightning_efficient.functional.crop import center_crop_box
from lightning_efficient.functional.crop import random_resized_crop_window as random_resized_crop_box

__all__ = [
    "Box",
    "center_crop_box",
    "check_pixel_limit",
    "crop_geometry",
    "decode_crop_resize",
    "decode_region",
    "DecodedRegion",
    "exif_orientation",
    "ImageDecodeError",
    "integer_box",
    "is_pillow_simd",
    "jpeg_draft_scale",
    "jpeg_ends_with_eoi",
    "open_image_bytes",
    "orient_chw",
    "orient_pil",
    "oriented_to_stored_box",
    "pil_distribution",
    "pil_flavour",
    "pil_to_uint8_chw",
    "random_resized_crop_box",
    "RESAMPLE",
    "resize_region_pil",
    "resize_region_uint8",
    "resolve_resize",
    "stored_size_is_swapped",
    "to_rgb_or_l",
    "TORCH_INTERPOLATIONS",
]
