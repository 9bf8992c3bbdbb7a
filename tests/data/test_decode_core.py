"""Functional core of FastImageFolder's decode: broken files, EXIF orientation, resize engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from image_helpers import data as _data
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets.folder import default_loader

from lightning_efficient import FastImageFolder
from lightning_efficient.data.decode import (
    decode_region,
    integer_box,
    orient_chw,
    pil_flavour,
    resize_region_pil,
    resize_region_uint8,
    resolve_resize,
)
from lightning_efficient.data.decode.orientation import ORIENTATION_TRANSPOSE


def _textured(w: int, h: int, seed: int = 0) -> Image.Image:
    """Smooth gradients plus noise: every block differs, chroma varies (so wrong rows or upsampling would show)."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, w)[None, :]
    y = np.linspace(0, 1, h)[:, None]
    base = np.stack([255 * x * np.ones_like(y), 255 * y * np.ones_like(x), 255 * (1 - x) * y], axis=-1)
    noisy = base + rng.normal(0, 25, base.shape)
    return Image.fromarray(noisy.clip(0, 255).astype(np.uint8), "RGB")


def _jpeg(path: Path, img: Image.Image, **save) -> str:
    img.save(path, "JPEG", quality=90, **save)
    return str(path)


# ----------------------------------------------------------------------------------------------- broken files


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_truncated_jpeg_fails_whatever_the_crop(tmp_path, fraction):
    data = Path(_jpeg(tmp_path / "full.jpg", _textured(400, 400))).read_bytes()
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(data[: int(len(data) * fraction)])
    for box in [(0.0, 0.0, 100.0, 40.0), (0.0, 0.0, 400.0, 400.0)]:  # even a crop from rows that are all there
        with pytest.raises(OSError, match="truncated"):
            decode_region(str(bad), (32, 32), lambda w, h, box=box: box)


def test_data_after_eoi_decodes_in_full(tmp_path):
    path = tmp_path / "motion.jpg"
    _jpeg(path, _textured(300, 300))
    path.write_bytes(path.read_bytes() + b"ftypmp42" + bytes(1000))  # e.g. a video appended after the image
    region = decode_region(str(path), (32, 32), lambda w, h: (0.0, 0.0, 100.0, 50.0), draft=False)
    assert region.image.size == (300, 300)


# ---------------------------------------------------------------------------------------------- orientation


@settings(max_examples=30, deadline=None)
@given(orientation=st.integers(1, 8), w=st.integers(1, 9), h=st.integers(1, 9), channels=st.sampled_from([1, 3]))
def test_orient_chw_matches_pil_transpose(orientation, w, h, channels):
    rng = np.random.default_rng(w * 31 + h * 7 + orientation)
    arr = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
    img = Image.fromarray(arr[:, :, 0] if channels == 1 else arr)
    if orientation in ORIENTATION_TRANSPOSE:
        img = img.transpose(ORIENTATION_TRANSPOSE[orientation])
    expected = np.asarray(img).reshape(img.size[1], img.size[0], channels).transpose(2, 0, 1)
    assert np.array_equal(orient_chw(torch.from_numpy(arr).permute(2, 0, 1), orientation).numpy(), expected)


# ------------------------------------------------------------------------------------------- resize engines


@given(
    w=st.integers(1, 500),
    h=st.integers(1, 500),
    box=st.tuples(*[st.floats(-5, 505, allow_nan=False)] * 4),
)
def test_integer_box_inside_and_within_half_pixel(w, h, box):
    left, top, right, bottom = integer_box(box, w, h)
    assert 0 <= left < right <= w and 0 <= top < bottom <= h
    for edge, value, lo, hi in [(left, box[0], 0, w - 1), (top, box[1], 0, h - 1)]:
        if lo <= value <= hi:
            assert abs(edge - value) <= 0.5


def test_resolve_resize():
    assert resolve_resize("auto", "bilinear", "Pillow 13.0.0") == "torch"
    assert resolve_resize("auto", "bicubic", "Pillow 13.0.0") == "torch"
    assert resolve_resize("auto", "bilinear", "Pillow-SIMD 12.1.1.post0") == "pil"
    assert resolve_resize("auto", "lanczos", "Pillow 13.0.0") == "pil"
    assert resolve_resize("pil", "bilinear", "Pillow 13.0.0") == "pil"
    assert resolve_resize("torch", "bicubic", "Pillow-SIMD 9.5.0.post1") == "torch"
    with pytest.raises(ValueError, match="resize='torch' supports"):
        resolve_resize("torch", "lanczos")
    with pytest.raises(ValueError, match="Unknown resize 'fast'"):
        resolve_resize("fast", "bilinear")


def test_dataset_resize_argument(tmp_path):
    (tmp_path / "a").mkdir()
    _jpeg(tmp_path / "a" / "x.jpg", _textured(200, 150))
    simd = pil_flavour().startswith("Pillow-SIMD")
    assert FastImageFolder(tmp_path, 32).resize_engine == ("pil" if simd else "torch")
    assert FastImageFolder(tmp_path, 32, resize="pil").resize_engine == "pil"
    assert FastImageFolder(tmp_path, 32, interpolation="lanczos").resize_engine == "pil"
    with pytest.raises(ValueError, match="resize='torch' supports"):
        FastImageFolder(tmp_path, 32, resize="torch", interpolation="box")
    assert "resize" in repr(FastImageFolder(tmp_path, 32))


@pytest.mark.parametrize("resize", ["torch", "pil"])
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_both_resize_engines_close_to_torchvision(resize, interpolation):
    root = _data("hymenoptera", "val")
    ds = FastImageFolder(root, 96, train=False, resize=resize, interpolation=interpolation)
    mode = T.InterpolationMode(interpolation)
    ref_tf = T.Compose([T.Resize(ds.eval_resize, interpolation=mode), T.CenterCrop(96), T.PILToTensor()])
    diffs = []
    for i in range(0, len(ds), 12):
        image = ds[i][0]
        assert image.dtype == torch.uint8 and image.shape == (3, 96, 96) and image.is_contiguous()
        diffs.append((image.float() - ref_tf(default_loader(ds.samples[i][0])).float()).abs().mean().item())
    assert max(diffs) < 4 and np.mean(diffs) < 2, diffs


def test_resize_engines_agree_on_a_whole_pixel_box(tmp_path):
    path = _jpeg(tmp_path / "x.jpg", _textured(300, 200), subsampling=0)
    region = decode_region(path, (50, 70), lambda w, h: (20.0, 10.0, 230.0, 160.0), draft=False)
    a = resize_region_uint8(region, "bilinear")
    b = torch.from_numpy(np.asarray(resize_region_pil(region)).copy()).permute(2, 0, 1)
    assert a.shape == b.shape == (3, 50, 70)
    assert (a.float() - b.float()).abs().mean() < 1.0  # same antialiased bilinear filter, different rounding
