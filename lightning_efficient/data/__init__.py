"""Cheap CPU image loading: ``FastImageFolder``, a ``uint8`` collate function, DataLoader settings."""

from lightning_efficient.data.decode import ImageDecodeError, pil_flavour
from lightning_efficient.data.folder import FastImageFolder, uint8_collate
from lightning_efficient.data.loader import LoaderSettings, suggest_loader_kwargs

__all__ = ["FastImageFolder", "ImageDecodeError", "LoaderSettings", "pil_flavour", "suggest_loader_kwargs",
           "uint8_collate"]
