"""Cheap CPU image loading: ``FastImageFolder``, a ``uint8`` collate function, DataLoader settings, and batched
decoding on the device (``backend="nvjpeg"`` + ``decode_batch``)."""

from lightning_efficient.data.decode import ImageDecodeError, pil_flavour
from lightning_efficient.data.device_decode import EncodedImage, EncodedImages, decode_batch
from lightning_efficient.data.folder import FastImageFolder, uint8_collate
from lightning_efficient.data.loader import LoaderSettings, suggest_loader_kwargs

__all__ = ["EncodedImage", "EncodedImages", "FastImageFolder", "ImageDecodeError", "LoaderSettings", "decode_batch",
           "pil_flavour", "suggest_loader_kwargs", "uint8_collate"]
