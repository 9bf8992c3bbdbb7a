"""Cheap CPU image loading: ``FastImageFolder``, a ``uint8`` collate function, DataLoader settings, and batched
decoding on the device (``backend="nvjpeg"`` + ``decode_batch``), and small real datasets for demos and notebooks
(:mod:`~lightning_efficient.data.samples`)."""

from lightning_efficient.data.decode import ImageDecodeError, is_pillow_simd, pil_flavour
from lightning_efficient.data.device_decode import EncodedImage, EncodedImages, decode_batch
from lightning_efficient.data.folder import FastImageFolder, uint8_collate
from lightning_efficient.data.loader import LoaderSettings, available_cpus, suggest_loader_kwargs
from lightning_efficient.data.samples import balanced_subset, digits_imagefolder, repeated_batch

__all__ = [
    "EncodedImage",
    "EncodedImages",
    "FastImageFolder",
    "ImageDecodeError",
    "LoaderSettings",
    "available_cpus",
    "balanced_subset",
    "decode_batch",
    "digits_imagefolder",
    "is_pillow_simd",
    "pil_flavour",
    "repeated_batch",
    "suggest_loader_kwargs",
    "uint8_collate",
]
