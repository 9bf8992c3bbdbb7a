"""How ``FastImageFolder`` turns a file into a sample: one small strategy class per ``backend=`` value, chosen
once in ``FastImageFolder.__init__`` by :func:`make_backend`.

Each backend has one method, ``load(path, crop) -> sample``, where ``crop`` is a
:class:`~lightning_efficient.data.crop_choice.CropChoice`; it raises whatever the decoder raises for unreadable
files (the dataset wraps those into :class:`~lightning_efficient.data.ImageDecodeError`).

- :class:`PilBackend` (``"pil"``): Pillow (or Pillow-SIMD) decode of only the crop's region, one resample.
- :class:`TorchvisionBackend` (``"torchvision"``): ``torchvision.io`` decode, ``transforms.v2`` geometry.

Every backend reads the header with Pillow before decoding, so Pillow's decompression-bomb limit
(``PIL.Image.MAX_IMAGE_PIXELS``) applies to all three alike (:mod:`~lightning_efficient.data.decode.limits`).
- :class:`NvjpegBackend` (``"nvjpeg"``): no decode; the file's bytes and its crop, decoded later on the device.

Speed of each: ``benchmarks/results/decoding.md`` (CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from PIL import Image, ImageOps

from lightning_efficient.data.crop_choice import CropChoice
from lightning_efficient.data.decode import region as region_module  # via the module: one place to patch
from lightning_efficient.data.decode.convert import pil_to_uint8_chw, to_rgb_or_l
from lightning_efficient.data.decode.flavour import RESAMPLE, pil_flavour, resolve_resize
from lightning_efficient.data.decode.limits import check_pixel_limit
from lightning_efficient.data.decode.region import open_image_bytes
from lightning_efficient.data.decode.resize import resize_region_pil, resize_region_uint8
from lightning_efficient.data.device_decode import EncodedImage, encode_item

__all__ = ["BACKENDS", "NvjpegBackend", "PilBackend", "TorchvisionBackend", "make_backend"]

#: Interpolations torchvision's tensor resize supports (backends "torchvision" and "nvjpeg").
TENSOR_INTERPOLATIONS: tuple[str, ...] = ("nearest", "bilinear", "bicubic")


@dataclass(frozen=True)
class PilBackend:
    """Pillow decode: header -> crop -> DCT-scaled (``draft``) decode -> one resample -> ``uint8``.

    Attributes:
        interpolation: a key of :data:`~lightning_efficient.data.decode.RESAMPLE`.
        resize_engine: ``"torch"`` or ``"pil"`` (see :func:`~lightning_efficient.data.decode.resolve_resize`).
        draft: allow JPEG DCT-scaled decoding.
        draft_gap: see :func:`~lightning_efficient.data.decode.jpeg_draft_scale`, >= 1.
    """

    interpolation: str = "bilinear"
    resize_engine: str = "torch"
    draft: bool = True
    draft_gap: float = 1.0

    name: ClassVar[str] = "pil"
    interpolations: ClassVar[tuple[str, ...]] = tuple(RESAMPLE)

    def load(self, path: str, crop: CropChoice) -> torch.Tensor:
        """``path`` -> ``uint8 [3, H, W]`` (contiguous, ``(H, W) = crop.size``)."""
        region = region_module.decode_region(path, crop.size, crop.box, self.draft, self.draft_gap)
        if self.resize_engine == "torch":
            return resize_region_uint8(region, self.interpolation)
        return pil_to_uint8_chw(resize_region_pil(region, RESAMPLE[self.interpolation]))

    def describe(self) -> str:
        return f"{pil_flavour()} decode, {self.resize_engine} resize"


@dataclass(frozen=True)
class TorchvisionBackend:
    """``torchvision.io.decode_image`` on the CPU (Pillow for formats it cannot read), then
    ``transforms.v2.functional`` ``resized_crop`` (train) or ``resize`` + ``center_crop`` (eval) on ``uint8`` with
    ``antialias=True``: bit-compatible with a torchvision tensor pipeline; no DCT scaling.

    Attributes:
        interpolation: one of :data:`TENSOR_INTERPOLATIONS`.
    """

    interpolation: str = "bilinear"

    name: ClassVar[str] = "torchvision"
    interpolations: ClassVar[tuple[str, ...]] = TENSOR_INTERPOLATIONS

    def load(self, path: str, crop: CropChoice) -> torch.Tensor:
        """``path`` -> ``uint8 [3, H, W]`` (contiguous, ``(H, W) = crop.size``).

        The header is read with Pillow first, so ``PIL.Image.MAX_IMAGE_PIXELS`` (the decompression-bomb limit)
        applies before anything is decoded, as with the other backends (see
        :mod:`~lightning_efficient.data.decode.limits`).
        """
        from torchvision.io import ImageReadMode, decode_image
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        with open(path, "rb") as fh:
            data = fh.read()
        try:
            header = open_image_bytes(data, path)  # header only; Image.open applies the decompression-bomb limit
        except Image.UnidentifiedImageError:
            header = None  # a format only torchvision reads (e.g. HEIC with its extra libraries): checked below
        try:
            img = decode_image(
                torch.frombuffer(bytearray(data), dtype=torch.uint8),
                mode=ImageReadMode.RGB,
                apply_exif_orientation=True,
            )
        except RuntimeError:
            if header is None:
                raise
            # torchvision.io reads JPEG, PNG, GIF, WebP (AVIF/HEIC with extra libs) only; BMP, TIFF, PPM, ... (in
            # ImageFolder's default extensions) are decoded by Pillow instead; a really corrupt file fails there
            # too and is reported by the dataset.
            img = pil_to_uint8_chw(to_rgb_or_l(ImageOps.exif_transpose(header)))
        finally:
            if header is not None:
                header.close()
        if header is None:
            check_pixel_limit((img.shape[-1], img.shape[-2]), path)
        if img.ndim == 4:  # animated GIF: first frame
            img = img[0]
        if img.dtype != torch.uint8:  # 16-bit PNG decodes to uint16
            img = F.to_dtype(img, torch.uint8, scale=True)
        mode = InterpolationMode(self.interpolation)
        height, width = img.shape[-2:]
        size = list(crop.size)
        if crop.train:
            top, left, h, w = crop.window(width, height)
            out = F.resized_crop(img, top, left, h, w, size, interpolation=mode, antialias=True)
        else:
            out = F.center_crop(F.resize(img, [crop.eval_resize], interpolation=mode, antialias=True), size)
        return out.contiguous()

    def describe(self) -> str:
        return "torchvision.io"


@dataclass(frozen=True)
class NvjpegBackend:
    """No pixels decoded on the CPU: the file's bytes and the crop chosen from its header, as an
    :class:`~lightning_efficient.data.EncodedImage`; ``GPUDecode`` / ``decode_batch`` decode the batch on the
    device (nvJPEG on CUDA).

    Attributes:
        interpolation: one of :data:`TENSOR_INTERPOLATIONS` (used later, by ``GPUDecode``).
    """

    interpolation: str = "bilinear"

    name: ClassVar[str] = "nvjpeg"
    interpolations: ClassVar[tuple[str, ...]] = TENSOR_INTERPOLATIONS

    def load(self, path: str, crop: CropChoice) -> EncodedImage:
        """``path`` -> :class:`~lightning_efficient.data.EncodedImage` (header read; truncated JPEGs detected)."""
        return encode_item(path, crop.size, crop.box)

    def describe(self) -> str:
        return "decoded on the device by GPUDecode"


#: ``backend=`` name -> strategy class.
BACKENDS: dict[str, type[PilBackend | TorchvisionBackend | NvjpegBackend]] = {
    cls.name: cls for cls in (PilBackend, TorchvisionBackend, NvjpegBackend)
}


def make_backend(
    backend: str,
    *,
    interpolation: str = "bilinear",
    resize: str = "auto",
    draft: bool = True,
    draft_gap: float = 1.0,
) -> PilBackend | TorchvisionBackend | NvjpegBackend:
    """The strategy object for ``FastImageFolder(backend=...)``.

    Args:
        backend: a key of :data:`BACKENDS`.
        interpolation: a key of :data:`~lightning_efficient.data.decode.RESAMPLE`; ``"torchvision"`` and
            ``"nvjpeg"`` accept only :data:`TENSOR_INTERPOLATIONS`.
        resize, draft, draft_gap: ``backend="pil"`` only (see :class:`PilBackend`).

    Raises:
        ValueError: unknown ``backend`` or ``interpolation``, an interpolation the backend does not support, or
            ``resize="torch"`` with a Pillow-only interpolation.
    """
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; use one of {tuple(BACKENDS)}.")
    if interpolation not in RESAMPLE:
        raise ValueError(f"Unknown interpolation {interpolation!r}; use one of {tuple(RESAMPLE)}.")
    cls = BACKENDS[backend]
    if interpolation not in cls.interpolations:
        raise ValueError(
            f"interpolation={interpolation!r} is not supported on tensors by torchvision; with "
            f"backend={backend!r} use one of {cls.interpolations}, or use backend='pil'."
        )
    engine = resolve_resize(resize, interpolation)
    if cls is PilBackend:
        return PilBackend(interpolation, engine, bool(draft), float(draft_gap))
    return cls(interpolation)
