"""Functional core of FastImageFolder's decode: JPEG frame parsing, row-limited decoding, resize engines.

Row-limited decoding rewrites the JPEG frame height so that libjpeg stops below the crop; these tests check that
the pixels it returns are *identical* to a full decode (every subsampling, progressive, restart markers, grayscale,
CMYK, DCT scales, real photos), and that broken files still fail.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets.folder import default_loader

from lightning_efficient import FastImageFolder
from lightning_efficient.data.decode import (
    decode_region,
    integer_box,
    jpeg_frame,
    jpeg_rows_needed,
    orient_chw,
    pil_flavour,
    random_resized_crop_box,
    resize_region_pil,
    resize_region_uint8,
    resolve_resize,
)
from lightning_efficient.data.decode.orientation import ORIENTATION_TRANSPOSE

from image_helpers import data as _data


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


def _decode_both(path: str, size, box, draft=True):
    """(limited, full) regions for a fixed box given in oriented pixels."""
    choose = lambda w, h: box  # noqa: E731
    return (
        decode_region(path, size, choose, draft=draft, limit_rows=True),
        decode_region(path, size, choose, draft=draft, limit_rows=False),
    )


def _assert_same_pixels(limited, full, path):
    """The limited decode holds exactly the full decode's rows down to the box (and the box resamples equal)."""
    assert limited.box == full.box and limited.scale == full.scale
    rows = limited.image.size[1]
    assert limited.image.size[0] == full.image.size[0] and rows <= full.image.size[1]
    if rows < full.image.size[1]:
        mcu_height = jpeg_frame(Path(path).read_bytes()).mcu_height
        # the last MCU row is decoded as the image edge (chroma replicated), the rows above it are exact
        exact = rows - mcu_height // limited.scale
        assert exact >= math.ceil(full.box[3])  # every row the box touches
    else:
        exact = rows
    assert np.array_equal(np.asarray(limited.image)[:exact], np.asarray(full.image)[:exact])
    assert torch.equal(resize_region_uint8(limited), resize_region_uint8(full))
    assert np.array_equal(np.asarray(resize_region_pil(limited)), np.asarray(resize_region_pil(full)))


# ------------------------------------------------------------------------------------------------ JPEG frame


def test_jpeg_frame_matches_pillow_on_real_files():
    files = sorted(_data("hymenoptera").rglob("*.jpg"))
    imagenette = _data("imagenette", "val")
    files += sorted(imagenette.rglob("*.JPEG"))[::40]
    assert len(files) > 400
    mcu_heights = set()
    for path in files:
        data = path.read_bytes()
        frame = jpeg_frame(data)
        with Image.open(path) as im:
            assert frame is not None, path
            assert (frame.width, frame.height) == im.size, path
            assert int.from_bytes(data[frame.height_offset : frame.height_offset + 2], "big") == im.size[1]
            assert frame.mcu_height in (8, 16, 24, 32)
            mcu_heights.add((im.mode, frame.mcu_height))
    assert ("L", 8) in mcu_heights  # imagenette's grayscale JPEGs: one 8-row block per MCU row


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xd8", b"not a jpeg at all", b"\xff\xd8\xff\xda\x00\x08" + bytes(20), b"\xff\xd8\xff\xe0\x00"],
    ids=["empty", "soi-only", "text", "scan-before-frame", "cut-segment"],
)
def test_jpeg_frame_rejects_what_it_cannot_read(data):
    assert jpeg_frame(data) is None


def test_jpeg_frame_is_none_for_png():
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "PNG")
    assert jpeg_frame(buf.getvalue()) is None


@given(bottom=st.floats(0.5, 999.0), mcu=st.sampled_from([8, 16, 32]), height=st.integers(1, 1000))
def test_rows_needed_covers_bottom_plus_one_mcu_row(bottom, mcu, height):
    from lightning_efficient.data.decode import JpegFrame

    frame = JpegFrame(0, 100, height, mcu)
    rows = jpeg_rows_needed(bottom, frame)
    assert rows <= height
    if rows < height:
        assert rows % mcu == 0 and rows >= bottom + mcu


# ------------------------------------------------------------------------------------- row-limited decoding


