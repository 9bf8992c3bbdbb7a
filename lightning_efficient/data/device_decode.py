"""Batched JPEG decoding on the device (nvJPEG on CUDA) for ``FastImageFolder(backend="nvjpeg")``.

DataLoader workers only read each file and choose its crop from the header (:func:`encode_item`, CPU, cheap); the
main process decodes a whole batch with one ``torchvision.io.decode_jpeg(list_of_bytes, device=...)`` call (nvJPEG
when ``device`` is CUDA) and crops+resizes every image on the device (:func:`decode_batch`). The
:class:`~lightning_efficient.callbacks.GPUDecode` callback calls it for Lightning, after the batch transfer.

Sources: torchvision ``io.decode_jpeg`` (batched, ``device="cuda"`` uses nvJPEG; inputs must be CPU tensors;
no EXIF orientation on CUDA, so it is applied here after the resize); torchvision ``transforms.v2.functional``
``resize`` (antialiased, handles ``uint8`` on CUDA by computing in float and rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from lightning_efficient.data.decode import (
    Box,
    ImageDecodeError,
    crop_geometry,
    integer_box,
    jpeg_ends_with_eoi,
    open_image_bytes,
    orient_chw,
    pil_to_uint8_chw,
    stored_size_is_swapped,
    to_rgb_or_l,
)

__all__ = ["EncodedImage", "EncodedImages", "decode_batch", "encode_item"]

_JPEG_MAGIC = b"\xff\xd8"


@dataclass(frozen=True, repr=False)
class EncodedImage:
    """One image file, not decoded yet, and the crop chosen for it (what ``FastImageFolder(backend="nvjpeg")``
    yields instead of a tensor).

    Attributes:
        data: the file's bytes.
        box: ``(left, top, right, bottom)`` crop in **stored** pixels (before EXIF orientation).
        out_size: ``(width, height)`` to resize the box to, in stored orientation.
        orientation: EXIF orientation 1..8, applied after the resize.
        path: the file, for error messages.
    """

    data: bytes
    box: Box
    out_size: tuple[int, int]
    orientation: int
    path: str

    def __repr__(self) -> str:
        box = tuple(round(v, 1) for v in self.box)
        return (
            f"EncodedImage({self.path!r}, {len(self.data)} bytes, box={box}, out_size={self.out_size}, "
            f"orientation={self.orientation})"
        )


class EncodedImages:
    """A batch of :class:`EncodedImage` (what ``uint8_collate`` makes of them); decode it with :func:`decode_batch`
    or the :class:`~lightning_efficient.callbacks.GPUDecode` callback.

    Deliberately not a ``Sequence``, dataclass or tensor: Lightning's batch transfer, ``pin_memory`` and batch-size
    inference leave it alone, so the bytes stay on the host, where ``decode_jpeg`` wants them. Using it as if it
    were an image tensor raises an error that says what to add.
    """

    def __init__(self, items: Sequence[EncodedImage]) -> None:
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> EncodedImage:
        return self.items[index]

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "items":
            raise AttributeError(name)
        raise AttributeError(
            f"EncodedImages has no attribute {name!r}: this batch holds {len(self.items)} undecoded image files "
            "(FastImageFolder(backend='nvjpeg')). Add GPUDecode() to the Trainer's callbacks, or decode them "
            "yourself: images, targets = batch; images = lightning_efficient.data.decode_batch(images, device)."
        )

    def __repr__(self) -> str:
        return f"EncodedImages({len(self.items)} files, {sum(len(i.data) for i in self.items)} bytes)"


def encode_item(path: str, size: tuple[int, int], choose_box: Callable[[int, int], Box]) -> EncodedImage:
    """Read ``path`` and choose its crop from the header (size, EXIF orientation) without decoding pixels.

    Args:
        path: image file.
        size: output ``(h, w)`` in pixels.
        choose_box: ``(width, height) -> (left, top, right, bottom)`` in oriented pixels.

    Raises:
        OSError, ValueError, SyntaxError, ...: the header cannot be read (the dataset wraps these into
        :class:`ImageDecodeError`).
    """
    with open(path, "rb") as fh:
        data = fh.read()
    with open_image_bytes(data, path) as img:
        orientation, box, out_size = crop_geometry(img, size, choose_box)
        if img.format == "JPEG" and not jpeg_ends_with_eoi(data):
            img.load()  # no end-of-image marker: likely truncated; find out here, where on_error="skip" applies
    return EncodedImage(data, box, out_size, orientation, path)


def _oriented_hw(item: EncodedImage) -> tuple[int, int]:
    """``(h, w)`` of the item after resize and EXIF orientation (``out_size`` is ``(w, h)`` in stored orientation)."""
    w, h = item.out_size
    return (w, h) if stored_size_is_swapped(item.orientation) else (h, w)


def _decode_with_pillow(item: EncodedImage) -> torch.Tensor:
    try:
        with open_image_bytes(item.data, item.path) as img:
            img.load()
            return pil_to_uint8_chw(to_rgb_or_l(img).convert("RGB"))
    except Exception as err:
        raise ImageDecodeError(
            f"{item.path}: cannot decode image ({type(err).__name__}: {err}); delete or replace the file."
        ) from err


def decode_batch(
    batch: EncodedImages | Sequence[EncodedImage],
    device: torch.device | str | None = None,
    interpolation: str = "bilinear",
    cpu_fallbacks: list[str] | None = None,
) -> torch.Tensor:
    """Decode, crop and resize a batch on ``device``: one batched ``decode_jpeg`` call for the JPEGs.

    JPEGs go through ``torchvision.io.decode_jpeg(list, mode=RGB, device=device)`` (nvJPEG on CUDA, libjpeg-turbo
    on CPU); if the batched call fails, each JPEG is retried alone, and what the device decoder rejects (CMYK,
    unusual JPEGs) or what is not a JPEG (PNG, GIF, ...) is decoded by Pillow on the CPU and moved over. Each
    image is then cropped to its box (rounded to whole pixels), resized with antialiasing
    (``transforms.v2.functional.resize``), and turned to its EXIF orientation.

    Args:
        batch: :class:`EncodedImages` or a list of :class:`EncodedImage`, all with the same output size.
        device: where to decode, e.g. ``"cuda"`` (``"cpu"`` works too, without the speed-up); default: ``"cuda"``
            when available, else ``"cpu"``.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"nearest"``.
        cpu_fallbacks: if given, the paths of the images decoded by Pillow on the CPU (not JPEG, or rejected by
            the device decoder) are appended to it.

    Returns:
        ``uint8 [B, 3, H, W]`` on ``device``.

    Raises:
        TypeError: ``batch`` is not a batch of :class:`EncodedImage` (e.g. the whole ``(images, targets)`` pair).
        ValueError: empty batch, or items with different output sizes.
        ImageDecodeError: a file neither the device decoder nor Pillow can decode (the message names it).
    """
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    if isinstance(batch, EncodedImages):
        items = list(batch.items)
    else:
        items = list(batch)
        if any(not isinstance(item, EncodedImage) for item in items):
            kinds = sorted({type(item).__name__ for item in items})
            raise TypeError(
                f"decode_batch takes the encoded images of a batch, got a sequence of {kinds}; with "
                "FastImageFolder(backend='nvjpeg') and uint8_collate a batch is (images, targets): pass "
                "decode_batch(batch[0], device)."
            )
    if not items:
        raise ValueError("decode_batch got an empty batch.")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    sizes = {_oriented_hw(item) for item in items}
    if len(sizes) != 1:
        raise ValueError(
            f"decode_batch: items have different output sizes (h, w) {sorted(sizes)}; use one dataset size."
        )
    device = torch.device(device)
    decoded: list[torch.Tensor | None] = [None] * len(items)
    jpeg = [k for k, item in enumerate(items) if item.data[:2] == _JPEG_MAGIC]
    if jpeg:
        datas = [torch.frombuffer(bytearray(items[k].data), dtype=torch.uint8) for k in jpeg]
        try:
            outs: list[torch.Tensor | None] = list(decode_jpeg(datas, mode=ImageReadMode.RGB, device=device))
        except RuntimeError:  # one file the decoder rejects fails the whole call: retry one by one
            outs = []
            for data in datas:
                try:
                    outs.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    outs.append(None)
        for k, out in zip(jpeg, outs, strict=False):
            decoded[k] = out
    mode = InterpolationMode(interpolation)
    images = []
    for item, image in zip(items, decoded, strict=False):
        if image is None:
            image = _decode_with_pillow(item).to(device, non_blocking=True)
            if cpu_fallbacks is not None:
                cpu_fallbacks.append(item.path)
        height, width = image.shape[-2:]
        left, top, right, bottom = integer_box(item.box, width, height)
        out_w, out_h = item.out_size
        crop = image[:, top:bottom, left:right]
        resized = F.resize(crop, [out_h, out_w], interpolation=mode, antialias=True)
        images.append(orient_chw(resized, item.orientation))
    return torch.stack(images)
