"""FastImageFolder / uint8_collate / loader settings: real files, real decodes, no timing."""

from __future__ import annotations

import functools
import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from image_helpers import data as _data
from image_helpers import gradient_image as _gradient_image
from image_helpers import mad as _mad
from PIL import Image, ImageOps, features
from torch.utils.data import DataLoader
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader

from lightning_efficient.data.decode import (
    ImageDecodeError,
    center_crop_box,
    decode_crop_resize,
    jpeg_draft_scale,
    oriented_to_stored_box,
    pil_flavour,
    random_resized_crop_box,
)
from lightning_efficient.data.folder import FastImageFolder, uint8_collate
from lightning_efficient.data.loader import suggest_loader_kwargs

pytestmark = pytest.mark.filterwarnings(
    "ignore:The image decoding and encoding capabilities of TorchVision are deprecated:DeprecationWarning"
)


def _to_uint8(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.uint8).copy()).permute(2, 0, 1)


def _make_class_tree(root: Path, files: dict[str, Image.Image | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            kwargs = {"quality": 95} if path.suffix.lower() in (".jpg", ".jpeg") else {}
            content.save(path, **kwargs)
    return root


# --------------------------------------------------------------------------------------------- drop-in equality


@pytest.mark.parametrize("split", [("hymenoptera", "train"), ("hymenoptera", "val"), ("imagenette", "val")])
def test_same_classes_samples_targets_as_imagefolder(split):
    root = _data(*split)
    ours, ref = FastImageFolder(root, 64), ImageFolder(root)
    assert isinstance(ours, ImageFolder)
    assert ours.classes == ref.classes
    assert ours.class_to_idx == ref.class_to_idx
    assert ours.samples == ref.samples
    assert ours.imgs == ref.imgs
    assert ours.targets == ref.targets
    assert len(ours) == len(ref)


def test_gif_excluded_by_default_and_included_with_extensions():
    root = _data("hymenoptera", "train")
    gif = str(root / "ants" / "imageNotFound.gif")
    assert gif not in [p for p, _ in FastImageFolder(root, 32).samples]
    ds = FastImageFolder(root, 48, train=False, extensions=IMG_EXTENSIONS + (".gif",))
    idx = [p for p, _ in ds.samples].index(gif)
    image, target = ds[idx]
    assert image.dtype == torch.uint8 and image.shape == (3, 48, 48)
    assert target == ds.class_to_idx["ants"]
    ref = T.Compose([T.Resize(ds.eval_resize), T.CenterCrop(48), T.PILToTensor()])(default_loader(gif))
    assert _mad(image, ref) < 8
    tv = FastImageFolder(
        root, 48, train=False, backend="torchvision", is_valid_file=lambda p: p.endswith(".gif"), allow_empty=True
    )
    assert len(tv) == 1
    assert _mad(tv[0][0], ref) < 8


# ------------------------------------------------------------------------------------------- outputs and modes


@pytest.mark.parametrize("backend", ["pil", "torchvision"])
@pytest.mark.parametrize("train", [True, False])
def test_outputs_are_uint8_fixed_size(backend, train):
    root = _data("hymenoptera", "val")
    ds = FastImageFolder(root, (48, 64), train=train, backend=backend)
    for i in range(0, len(ds), 25):
        image, target = ds[i]
        assert image.dtype == torch.uint8
        assert image.shape == (3, 48, 64)
        assert image.is_contiguous()
        assert target == ds.targets[i]
        assert image.float().std() > 0  # real content, not a blank


def test_eval_deterministic_and_close_to_torchvision_resize_centercrop():
    root = _data("hymenoptera", "val")
    size = 112
    ds = FastImageFolder(root, size, train=False)
    ref_tf = T.Compose([T.Resize(ds.eval_resize), T.CenterCrop(size), T.PILToTensor()])
    diffs = []
    for i in range(0, len(ds), 10):
        a, _ = ds[i]
        torch.manual_seed(i)  # eval must not depend on the RNG
        b, _ = ds[i]
        assert torch.equal(a, b)
        ref = ref_tf(default_loader(ds.samples[i][0]))
        diffs.append(_mad(a, ref))
    assert max(diffs) < 4, diffs  # measured: 0.5 .. 1.7 on 0..255
    assert np.mean(diffs) < 2, diffs


def test_eval_close_to_torchvision_on_imagenette_including_grayscale():
    root = _data("imagenette", "val")
    ds = FastImageFolder(root, 96, train=False)
    ref_tf = T.Compose([T.Resize(ds.eval_resize), T.CenterCrop(96), T.PILToTensor()])
    grey = []
    for path, _ in ds.samples:  # the README says 242 imagenette JPEGs are grayscale; the first is early in val
        with Image.open(path) as im:
            if im.mode == "L":
                grey.append(path)
        if len(grey) == 3:
            break
    assert grey, "expected grayscale JPEGs in imagenette/val"
    paths = [p for p, _ in ds.samples[:: len(ds) // 15]] + grey
    for path in paths:
        image = ds.load_image(path)
        assert image.dtype == torch.uint8 and image.shape == (3, 96, 96)
        assert _mad(image, ref_tf(default_loader(path))) < 4
    for path in grey:
        image = ds.load_image(path)
        assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])


def test_pil_and_torchvision_backends_agree_in_eval():
    root = _data("hymenoptera", "val")
    pil = FastImageFolder(root, 80, train=False)
    tv = FastImageFolder(root, 80, train=False, backend="torchvision")
    for i in range(0, len(pil), 30):
        assert _mad(pil[i][0], tv[i][0]) < 8


def test_train_crop_reproducible_and_same_window_as_torchvision():
    root = _data("hymenoptera", "train")
    ds = FastImageFolder(root, 64, train=True)
    rrc = T.Compose([T.RandomResizedCrop(64), T.PILToTensor()])
    diffs = []
    for i in range(0, len(ds), 20):
        torch.manual_seed(1000 + i)
        a, _ = ds[i]
        torch.manual_seed(1000 + i)
        b, _ = ds[i]
        assert torch.equal(a, b)
        torch.manual_seed(1000 + i)
        ref = rrc(default_loader(ds.samples[i][0]))
        diffs.append(_mad(a, ref))
    assert max(diffs) < 6, diffs  # measured: 0.04 .. 2.9; a different window gives ~25
    assert np.mean(diffs) < 2.5, diffs
    torch.manual_seed(1)
    c, _ = ds[0]
    torch.manual_seed(2)
    d, _ = ds[0]
    assert not torch.equal(c, d)


def test_transform_and_target_transform_honoured():
    root = _data("hymenoptera", "val")
    ds = FastImageFolder(root, 32, train=False, transform=lambda x: x.flip(-1), target_transform=lambda t: f"class{t}")
    plain = FastImageFolder(root, 32, train=False)
    image, target = ds[0]
    assert target == f"class{plain.targets[0]}"
    assert torch.equal(image, plain[0][0].flip(-1))


# --------------------------------------------------------------------------------- crop geometry (pure functions)


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(1, 3000),
    height=st.integers(1, 3000),
    smin=st.floats(0.01, 1.0),
    rlo=st.floats(0.2, 1.0),
    rhi=st.floats(1.0, 5.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_box_matches_torchvision_get_params(width, height, smin, rlo, rhi, seed):
    torch.manual_seed(seed)
    ours = random_resized_crop_box(width, height, (smin, 1.0), (rlo, rhi))
    torch.manual_seed(seed)
    ref = T.RandomResizedCrop.get_params(torch.empty(1, height, width), [smin, 1.0], [rlo, rhi])
    assert ours == ref
    top, left, h, w = ours
    assert 0 <= top and top + h <= height and 0 <= left and left + w <= width and h > 0 and w > 0


@settings(max_examples=60, deadline=None)
@given(width=st.integers(8, 4000), height=st.integers(8, 4000), out=st.integers(1, 300), extra=st.integers(0, 100))
def test_center_box_inside_image_and_centred(width, height, out, extra):
    out = min(out, width, height)
    box = center_crop_box(width, height, (out, out), out + extra)
    left, top, right, bottom = box
    assert -1e-9 <= left <= right <= width + 1e-9 and -1e-9 <= top <= bottom <= height + 1e-9
    # centred to within one resized pixel
    assert abs((left + right) / 2 - width / 2) <= width / (out + extra) + 1e-6
    assert abs((top + bottom) / 2 - height / 2) <= height / (out + extra) + 1e-6


def test_draft_scale_choice():
    # 2592x1944 photo, eval at 112: the 1701-px centre box covers 112 px even at 1/8 scale
    box = center_crop_box(2592, 1944, (112, 112), 128)
    assert jpeg_draft_scale(box[2] - box[0], box[3] - box[1], 112, 112) == 8
    assert jpeg_draft_scale(1944, 1944, 112, 112) == 8
    assert jpeg_draft_scale(1000, 1000, 224, 224) == 4
    assert jpeg_draft_scale(500, 500, 224, 224) == 2
    assert jpeg_draft_scale(447, 447, 224, 224) == 1  # 447 / 2 < 224: decoding at 1/2 would upsample
    assert jpeg_draft_scale(4000, 300, 224, 224) == 1  # the short side decides
    # gap=2 (Pillow's reducing_gap idea): the scaled crop must still be twice the output size
    assert jpeg_draft_scale(box[2] - box[0], box[3] - box[1], 112, 112, gap=2.0) == 4
    assert jpeg_draft_scale(500, 500, 224, 224, gap=2.0) == 1


@settings(max_examples=100, deadline=None)
@given(
    bw=st.floats(1, 5000), bh=st.floats(1, 5000), ow=st.integers(1, 600), oh=st.integers(1, 600), gap=st.floats(1, 3)
)
def test_draft_scale_is_largest_that_covers(bw, bh, ow, oh, gap):
    s = jpeg_draft_scale(bw, bh, ow, oh, gap)
    assert s in (1, 2, 4, 8)
    if s > 1:
        assert bw / s >= gap * ow and bh / s >= gap * oh
    if s < 8:
        assert bw / (2 * s) < gap * ow or bh / (2 * s) < gap * oh


def _resize_spy(monkeypatch) -> list[tuple[int, int]]:
    """Record the size every image was decoded at (the image both resize engines resample from)."""
    import lightning_efficient.data.decode.region as region_mod  # every caller looks decode_region up here

    seen: list[tuple[int, int]] = []
    original = region_mod.decode_region

    def spy(*args, **kwargs):
        region = original(*args, **kwargs)
        seen.append(region.image.size)
        return region

    monkeypatch.setattr(region_mod, "decode_region", spy)
    return seen


def test_draft_decodes_real_2592x1944_photo_at_one_eighth(monkeypatch):
    root = _data("hymenoptera", "val")
    sizes = {}
    for path, _ in FastImageFolder(root, 32).samples:
        with Image.open(path) as im:
            sizes[path] = im.size
    path = max(sizes, key=lambda p: sizes[p][0] * sizes[p][1])
    if sizes[path] != (2592, 1944):
        pytest.skip(f"expected a 2592x1944 photo in {root}, largest is {sizes[path]}")
    seen = _resize_spy(monkeypatch)
    drafted = FastImageFolder(root, 112, train=False, draft_gap=1.0).load_image(path)
    # 1/8 DCT scale: 64x fewer pixels decoded
    assert seen == [(324, 243)]
    seen.clear()
    near_lossless = FastImageFolder(root, 112, train=False).load_image(path)  # eval default draft_gap=2
    assert seen == [(648, 486)]  # 1/4 scale
    seen.clear()
    full = FastImageFolder(root, 112, train=False, draft=False).load_image(path)
    assert seen == [(2592, 1944)]
    assert _mad(drafted, full) < 3
    assert _mad(near_lossless, full) < 1
    ref = T.Compose([T.Resize(128), T.CenterCrop(112), T.PILToTensor()])(default_loader(path))
    assert _mad(drafted, ref) < 4
    assert _mad(near_lossless, ref) < 1
    # train: the decode scale follows the drawn crop (never below the output size)
    seen.clear()
    tr = FastImageFolder(root, 112, train=True)
    for seed in range(5):
        torch.manual_seed(seed)
        top, left, h, w = random_resized_crop_box(2592, 1944)
        s = jpeg_draft_scale(w, h, 112, 112)
        torch.manual_seed(seed)
        tr.load_image(path)
        assert seen[-1][0] == -(-2592 // s) and (top + h) / s <= seen[-1][1] <= -(-1944 // s)
        assert min(w, h) / s >= 112


def test_draft_really_decodes_smaller(tmp_path, monkeypatch):
    path = tmp_path / "big.jpg"
    _gradient_image(2592, 1944).save(path, quality=90)
    seen = _resize_spy(monkeypatch)
    box = functools.partial(center_crop_box, size=(112, 112), resize_shorter=128)
    drafted = decode_crop_resize(str(path), (112, 112), lambda w, h: box(w, h))
    assert len(seen) == 1 and seen[0][0] == 324 and seen[0][1] <= 243  # 1/8 DCT scale
    seen.clear()
    full = decode_crop_resize(str(path), (112, 112), lambda w, h: box(w, h), draft=False)
    assert len(seen) == 1 and seen[0][0] == 2592 and seen[0][1] <= 1944
    assert drafted.size == full.size == (112, 112)
    assert _mad(_to_uint8(drafted), _to_uint8(full)) < 3


# ---------------------------------------------------------------------------------------------- EXIF orientation

_INVERSE = {  # transpose that makes the stored image from the oriented one
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def _save_oriented(path: Path, oriented: Image.Image, orientation: int) -> None:
    stored = oriented if _INVERSE[orientation] is None else oriented.transpose(_INVERSE[orientation])
    exif = Image.Exif()
    exif[0x0112] = orientation
    stored.save(path, quality=95, exif=exif)


@settings(max_examples=40, deadline=None)
@given(
    orientation=st.integers(1, 8),
    w=st.integers(2, 12),
    h=st.integers(2, 12),
    data=st.data(),
)
def test_oriented_box_maps_to_same_pixels(orientation, w, h, data):
    rng = np.random.default_rng(w * 100 + h)
    oriented = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8), "RGB")
    stored = oriented if _INVERSE[orientation] is None else oriented.transpose(_INVERSE[orientation])
    left = data.draw(st.integers(0, w - 1))
    top = data.draw(st.integers(0, h - 1))
    right = data.draw(st.integers(left + 1, w))
    bottom = data.draw(st.integers(top + 1, h))
    sbox = oriented_to_stored_box((left, top, right, bottom), orientation, stored.size)
    crop = stored.crop(tuple(int(round(v)) for v in sbox))
    fix = {
        2: Image.Transpose.FLIP_LEFT_RIGHT,
        3: Image.Transpose.ROTATE_180,
        4: Image.Transpose.FLIP_TOP_BOTTOM,
        5: Image.Transpose.TRANSPOSE,
        6: Image.Transpose.ROTATE_270,
        7: Image.Transpose.TRANSVERSE,
        8: Image.Transpose.ROTATE_90,
    }.get(orientation)
    if fix is not None:
        crop = crop.transpose(fix)
    assert np.array_equal(np.asarray(crop), np.asarray(oriented.crop((left, top, right, bottom))))


def test_exif_orientation_6_red_left_blue_right(tmp_path):
    oriented = Image.new("RGB", (80, 40), (255, 0, 0))
    oriented.paste((0, 0, 255), (40, 0, 80, 40))  # left half red, right half blue (as the viewer sees it)
    (tmp_path / "a").mkdir()
    _save_oriented(tmp_path / "a" / "rot.jpg", oriented, 6)
    with Image.open(tmp_path / "a" / "rot.jpg") as raw:
        assert raw.size == (40, 80)  # stored portrait
    ds = FastImageFolder(tmp_path, (20, 40), train=False, eval_resize=40)
    image, _ = ds[0]
    assert image.shape == (3, 20, 40)
    left, right = image[:, :, :16].float().mean((1, 2)), image[:, :, 24:].float().mean((1, 2))
    assert left[0] > 200 and left[2] < 50, left
    assert right[2] > 200 and right[0] < 50, right
    tv = FastImageFolder(tmp_path, (20, 40), train=False, eval_resize=40, backend="torchvision")
    assert _mad(tv[0][0], image) < 8
    # train mode with a crop that must be the whole (landscape) image: scale 1, aspect 2 = 80 / 40
    tr = FastImageFolder(tmp_path, (20, 40), train=True, scale=(1.0, 1.0), ratio=(2.0, 2.0))
    image = tr[0][0]
    left, right = image[:, :, :16].float().mean((1, 2)), image[:, :, 24:].float().mean((1, 2))
    assert left[0] > 200 and left[2] < 50 and right[2] > 200 and right[0] < 50, (left, right)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_matches_exif_transpose(tmp_path, monkeypatch, orientation):
    # 960x640 so that draft (DCT scaling) is used together with the transpose in both modes
    oriented = _gradient_image(960, 640)
    seen = _resize_spy(monkeypatch)
    (tmp_path / "a").mkdir()
    _save_oriented(tmp_path / "a" / "x.jpg", oriented, orientation)
    (tmp_path / "b").mkdir()
    oriented.save(tmp_path / "b" / "y.jpg", quality=95)
    ev = FastImageFolder(tmp_path, (40, 56), train=False)
    image = ev[0][0]
    stored = (640, 960) if orientation >= 5 else (960, 640)
    assert len(seen) == 1 and seen[0][0] < stored[0] and seen[0][1] < stored[1]  # DCT-scaled, stored orientation
    assert seen[0][0] * 4 >= stored[0]  # at most 1/4 (the height is also cut below the crop: not checked here)
    ref = ImageOps.exif_transpose(Image.open(tmp_path / "a" / "x.jpg")).convert("RGB")
    ref_t = T.Compose([T.Resize(ev.eval_resize), T.CenterCrop((40, 56)), T.PILToTensor()])(ref)
    assert _mad(image, ref_t) < 3
    # train: the same seed picks the same window in viewer coordinates whatever the stored orientation
    tr = FastImageFolder(tmp_path, (40, 56), train=True, scale=(0.3, 0.6))
    for seed in range(3):
        torch.manual_seed(seed)
        a = tr[0][0]
        torch.manual_seed(seed)
        b = tr[1][0]
        assert _mad(a, b) < 3


# ---------------------------------------------------------------------------------------- modes and file formats


def _solid(mode: str, size=(60, 40)) -> Image.Image:
    rgb = Image.new("RGB", size, (200, 30, 60))
    if mode == "P":
        return rgb.convert("P")
    if mode == "P_transparent":
        p = rgb.convert("P")
        p.info["transparency"] = 0
        return p
    if mode == "L":
        return Image.new("L", size, 128)
    if mode == "LA":
        return Image.new("LA", size, (128, 100))
    if mode == "RGBA":
        return Image.new("RGBA", size, (200, 30, 60, 90))
    if mode == "CMYK":
        return Image.new("CMYK", size, (0, 255, 255, 0))  # pure red in naive CMYK
    if mode == "I;16":
        return Image.fromarray(np.full(size[::-1], 200 * 257, dtype=np.uint16))  # 16-bit grey, 200 in 8 bits
    return rgb


@pytest.mark.parametrize(
    ("mode", "suffix", "expected"),
    [
        ("L", ".jpg", (128, 128, 128)),
        ("L", ".png", (128, 128, 128)),
        ("CMYK", ".jpg", (255, 0, 0)),
        ("P", ".png", (200, 30, 60)),
        ("P", ".gif", (200, 30, 60)),
        ("P_transparent", ".png", (200, 30, 60)),
        ("RGBA", ".png", (200, 30, 60)),
        ("LA", ".png", (128, 128, 128)),
        ("RGB", ".png", (200, 30, 60)),
        ("I;16", ".png", (200, 200, 200)),  # Pillow's convert("RGB") would clip this to white
        ("RGB", ".tif", (200, 30, 60)),  # not readable by torchvision.io: falls back to Pillow
        ("RGB", ".bmp", (200, 30, 60)),
        ("RGB", ".webp", (200, 30, 60)),
    ],
)
@pytest.mark.parametrize("backend", ["pil", "torchvision"])
@pytest.mark.parametrize("train", [True, False])
def test_modes_become_rgb(tmp_path, mode, suffix, expected, backend, train):
    if suffix == ".webp" and not features.check("webp"):
        pytest.skip("this Pillow build has no WebP support")
    _make_class_tree(tmp_path, {f"c/img{suffix}": _solid(mode)})
    ds = FastImageFolder(tmp_path, 24, train=train, backend=backend, extensions=(suffix,))
    image, _ = ds[0]
    assert image.dtype == torch.uint8 and image.shape == (3, 24, 24)
    got = image.float().mean((1, 2))
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float32), atol=6), (mode, suffix, got)


# --------------------------------------------------------------------------------------------- corrupt files


def _real_jpeg_bytes() -> bytes:
    root = _data("hymenoptera", "val")
    return next(p for p in sorted((root / "ants").iterdir()) if p.suffix == ".jpg").read_bytes()


@pytest.mark.parametrize("backend", ["pil", "torchvision"])
@pytest.mark.parametrize("kind", ["truncated", "text"])
def test_corrupt_file_raises_naming_file(tmp_path, backend, kind):
    content = _real_jpeg_bytes()[: len(_real_jpeg_bytes()) // 2] if kind == "truncated" else b"not an image\n"
    _make_class_tree(tmp_path, {"c/bad.jpg": content})
    ds = FastImageFolder(tmp_path, 32, backend=backend)
    with pytest.raises(ImageDecodeError) as err:
        ds[0]
    assert isinstance(err.value, OSError)
    message = str(err.value)
    assert str(tmp_path / "c" / "bad.jpg") in message
    assert "on_error='skip'" in message and "delete or replace" in message
    assert "BytesIO" not in message  # Pillow's "cannot identify" names the file, not the in-memory buffer


def test_skip_mode_warns_once_counts_and_returns_next(tmp_path):
    good = Image.open(io.BytesIO(_real_jpeg_bytes()))
    half = _real_jpeg_bytes()[: len(_real_jpeg_bytes()) // 2]
    root = _make_class_tree(
        tmp_path,
        {"a/1_bad.jpg": half, "a/2_good.jpg": good, "b/1_bad.jpg": b"text", "b/2_good.jpg": good.rotate(90)},
    )
    ds = FastImageFolder(root, 32, train=False, on_error="skip")
    with pytest.warns(UserWarning, match="skipped an unreadable file") as record:
        items = [ds[i] for i in range(len(ds))]
    assert len([w for w in record if "skipped" in str(w.message)]) == 1
    assert ds.num_skipped == 2
    assert sorted(Path(p).name for p in ds.skipped_files) == ["1_bad.jpg", "1_bad.jpg"]
    # bad item 0 -> good item 1 (class a); bad item 2 -> good item 3 (class b)
    assert [t for _, t in items] == [0, 0, 1, 1]
    assert torch.equal(items[0][0], items[1][0]) and torch.equal(items[2][0], items[3][0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        ds[0]
    assert ds.num_skipped == 2


def test_skip_mode_all_bad_raises(tmp_path):
    root = _make_class_tree(tmp_path, {"a/x.jpg": b"nope", "b/y.png": b"nope"})
    ds = FastImageFolder(root, 32, on_error="skip")
    with pytest.warns(UserWarning), pytest.raises(ImageDecodeError, match="none of the 2 files"):
        ds[0]


def test_corrupt_file_error_surfaces_from_worker(tmp_path):
    root = _make_class_tree(tmp_path, {"c/bad.jpg": b"text"})
    loader = DataLoader(FastImageFolder(root, 32), batch_size=1, num_workers=1, collate_fn=uint8_collate)
    with pytest.raises(ImageDecodeError, match="bad.jpg"):
        next(iter(loader))


# -------------------------------------------------------------------------------------------------- collate


def test_dataloader_two_workers_channels_last_batches():
    root = _data("hymenoptera", "val")
    ds = FastImageFolder(root, 64, train=False)
    loader = DataLoader(
        ds, batch_size=16, num_workers=2, collate_fn=functools.partial(uint8_collate, channels_last=True)
    )
    it = iter(loader)
    for b in range(3):
        images, targets = next(it)
        assert images.dtype == torch.uint8 and images.shape == (16, 3, 64, 64)
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert targets.dtype == torch.int64 and targets.tolist() == ds.targets[16 * b : 16 * (b + 1)]
        expected = torch.stack([ds[i][0] for i in range(16 * b, 16 * (b + 1))])
        assert torch.equal(images, expected)
    del it


def test_dataloader_two_workers_train_mode_seeded():
    root = _data("hymenoptera", "train")
    ds = FastImageFolder(root, 48, train=True)
    batches = []
    for _ in range(2):
        torch.manual_seed(7)
        loader = DataLoader(ds, batch_size=8, num_workers=2, shuffle=True, collate_fn=uint8_collate)
        images, targets = next(iter(loader))
        assert images.dtype == torch.uint8 and images.shape == (8, 3, 48, 48) and images.is_contiguous()
        batches.append((images, targets))
    assert torch.equal(batches[0][0], batches[1][0]) and torch.equal(batches[0][1], batches[1][1])


def test_uint8_collate_layouts_and_errors():
    batch = [(torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8), i) for i in range(4)]
    images, targets = uint8_collate(batch)
    assert images.shape == (4, 3, 5, 7) and images.is_contiguous() and images.dtype == torch.uint8
    assert targets.dtype == torch.int64 and targets.tolist() == [0, 1, 2, 3]
    cl, _ = uint8_collate(batch, channels_last=True)
    assert cl.is_contiguous(memory_format=torch.channels_last) and torch.equal(cl, images)
    _, t2 = uint8_collate([(im, torch.tensor(t)) for im, t in batch])
    assert t2.dtype == torch.int64 and t2.tolist() == [0, 1, 2, 3]
    _, t3 = uint8_collate([(im, float(t)) for im, t in batch])  # non-int targets: default_collate
    assert t3.dtype == torch.float64
    with pytest.raises(ValueError, match="differ in size"):
        uint8_collate([batch[0], (torch.zeros(3, 6, 7, dtype=torch.uint8), 1)])
    with pytest.raises(TypeError, match="torch.uint8"):
        uint8_collate([(torch.zeros(3, 5, 7), 0)])
    with pytest.raises(ValueError, match="empty"):
        uint8_collate([])
    with pytest.raises(ValueError, match="pairs"):
        uint8_collate([batch[0][0]])


# ------------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"size": 0}, ValueError, "positive"),
        ({"size": (224, -1)}, ValueError, "positive"),
        ({"size": (1, 2, 3)}, TypeError, "height, width"),
        ({"size": True}, TypeError, "positive int"),
        ({"size": 22.4}, TypeError, "positive int"),
        ({"scale": (0.5, 0.1)}, ValueError, "scale"),
        ({"scale": (0.0, 1.0)}, ValueError, "scale"),
        ({"scale": (0.5, 1.5)}, ValueError, "scale"),
        ({"ratio": (-1.0, 2.0)}, ValueError, "ratio"),
        ({"ratio": "wide"}, TypeError, "ratio"),
        ({"backend": "opencv"}, ValueError, "Unknown backend"),
        ({"interpolation": "cubic"}, ValueError, "Unknown interpolation"),
        ({"interpolation": "lanczos", "backend": "torchvision"}, ValueError, "backend='pil'"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"draft_gap": 0.5}, ValueError, "draft_gap"),
        ({"size": 224, "eval_resize": 200}, ValueError, "eval_resize"),
        ({"extensions": (".jpg",), "is_valid_file": bool}, ValueError, "not both"),
    ],
)
def test_argument_validation(tmp_path, kwargs, exc, match):
    _make_class_tree(tmp_path, {"c/x.png": _solid("RGB")})
    with pytest.raises(exc, match=match):
        FastImageFolder(tmp_path, **kwargs)


def test_root_errors_name_path_and_fix(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="does not exist") as err:
        FastImageFolder(missing)
    assert str(missing) in str(err.value)
    flat = _make_class_tree(tmp_path / "flat", {"x.png": _solid("RGB")})
    with pytest.raises(FileNotFoundError, match="no class folders") as err:
        FastImageFolder(flat)
    assert str(flat) in str(err.value)
    empty_class = tmp_path / "empty"
    _make_class_tree(empty_class, {"a/x.png": _solid("RGB"), "b/readme.txt": b"hi"})
    with pytest.raises(FileNotFoundError, match="allow_empty=True") as err:
        FastImageFolder(empty_class)
    assert str(empty_class) in str(err.value) and "b" in str(err.value)
    assert len(FastImageFolder(empty_class, allow_empty=True)) == 1
    all_empty = tmp_path / "allempty"
    _make_class_tree(all_empty, {"a/readme.txt": b"hi"})
    with pytest.raises(FileNotFoundError, match="no image files") as err:
        FastImageFolder(all_empty, allow_empty=True)
    assert str(all_empty) in str(err.value)


@pytest.mark.parametrize(
    "classes",
    [
        ("train", "val"),
        ("train", "test"),
        ("Train", "Valid"),
        ("training", "validation", "testing"),
        ("val",),
        ("train", "val", "test"),
    ],
)
def test_split_folders_as_classes_warn_naming_the_split(tmp_path, classes):
    root = _make_class_tree(tmp_path / "dataset", {f"{c}/x/{i}.png": _solid("RGB") for i, c in enumerate(classes)})
    with pytest.warns(UserWarning, match="named like dataset splits") as record:
        ds = FastImageFolder(root, 16)
    assert ds.classes == sorted(classes)  # still ImageFolder's result: the warning explains, it does not change it
    message = str(record[0].message)
    split = next((c for c in classes if c.lower() in ("train", "training")), sorted(classes)[0])
    assert str(root) in message and repr(str(root / split)) in message


def test_split_folders_warning_on_real_dataset_root():
    root = _data("hymenoptera")
    with pytest.warns(UserWarning, match="named like dataset splits") as record:
        ds = FastImageFolder(root, 16)
    assert ds.classes == ["train", "val"]
    assert repr(str(root / "train")) in str(record[0].message)


@pytest.mark.parametrize("classes", [("ants", "bees"), ("bus", "train", "tractor"), ("test_tube", "val_plant")])
def test_real_class_names_do_not_warn(tmp_path, classes):
    root = _make_class_tree(tmp_path, {f"{c}/{i}.png": _solid("RGB") for i, c in enumerate(classes)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert FastImageFolder(root, 16).classes == sorted(classes)


# --------------------------------------------------------------------------------------------- misc helpers


def test_pil_flavour(monkeypatch):
    import PIL

    assert pil_flavour() == f"Pillow {PIL.__version__}"
    monkeypatch.setattr(PIL, "__version__", "9.5.0.post2")
    assert pil_flavour() == "Pillow-SIMD 9.5.0.post2"


def test_suggest_loader_kwargs():
    s = suggest_loader_kwargs(cpus=16, processes_per_node=2, cuda=True)
    assert s.kwargs["num_workers"] == 7
    assert s.kwargs["pin_memory"] is True and s.kwargs["persistent_workers"] is True
    assert s.kwargs["prefetch_factor"] == 2 and s.kwargs["collate_fn"] is uint8_collate
    assert set(s.reasons) == set(s.kwargs) and "16 cores" in str(s)
    one = suggest_loader_kwargs(cpus=1, cuda=False, uint8=False)
    assert one.kwargs == {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None}
    assert suggest_loader_kwargs(cpus=64, max_workers=8, cuda=True).kwargs["num_workers"] == 8
    # training on the CPU: its threads use every core, so a quarter go to workers (none up to 3 cores)
    cpu = {n: suggest_loader_kwargs(cpus=n, cuda=False, cpu_training=True) for n in (1, 2, 3, 4, 16, 64)}
    assert {n: s.kwargs["num_workers"] for n, s in cpu.items()} == {1: 0, 2: 0, 3: 0, 4: 1, 16: 4, 64: 16}
    assert cpu[2].kwargs["persistent_workers"] is False and cpu[2].kwargs["prefetch_factor"] is None
    assert "training on the CPU uses them all" in cpu[2].reasons["num_workers"]
    assert suggest_loader_kwargs(cpus=16, processes_per_node=2, cpu_training=True).kwargs["num_workers"] == 2
    capped = suggest_loader_kwargs(cpus=64, max_workers=8, cpu_training=True)
    assert capped.kwargs["num_workers"] == 8 and "capped at max_workers=8" in capped.reasons["num_workers"]
    assert "capped" not in suggest_loader_kwargs(cpus=32, max_workers=8, cpu_training=True).reasons["num_workers"]
    # an accelerator (CUDA, or MPS with cuda=False): one core stays with the main process
    assert suggest_loader_kwargs(cpus=2, cuda=False, cpu_training=False).kwargs["num_workers"] == 1
    # the suggestion is accepted by DataLoader as is
    DataLoader(list(range(4)), **suggest_loader_kwargs(cpus=1, cuda=False, uint8=False).kwargs)
    for bad in ({"cpus": 0}, {"processes_per_node": 0}, {"max_workers": -1}):
        with pytest.raises(ValueError):
            suggest_loader_kwargs(**bad)
