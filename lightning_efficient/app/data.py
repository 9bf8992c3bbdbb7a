"""The demo's data: the checks of ``--data`` (one-line :class:`UsageError` for each mistake) and the offline
fallback, scikit-learn's digits written as an ImageFolder."""

from __future__ import annotations

import os
from pathlib import Path

from lightning_efficient.app.config import UsageError

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMG_EXTENSIONS and p.is_file())


def check_data(root: str | os.PathLike) -> Path:
    """Check that ``root`` is an ImageFolder root with non-empty ``train/`` and ``val/``; returns it.

    Raises:
        UsageError: naming the path and what to do.
    """
    path = Path(root).expanduser()
    if not path.exists():
        raise UsageError(f"{path}: no such folder; pass --data with an ImageFolder root holding train/ and val/.")
    if not path.is_dir():
        raise UsageError(f"{path}: not a folder; pass --data with an ImageFolder root holding train/ and val/.")
    for split in ("train", "val"):
        s = path / split
        if not s.is_dir():
            raise UsageError(f"{s}: missing; --data needs train/ and val/ folders, each with one folder per class.")
        classes = sorted(d for d in s.iterdir() if d.is_dir())
        if not classes:
            raise UsageError(f"{s}: no class folders; put each class's images in {s}/<class name>/.")
        if not any(_image_files(c) for c in classes):
            raise UsageError(
                f"{s}: empty split, no image files ({', '.join(IMG_EXTENSIONS)}) in its class folders; add images."
            )
    train_classes = sorted(d.name for d in (path / "train").iterdir() if d.is_dir())
    val_classes = sorted(d.name for d in (path / "val").iterdir() if d.is_dir())
    if train_classes != val_classes:
        raise UsageError(
            f"{path}: train/ and val/ have different class folders ({len(train_classes)} vs {len(val_classes)});"
            " give both splits the same class folders."
        )
    return path


def check_images(paths: list[str]) -> None:
    """Open and decode every image (at 1/8 scale for JPEG: cheap); raise a one-line UsageError on the first bad one."""
    from PIL import Image

    for p in paths:
        try:
            with Image.open(p) as img:
                img.draft("RGB", (max(1, img.width // 8), max(1, img.height // 8)))
                img.load()
        except Exception as e:  # noqa: BLE001 - any failure to decode is the user's file
            raise UsageError(f"{p}: unreadable image ({type(e).__name__}: {e}); delete or replace the file.") from None


def digits_imagefolder(root: str | os.PathLike, size: int = 32) -> Path:
    """:func:`lightning_efficient.data.digits_imagefolder`, with a missing scikit-learn as a one-line UsageError."""
    from lightning_efficient.data import digits_imagefolder as scanned_digits

    try:
        return scanned_digits(root, size)
    except ModuleNotFoundError as err:
        if err.name != "sklearn":
            raise
        raise UsageError(
            "no --data given, and the fallback data set (digits) needs scikit-learn, which is missing: "
            '`pip install "lightning_efficient[demo]"` (or scikit-learn), '
            "or pass --data with an ImageFolder root holding train/ and val/."
        ) from None
