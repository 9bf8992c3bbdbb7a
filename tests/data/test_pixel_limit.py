"""Pillow's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) holds for every FastImageFolder backend."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from PIL import Image

from lightning_efficient.data import EncodedImage
from lightning_efficient.data import backends as backends_module
from lightning_efficient.data.decode import ImageDecodeError, check_pixel_limit
from lightning_efficient.data.folder import FastImageFolder

pytestmark = pytest.mark.filterwarnings(
    "ignore:The image decoding and encoding capabilities of TorchVision are deprecated:DeprecationWarning"
)

WIDTH, HEIGHT = 64, 48
PIXELS = WIDTH * HEIGHT  # 3072

# (MAX_IMAGE_PIXELS, expected): Pillow warns above the limit and raises above twice the limit; None turns it off.
LIMITS = [
    (None, "ok"),
    (PIXELS, "ok"),  # at the limit
    (PIXELS - 1, "warn"),  # just above 1x
    (PIXELS // 2, "warn"),  # exactly 2x: still a warning
    (PIXELS // 2 - 1, "error"),  # just above 2x
    (100, "error"),
]
BACKENDS = ["pil", "torchvision", "nvjpeg"]
FORMATS = [".jpg", ".png"]


def _folder(root: Path, suffix: str) -> Path:
    (root / "c").mkdir(parents=True)
    Image.new("RGB", (WIDTH, HEIGHT), (200, 30, 60)).save(root / "c" / f"img{suffix}")
    return root


def _load(root: Path, backend: str):
    item, _ = FastImageFolder(root, 16, train=False, backend=backend)[0]
    if backend == "nvjpeg":
        assert isinstance(item, EncodedImage)
    else:
        assert item.dtype == torch.uint8 and item.shape == (3, 16, 16)
    return item


def _check(root: Path, backend: str, expected: str) -> None:
    path = str(root / "c" / next((root / "c").iterdir()).name)
    if expected == "error":
        with pytest.raises(ImageDecodeError) as err:
            _load(root, backend)
        message = str(err.value)
        assert path in message and "DecompressionBombError" in message and "MAX_IMAGE_PIXELS" in message
        assert isinstance(err.value.__cause__, Image.DecompressionBombError)
    elif expected == "warn":
        with pytest.warns(Image.DecompressionBombWarning):
            _load(root, backend)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            _load(root, backend)


@pytest.mark.parametrize(("limit", "expected"), LIMITS)
@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_honours_max_image_pixels(tmp_path, monkeypatch, backend, suffix, limit, expected):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    _check(_folder(tmp_path, suffix), backend, expected)


@pytest.mark.parametrize(("limit", "expected"), LIMITS)
def test_torchvision_only_formats_get_the_same_rule(tmp_path, monkeypatch, limit, expected):
    """A file Pillow cannot identify (e.g. HEIC) but torchvision decodes: the same thresholds, after decoding."""

    def unidentified(data, path):
        raise Image.UnidentifiedImageError(f"cannot identify image file {path!r}")

    monkeypatch.setattr(backends_module, "open_image_bytes", unidentified)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    _check(_folder(tmp_path, ".png"), "torchvision", expected)


@pytest.mark.parametrize(("limit", "expected"), LIMITS)
@pytest.mark.parametrize("size", [(WIDTH, HEIGHT), (HEIGHT, WIDTH), (0, PIXELS), (PIXELS, 1)])
def test_check_pixel_limit_thresholds(monkeypatch, size, limit, expected):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    if expected == "error":
        with pytest.raises(Image.DecompressionBombError, match="x.png.*MAX_IMAGE_PIXELS"):
            check_pixel_limit(size, "x.png")
    elif expected == "warn":
        with pytest.warns(Image.DecompressionBombWarning, match="x.png.*MAX_IMAGE_PIXELS"):
            check_pixel_limit(size, "x.png")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            check_pixel_limit(size, "x.png")
