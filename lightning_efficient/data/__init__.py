"""Cheap CPU image loading: ``FastImageFolder`` and a ``uint8`` collate function."""

from lightning_efficient.data.folder import FastImageFolder, uint8_collate

__all__ = ["FastImageFolder", "uint8_collate"]