@pytest.mark.parametrize(
    "save",
    [
        {"subsampling": 0},  # 4:4:4, 8-row MCUs
        {"subsampling": 1},  # 4:2:2
        {"subsampling": 2},  # 4:2:0, 16-row MCUs
        {"progressive": True},
        {"restart_marker_blocks": 3},  # RSTn markers inside the scan data
        {"progressive": True, "restart_marker_rows": 1},
    ],
    ids=["444", "422", "420", "progressive", "restart-blocks", "progressive-restart-rows"],
)
@pytest.mark.parametrize("draft", [True, False])
def test_limited_decode_equals_full_decode(tmp_path, save, draft):
    path = _jpeg(tmp_path / "x.jpg", _textured(700, 530), **save)
    cut = 0
    for box, out in [
        ((10.0, 0.0, 300.0, 100.0), (64, 64)),  # top strip: most rows skipped
        ((100.0, 200.0, 500.0, 333.0), (48, 96)),  # middle
        ((0.0, 0.0, 700.0, 530.0), (100, 100)),  # whole image: nothing to skip
        ((50.0, 17.0, 650.0, 301.5), (32, 32)),  # fractional bottom, DCT scale 8 when draft
        ((0.0, 500.0, 700.0, 530.0), (10, 200)),  # bottom rows
    ]:
        limited, full = _decode_both(path, out, box, draft=draft)
        _assert_same_pixels(limited, full, path)
        cut += limited.image.size[1] < full.image.size[1]
    assert cut >= 3  # the top strip, the middle and the fractional box stop early


def test_limited_decode_grayscale_and_cmyk(tmp_path):
    gray = _jpeg(tmp_path / "g.jpg", _textured(400, 300).convert("L"))
    cmyk = _jpeg(tmp_path / "c.jpg", _textured(400, 300).convert("CMYK"))
    for path in (gray, cmyk):
        limited, full = _decode_both(path, (40, 40), (20.0, 30.0, 220.0, 120.0), draft=False)
        _assert_same_pixels(limited, full, path)
        assert limited.image.size[1] < 300


def test_limited_decode_with_exif_rotation(tmp_path):
    # stored 530 wide x 700 tall, viewed (orientation 6) 700 x 530: the viewer's top strip is the stored left strip
    exif = Image.Exif()
    exif[0x0112] = 6
    path = _jpeg(tmp_path / "r.jpg", _textured(530, 700), exif=exif)
    for box in [(0.0, 0.0, 700.0, 100.0), (0.0, 400.0, 300.0, 530.0), (300.0, 0.0, 700.0, 530.0)]:
        limited, full = _decode_both(path, (40, 60), box)
        _assert_same_pixels(limited, full, path)


def test_limited_decode_exact_on_real_photos():
    files = sorted(_data("hymenoptera", "val").rglob("*.jpg"))[::7]
    torch.manual_seed(0)
    cut = 0
    for path in files:
        with Image.open(path) as im:
            w, h = im.size
        top, left, bh, bw = random_resized_crop_box(w, h)
        box = (float(left), float(top), float(left + bw), float(top + bh))
        limited, full = _decode_both(str(path), (112, 112), box)
        _assert_same_pixels(limited, full, path)
        cut += limited.image.size[1] < full.image.size[1]
    assert cut >= len(files) // 3  # measured 11 of 22: a random crop often reaches the bottom MCU rows


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_truncated_jpeg_fails_whatever_the_crop(tmp_path, fraction):
    # Pillow itself only notices truncation above the last decoded row; the EOI check keeps this consistent
    data = Path(_jpeg(tmp_path / "full.jpg", _textured(400, 400))).read_bytes()
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(data[: int(len(data) * fraction)])
    for box in [(0.0, 0.0, 100.0, 40.0), (0.0, 0.0, 400.0, 400.0)]:  # even a crop from rows that are all there
        with pytest.raises(OSError, match="truncated"):
            decode_region(str(bad), (32, 32), lambda w, h: box)


def test_data_after_eoi_decodes_in_full(tmp_path):
    path = tmp_path / "motion.jpg"
    _jpeg(path, _textured(300, 300))
    path.write_bytes(path.read_bytes() + b"ftypmp42" + bytes(1000))  # e.g. a video appended after the image
    limited, full = _decode_both(str(path), (32, 32), (0.0, 0.0, 100.0, 50.0))
    assert limited.image.size == full.image.size == (300, 300)  # not row-limited, still decodes


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
