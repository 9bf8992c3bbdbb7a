"""Functional core of GPUAugmentation: per-sample policies, torchvision equivalence, masks, presets."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torchvision.transforms.v2 import functional as F

from lightning_efficient.functional import augment as A
from lightning_efficient.functional.augment import OPS, PolicyParams
from lightning_efficient.functional.augment.policy_sampling import trivial_augment_space


@pytest.fixture(scope="module")
def real_image(imagenette: Path) -> torch.Tensor:
    """One imagenette JPEG as ``uint8 [1, 3, 224, 224]``."""
    import numpy as np
    from PIL import Image

    folder = imagenette / "train"
    path = sorted(p for p in folder.rglob("*") if p.suffix.lower() in {".jpeg", ".jpg"})[0]
    with Image.open(path) as img:
        return torch.from_numpy(np.asarray(img.convert("RGB")).copy()).permute(2, 0, 1)[None].contiguous()


def _synthetic(b: int = 4, c: int = 3, h: int = 24, w: int = 20, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, h, w), dtype=torch.uint8, generator=g)


def _params(op: str, magnitude: float, b: int = 1) -> PolicyParams:
    return PolicyParams(
        ops=torch.full((b, 1), OPS.index(op), dtype=torch.long), magnitudes=torch.full((b, 1), float(magnitude))
    )


def _torchvision(op: str, m: float, x: torch.Tensor, x_uint8: torch.Tensor) -> torch.Tensor:
    """torchvision v2's TrivialAugmentWide `_apply_image_or_video_transform` calls, on the float image."""
    nearest = F.InterpolationMode.NEAREST
    if op == "ShearX":
        return F.affine(
            x,
            angle=0.0,
            translate=[0, 0],
            scale=1.0,
            shear=[math.degrees(math.atan(m)), 0.0],
            interpolation=nearest,
            center=[0, 0],
        )
    if op == "ShearY":
        return F.affine(
            x,
            angle=0.0,
            translate=[0, 0],
            scale=1.0,
            shear=[0.0, math.degrees(math.atan(m))],
            interpolation=nearest,
            center=[0, 0],
        )
    if op == "TranslateX":
        return F.affine(x, angle=0.0, translate=[int(m), 0], scale=1.0, shear=[0.0, 0.0], interpolation=nearest)
    if op == "TranslateY":
        return F.affine(x, angle=0.0, translate=[0, int(m)], scale=1.0, shear=[0.0, 0.0], interpolation=nearest)
    if op == "Rotate":
        return F.rotate(x, m, interpolation=nearest)
    if op == "Brightness":
        return F.adjust_brightness(x, 1.0 + m)
    if op == "Color":
        return F.adjust_saturation(x, 1.0 + m)
    if op == "Contrast":
        return F.adjust_contrast(x, 1.0 + m)
    if op == "Sharpness":
        return F.adjust_sharpness(x, 1.0 + m)
    if op == "Posterize":  # the uint8 semantics (what TrivialAugmentWide does on uint8 tensors / PIL)
        return F.posterize(x_uint8, int(m)).float() / 255.0
    if op == "Solarize":
        return F.solarize(x, m)
    if op == "AutoContrast":
        return F.autocontrast(x)
    if op == "Equalize":
        return F.equalize(x)
    assert op == "Identity"
    return x


OP_CASES = [
    ("Identity", 0.0),
    ("ShearX", 0.5),
    ("ShearX", -0.3),
    ("ShearY", 0.66),
    ("ShearY", -0.99),
    ("TranslateX", 12.7),
    ("TranslateX", -20.2),
    ("TranslateY", 9.0),
    ("TranslateY", -31.0),
    ("Rotate", 30.0),
    ("Rotate", -100.0),
    ("Brightness", 0.5),
    ("Brightness", -0.5),
    ("Color", 0.7),
    ("Color", -0.9),
    ("Contrast", 0.5),
    ("Contrast", -0.6),
    ("Sharpness", 0.8),
    ("Sharpness", -0.8),
    ("Posterize", 3),
    ("Posterize", 6),
    ("Solarize", 0.5),
    ("Solarize", 0.1),
    ("AutoContrast", 0.0),
    ("Equalize", 0.0),
]


@pytest.mark.parametrize("op,m", OP_CASES)
def test_each_op_matches_torchvision_on_a_real_image(real_image, op, m):
    x = real_image.float() / 255.0
    ours = A.apply_policy(x, _params(op, m))
    ref = _torchvision(op, m, x, real_image)
    assert ours.shape == ref.shape and ours.dtype == torch.float32
    diff = (ours - ref).abs()
    assert diff.max().item() < 1e-5, f"{op}({m}): max abs difference {diff.max().item()}"
    if op != "Identity":
        assert not torch.equal(ours, x), f"{op}({m}) left the image unchanged"


def test_mixed_batch_equals_per_image_application(real_image):
    """Applying a batch with different ops per sample equals applying each image on its own."""
    x = (real_image.float() / 255.0).repeat(len(OP_CASES), 1, 1, 1)
    params = PolicyParams(
        ops=torch.tensor([[OPS.index(op)] for op, _ in OP_CASES]),
        magnitudes=torch.tensor([[float(m)] for _, m in OP_CASES]),
    )
    out = A.apply_policy(x, params)
    for i, (op, m) in enumerate(OP_CASES):
        single = A.apply_policy(x[i : i + 1], _params(op, m))
        torch.testing.assert_close(out[i : i + 1], single, atol=1e-6, rtol=0)


def test_trivial_augment_is_per_sample():
    x = _synthetic(1, h=32, w=32).expand(64, -1, -1, -1).contiguous()
    g = torch.Generator().manual_seed(0)
    params = A.sample_trivial_augment(64, generator=g)
    out = A.apply_trivial_augment(x, params)
    ops_used = set(params.ops.flatten().tolist())
    assert len(ops_used) >= 8, ops_used  # 64 draws from 14 ops
    distinct = {tuple(o.flatten()[:64].tolist()) for o in (out * 255).round().to(torch.uint8)}
    assert len(distinct) >= 30
    # signed magnitudes come in both signs; unsigned never negative
    unsigned = torch.tensor([op in ("Identity", "Posterize", "Solarize", "AutoContrast", "Equalize") for op in OPS])
    assert (params.magnitudes[unsigned[params.ops]] >= 0).all()
    assert (params.magnitudes < 0).any()


def test_sampled_magnitudes_are_torchvisions_values():
    g = torch.Generator().manual_seed(1)
    p = A.sample_trivial_augment(4000, generator=g)
    ops, mags = p.ops[:, 0], p.magnitudes[:, 0]
    for name, hi in [("ShearX", 0.99), ("TranslateY", 32.0), ("Rotate", 135.0), ("Contrast", 0.99)]:
        sel = mags[ops == OPS.index(name)]
        bins = torch.linspace(0.0, hi, 31)
        assert torch.isclose(sel.abs()[:, None], bins[None]).any(1).all()
        assert (sel < 0).any() and (sel > 0).any()  # randomly signed
    post = mags[ops == OPS.index("Posterize")]
    assert set(post.long().tolist()) <= set(range(2, 9)) and post.min() >= 2
    sol = mags[ops == OPS.index("Solarize")]
    assert (sol >= 0).all() and (sol <= 1).all()
    for name in ("Identity", "AutoContrast", "Equalize"):
        assert (mags[ops == OPS.index(name)] == 0).all()


@pytest.mark.parametrize(
    "fn", [A.trivial_augment, A.rand_augment, A.imagenet_augment, A.cifar_augment], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("b,c", [(1, 3), (5, 3), (3, 1)])
def test_uint8_in_float_out_range_shape(fn, b, c):
    x = _synthetic(b, c)
    out = fn(x, generator=torch.Generator().manual_seed(2))
    assert out.dtype == torch.float32 and out.shape == x.shape
    assert out.min() >= 0 and out.max() <= 1
    # float input keeps its dtype
    out64 = fn(x.double() / 255, generator=torch.Generator().manual_seed(2))
    assert out64.dtype == torch.float64


def test_reproducible_with_generator_and_global_seed():
    x = _synthetic(16)
    a = A.trivial_augment(x, generator=torch.Generator().manual_seed(5))
    b = A.trivial_augment(x, generator=torch.Generator().manual_seed(5))
    c = A.trivial_augment(x, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.manual_seed(3)
    d = A.rand_augment(x)
    torch.manual_seed(3)
    assert torch.equal(d, A.rand_augment(x))


def test_rand_augment_draws_num_ops_per_sample():
    p = A.sample_rand_augment(32, 20, 30, num_ops=3, magnitude=30, generator=torch.Generator().manual_seed(0))
    assert p.ops.shape == (32, 3) and p.magnitudes.shape == (32, 3)
    tx = p.magnitudes[p.ops == OPS.index("TranslateX")]
    assert torch.allclose(tx.abs(), torch.tensor(150.0 / 331.0 * 30))
    assert len({tuple(r) for r in p.ops.tolist()}) > 10
    assert p.op_names()[0][0] in OPS


def test_normalize_values():
    x = torch.tensor([0.0, 0.5, 1.0]).view(1, 3, 1, 1).expand(2, 3, 2, 2)
    out = A.normalize(x, (0.5, 0.5, 0.5), (0.25, 0.5, 1.0))
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor([-2.0, 0.0, 0.5]))
    with pytest.raises(ValueError, match="3 channels"):
        A.normalize(x, (0.5, 0.5), (1.0, 1.0))
    with pytest.raises(ValueError, match="positive"):
        A.normalize(x, (0.5,), (0.0,))
    with pytest.raises(TypeError, match="to_float"):
        A.normalize(_synthetic(), (0.5,), (1.0,))


def test_to_float_and_errors():
    x = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 1, 1, 3)
    torch.testing.assert_close(A.to_float(x), torch.tensor([0.0, 0.2, 1.0]).view(1, 1, 1, 3))
    with pytest.raises(TypeError, match="uint8"):
        A.to_float(x.long())
    with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
        A.trivial_augment(torch.rand(3, 8, 8))
    with pytest.raises(ValueError, match="channels"):
        A.trivial_augment(torch.rand(2, 4, 8, 8))
    with pytest.raises(ValueError, match="interpolation"):
        A.trivial_augment(torch.rand(2, 3, 8, 8), interpolation="bicubic")
    with pytest.raises(ValueError, match="magnitude"):
        A.sample_rand_augment(2, 8, 8, magnitude=31)
    with pytest.raises(ValueError, match="Unknown augmentation preset"):
        A.build_augmentation("autoaugment")
    with pytest.raises(ValueError, match="Unknown option"):
        A.build_augmentation("cifar", size=3)
    with pytest.raises(TypeError, match="callable"):
        A.build_augmentation(3)


def _labelled(b: int = 6, h: int = 24, w: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    """Images whose first channel encodes the mask label, so image and mask alignment can be checked."""
    g = torch.Generator().manual_seed(0)
    masks = torch.randint(1, 5, (b, h, w), generator=g).to(torch.uint8)
    masks[:, 0, 0] = 255  # an "ignore" label survives as a value
    images = torch.rand(b, 3, h, w, generator=g)
    images[:, 0] = masks.float() / 255.0
    return images, masks


@pytest.mark.parametrize("op,m", [(op, m) for op, m in OP_CASES if op in A.GEOMETRIC_OPS])
def test_masks_follow_geometric_ops_and_keep_labels(op, m):
    images, masks = _labelled()
    out, out_masks = A.apply_policy(images, _params(op, m, b=6), masks=masks, mask_fill=0)
    assert out_masks.dtype == torch.uint8 and out_masks.shape == masks.shape
    assert set(out_masks.unique().tolist()) <= {0, 1, 2, 3, 4, 255}
    torch.testing.assert_close((out[:, 0] * 255).round().to(torch.uint8), out_masks, atol=0, rtol=0)


def test_masks_untouched_by_colour_ops_and_4d_masks():
    images, masks = _labelled()
    masks4 = masks.long()[:, None]
    _, out = A.apply_policy(images, _params("Equalize", 0, b=6), masks=masks4)
    assert torch.equal(out, masks4) and out.dtype == torch.int64
    for fn in (A.trivial_augment, A.rand_augment, A.imagenet_augment, A.cifar_augment):
        x, mk = fn(images, masks=masks, generator=torch.Generator().manual_seed(0))
        assert mk.dtype == torch.uint8 and mk.shape == masks.shape
        assert set(mk.unique().tolist()) <= {0, 1, 2, 3, 4, 255}
    with pytest.raises(ValueError, match="masks"):
        A.trivial_augment(images, masks=masks[:, :5])


def test_cifar_is_exact_shift_and_flip():
    x = _synthetic(8, h=16, w=16).float() / 255
    g = torch.Generator().manual_seed(0)
    params = A.sample_pad_crop_flip(8, 16, 16, padding=4, generator=g)
    out = A.apply_affine(x, params, interpolation="nearest")
    for i in range(8):
        mat = params.matrix[i]
        flip = mat[0, 0] < 0
        img = out[i].flip(-1) if flip else out[i]
        dx = int((15 - mat[0, 2]).item()) if flip else int(mat[0, 2].item())
        dy = int(mat[1, 2].item())
        assert abs(dx) <= 4 and abs(dy) <= 4
        shifted = torch.zeros_like(x[i])
        ys, yd = (slice(0, 16 - dy), slice(dy, 16)) if dy >= 0 else (slice(-dy, 16), slice(0, 16 + dy))
        xs, xd = (slice(0, 16 - dx), slice(dx, 16)) if dx >= 0 else (slice(-dx, 16), slice(0, 16 + dx))
        shifted[:, yd, xd] = x[i][:, ys, xs]
        torch.testing.assert_close(img, shifted, atol=1e-6, rtol=0)


def test_imagenet_crop_resize_and_upsample_small_images():
    x = _synthetic(4, h=16, w=12)
    out = A.imagenet_augment(x, size=32, generator=torch.Generator().manual_seed(0))
    assert out.shape == (4, 3, 32, 32) and out.min() >= 0 and out.max() <= 1
    # scale=(1,1), ratio equal to the image's: the crop is the whole image; with no flip, resizing to the same
    # size is the identity
    y = _synthetic(3, h=20, w=20).float() / 255
    same = A.imagenet_augment(y, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip_p=0.0)
    torch.testing.assert_close(same, y, atol=1e-5, rtol=0)
    flipped = A.imagenet_augment(y, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip_p=1.0)
    torch.testing.assert_close(flipped, y.flip(-1), atol=1e-5, rtol=0)


@settings(max_examples=25, deadline=None)
@given(
    b=st.integers(1, 6),
    h=st.integers(8, 40),
    w=st.integers(8, 40),
    scale_lo=st.floats(0.05, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_resized_crop_boxes_stay_inside(b, h, w, scale_lo, seed):
    """The crop box mapped back from the output corners lies inside the source image."""
    p = A.sample_random_resized_crop_flip(
        b, h, w, size=(10, 14), scale=(scale_lo, 1.0), generator=torch.Generator().manual_seed(seed)
    )
    full = torch.cat([p.matrix, torch.tensor([0.0, 0.0, 1.0]).expand(b, 1, 3)], 1)
    inv = torch.linalg.inv(full.double())
    corners = torch.tensor([[-0.5, -0.5, 1.0], [13.5, 9.5, 1.0]], dtype=torch.float64).T  # output pixel edges
    src = inv @ corners
    xs, ys = src[:, 0], src[:, 1]
    tol = 1e-3  # the matrices are float32: inverting them carries ~1e-5 px of rounding at these sizes
    assert (xs.min(1).values >= -0.5 - tol).all() and (xs.max(1).values <= w - 0.5 + tol).all()
    assert (ys.min(1).values >= -0.5 - tol).all() and (ys.max(1).values <= h - 0.5 + tol).all()
    area = (xs.max(1).values - xs.min(1).values) * (ys.max(1).values - ys.min(1).values)
    assert (area <= h * w * (1 + 1e-5) + tol).all() and (area >= 1).all()


def test_custom_callable_and_module_are_frozen():
    kornia_aug = pytest.importorskip("kornia.augmentation")
    policy = kornia_aug.auto.TrivialAugment()
    assert any(p.requires_grad for p in policy.parameters())
    fn = A.build_augmentation(policy)
    assert not any(p.requires_grad for p in policy.parameters())
    out = fn(torch.rand(4, 3, 16, 16))
    assert out.shape == (4, 3, 16, 16)
    with pytest.raises(ValueError, match="presets only"):
        A.build_augmentation(policy, size=3)


def test_preview_grid():
    grid = A.preview(
        _synthetic(6, c=1, h=16, w=16), "trivial_augment", nrow=3, padding=2, generator=torch.Generator().manual_seed(0)
    )
    assert grid.dtype == torch.uint8 and grid.shape == (3, 2 * 18 + 2, 3 * 18 + 2)


def test_fill_values_for_images_and_masks():
    images, masks = _labelled(b=2, h=16, w=16)
    out, out_masks = A.apply_policy(images, _params("TranslateX", 5.0, b=2), masks=masks, fill=0.5, mask_fill=255)
    assert torch.allclose(out[:, :, :, :5], torch.tensor(0.5)) and (out_masks[:, :, :5] == 255).all()
    torch.testing.assert_close(out[:, :, :, 5:], images[:, :, :, :-5])
    assert torch.equal(out_masks[:, :, 5:], masks[:, :, :-5])


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(OPS),
    bin_=st.integers(0, 30),
    negative=st.booleans(),
    h=st.integers(5, 33),
    w=st.integers(5, 33),
    gray=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_sampled_op_matches_torchvision_on_non_square_images(op, bin_, negative, h, w, gray, seed):
    """Every (op, magnitude) of TrivialAugmentWide's space equals torchvision on random non-square images.

    Excluded: rotations by 45, 90 and 135 degrees (3 of TrivialAugmentWide's 31 rotation bins). At these angles
    some sampling points of a pixel grid land exactly halfway between two pixels (all of them at 90 degrees when
    width and height differ by an odd number), so "nearest" is a tie that float rounding breaks differently in
    Kornia's and torchvision's grid arithmetic: both answers are right. The other rotation bins are compared.
    """
    table, signed = trivial_augment_space(31)
    i = OPS.index(op)
    m = float(table[i, bin_]) * (-1.0 if negative and bool(signed[i]) else 1.0)
    assume(not (op == "Rotate" and m != 0 and math.isclose(m / 45, round(m / 45), abs_tol=1e-9)))
    x_uint8 = _synthetic(1, c=1 if gray else 3, h=h, w=w, seed=seed)
    x = x_uint8.float() / 255.0
    ours = A.apply_policy(x, _params(op, m))
    ref = _torchvision(op, m, x, x_uint8)
    assert (ours - ref).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    "fn", [A.trivial_augment, A.rand_augment, A.imagenet_augment, A.cifar_augment], ids=lambda f: f.__name__
)
def test_channels_last_input_gives_the_same_values(fn):
    x = _synthetic(6, h=20, w=24)
    a = fn(x, generator=torch.Generator().manual_seed(0))
    b = fn(x.contiguous(memory_format=torch.channels_last), generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)


def test_misspelt_preset_suggests_the_right_name():
    with pytest.raises(ValueError, match="did you mean 'trivial_augment'"):
        A.build_augmentation("trivial")


# Names served by the single module `augment.py` before it became a package (tests, notebooks, benchmarks, the
# package's own `__init__` files import them from `lightning_efficient.functional.augment`).
PUBLIC_NAMES = [
    "OPS",
    "GEOMETRIC_OPS",
    "PolicyParams",
    "AffineParams",
    "Augmentation",
    "to_float",
    "normalize",
    "sample_trivial_augment",
    "apply_trivial_augment",
    "trivial_augment",
    "sample_rand_augment",
    "rand_augment",
    "apply_policy",
    "sample_random_resized_crop_flip",
    "sample_pad_crop_flip",
    "apply_affine",
    "imagenet_augment",
    "cifar_augment",
    "random_hflip",
    "flip_augment",
    "PRESETS",
    "build_augmentation",
    "preview",
    # mask layouts, dtype-independent geometry, unit checks
    "restore_masks",
    "WARP_DTYPE",
    "check_normalization_stats",
    "unit_range_problem",
]


def test_package_reexports_every_public_name_of_the_old_module():
    import importlib

    module = importlib.import_module("lightning_efficient.functional.augment")
    assert [n for n in PUBLIC_NAMES if not hasattr(module, n)] == []
    assert set(module.__all__) <= set(PUBLIC_NAMES) and callable(module.preview)
    assert not hasattr(module, "apply_rand_augment")  # removed: apply_policy applies RandAugment parameters


def test_colour_op_rejects_a_geometric_name():
    from lightning_efficient.functional.augment.colour import COLOUR_OPS, apply_colour_op

    assert set(COLOUR_OPS) | set(A.GEOMETRIC_OPS) | {"Identity"} == set(OPS)
    with pytest.raises(ValueError, match="not a colour operation"):
        apply_colour_op("Rotate", torch.rand(2, 3, 4, 4), torch.zeros(2))


# ------------------------------------------------------------------------------------------------------------
# masks leave an augmentation with the shape and dtype they came in with, whatever augments
# them (Kornia's AugmentationSequential returns [B, H, W] masks as [B, 1, H, W], kornia#4750).
MASK_DTYPES = [torch.int64, torch.uint8, torch.bool, torch.float32]
MASK_LAYOUTS = ["BHW", "B1HW"]


def _mask_batch(dtype: torch.dtype, layout: str, b: int = 4, h: int = 12, w: int = 10):
    """Float images whose channel 0 holds the label / 255, and the labels as masks of ``dtype`` and ``layout``."""
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 2 if dtype == torch.bool else 5, (b, h, w), generator=g)
    images = torch.rand(b, 3, h, w, generator=g)
    images[:, 0] = labels.float() / 255.0
    masks = labels.to(dtype)
    return images, masks if layout == "BHW" else masks.unsqueeze(1)


def _labels_of(images: torch.Tensor) -> torch.Tensor:
    return (images[:, 0].float() * 255.0).round()


@pytest.mark.parametrize("layout", MASK_LAYOUTS)
@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=str)
def test_kornia_sequential_masks_come_back_in_their_shape_and_dtype(dtype, layout):
    K = pytest.importorskip("kornia.augmentation")
    images, masks = _mask_batch(dtype, layout)
    flip = A.build_augmentation(K.AugmentationSequential(K.RandomHorizontalFlip(p=1.0), data_keys=["input", "mask"]))
    out, out_masks = flip(images, masks)
    assert out_masks.shape == masks.shape and out_masks.dtype == masks.dtype
    assert torch.equal(out_masks, masks.flip(-1)) and torch.equal(out, images.flip(-1))
    # a random affine warp (nearest for the images too): masks keep shape, dtype and labels, and stay aligned
    torch.manual_seed(0)
    affine = A.build_augmentation(
        K.AugmentationSequential(
            K.RandomAffine(degrees=40, translate=(0.2, 0.2), resample="nearest", p=1.0), data_keys=["input", "mask"]
        )
    )
    out, out_masks = affine(images, masks)
    assert out_masks.shape == masks.shape and out_masks.dtype == masks.dtype
    assert set(out_masks.unique().tolist()) <= set(masks.unique().tolist()) | {0}
    labels = out_masks.reshape(_labels_of(out).shape).float()
    assert torch.equal(labels, _labels_of(out))


def _old_style(images, masks):
    """A callable that answers masks as float [B, 1, H, W] whatever it was given (older Kornia releases did)."""
    m = (masks if masks.ndim == 4 else masks.unsqueeze(1)).float()
    return images.flip(-1), m.flip(-1)


@pytest.mark.parametrize("layout", MASK_LAYOUTS)
@pytest.mark.parametrize("dtype", MASK_DTYPES + [torch.float16], ids=str)
def test_custom_callable_masks_come_back_in_their_shape_and_dtype(dtype, layout):
    images, masks = _mask_batch(dtype, layout)
    out, out_masks = A.build_augmentation(_old_style)(images, masks)
    assert out_masks.shape == masks.shape and out_masks.dtype == masks.dtype
    assert torch.equal(out_masks, masks.flip(-1))


@pytest.mark.parametrize("layout", MASK_LAYOUTS)
@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("preset", sorted(A.PRESETS))
def test_presets_keep_mask_shape_and_dtype(preset, dtype, layout):
    images, masks = _mask_batch(dtype, layout)
    kwargs = {"size": (8, 14)} if preset == "imagenet" else {}
    out, out_masks = A.build_augmentation(preset, **kwargs)(images, masks, torch.Generator().manual_seed(0))
    assert out_masks.dtype == masks.dtype
    assert out_masks.shape == (*masks.shape[:-2], *out.shape[-2:])
    assert set(out_masks.unique().tolist()) <= set(masks.unique().tolist()) | {0}


def test_restore_masks_layouts_and_errors():
    like3 = torch.zeros(2, 6, 6, dtype=torch.int64)
    like_k = torch.zeros(2, 2, 6, 6, dtype=torch.uint8)
    # [B, K, H, W] with K > 1 keeps K; spatial sizes may change; floats are rounded to the nearest label
    out = A.restore_masks(torch.full((2, 2, 3, 4), 2.9), like_k)
    assert out.shape == (2, 2, 3, 4) and out.dtype == torch.uint8 and (out == 3).all()
    assert A.restore_masks(torch.full((2, 3, 4), 0.6), torch.zeros(2, 1, 6, 6, dtype=torch.bool)).shape == (2, 1, 3, 4)
    same = torch.ones(2, 6, 6, dtype=torch.int64)
    assert A.restore_masks(same, like3) is same
    with pytest.raises(ValueError, match=r"returned masks of shape \(2, 3, 6, 6\) for masks of shape \(2, 6, 6\)"):
        A.restore_masks(torch.zeros(2, 3, 6, 6), like3)
    with pytest.raises(ValueError, match="batch size"):
        A.restore_masks(torch.zeros(3, 6, 6), like3)
    with pytest.raises(ValueError, match="channels"):
        A.restore_masks(torch.zeros(2, 6, 6), like_k)
    with pytest.raises(TypeError, match="returned masks of type list"):
        A.restore_masks([1, 2], like3)


def test_custom_callable_whose_masks_do_not_follow_the_images_is_an_error():
    images, masks = _mask_batch(torch.int64, "BHW")
    with pytest.raises(ValueError, match=r"images of size \(12, 10\) but masks of size \(6, 5\)"):
        A.build_augmentation(lambda x, m: (x, m[..., ::2, ::2]))(images, masks)
    with pytest.raises(ValueError, match="function returned masks of shape"):
        A.build_augmentation(lambda x, m: (x, m[:2]))(images, masks)


# ------------------------------------------------------------------------------------------------------------
# the images' dtype does not change the geometry (same draws, same pixel positions).
HALF_AND_DOUBLE = [torch.bfloat16, torch.float16, torch.float64]


def _coordinates(b: int, h: int, w: int) -> torch.Tensor:
    """``[B, 3, H, W]`` images whose pixels hold their own position ``(x / 256, y / 256, 1)``: exact in every
    floating dtype up to 256 px, so a nearest warp says where each output pixel came from (0 in channel 2:
    outside the source)."""
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([xs / 256.0, ys / 256.0, torch.ones(h, w)]).expand(b, -1, -1, -1).contiguous()


def _geometric_params(b: int, h: int, w: int, generator: torch.Generator) -> PolicyParams:
    """Random geometric TrivialAugmentWide draws (ShearX/Y, TranslateX/Y, Rotate; any bin, any sign)."""
    table, _ = trivial_augment_space(31)
    ops = torch.randint(OPS.index("ShearX"), OPS.index("Rotate") + 1, (b, 1), generator=generator)
    bins = torch.randint(0, 31, (b, 1), generator=generator)
    sign = torch.randint(0, 2, (b, 1), generator=generator) * 2.0 - 1.0
    return PolicyParams(ops=ops, magnitudes=table[ops, bins] * sign)


def _warp(kind: str, x: torch.Tensor, seed: int, interpolation: str, masks=None):
    g = torch.Generator().manual_seed(seed)
    b, _, h, w = x.shape
    if kind == "policy":
        params = _geometric_params(b, h, w, g)
        return A.apply_policy(x, params, masks=masks, interpolation=interpolation, mask_fill=-1)
    if kind == "imagenet":
        params = A.sample_random_resized_crop_flip(b, h, w, size=(h + 5, max(w - 3, 1)), generator=g)
    else:
        params = A.sample_pad_crop_flip(b, h, w, padding=3, generator=g)
    return A.apply_affine(x, params, masks=masks, interpolation=interpolation, mask_fill=-1)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["policy", "imagenet", "cifar"]),
    b=st.integers(1, 6),
    h=st.integers(6, 96),
    w=st.integers(6, 96),
    seed=st.integers(0, 2**31 - 1),
    interpolation=st.sampled_from(["nearest", "bilinear"]),
)
def test_same_draws_same_geometry_for_every_floating_dtype(kind, b, h, w, seed, interpolation):
    """Property: warping bfloat16 / float16 / float64 images with the same draws moves every pixel where float32
    does (the inputs are exact in every dtype, so the outputs agree up to the rounding of the values to the
    dtype, bilinear included), and the masks land where their images' pixels do."""
    x = _coordinates(b, h, w)
    index = (torch.arange(h * w).view(1, h, w).expand(b, -1, -1)).contiguous()  # int64 masks: pixel index
    ref, ref_masks = _warp(kind, x, seed, interpolation, masks=index)
    for dtype in HALF_AND_DOUBLE:
        out, out_masks = _warp(kind, x.to(dtype), seed, interpolation, masks=index)
        assert out.dtype == dtype and out_masks.dtype == torch.int64
        assert torch.equal(out, ref.to(dtype)), f"{dtype}: {(out.float() != ref.to(dtype).float()).float().mean():.2%}"
        assert torch.equal(out_masks, ref_masks)
        if interpolation == "nearest":  # image pixels and mask labels come from the same source pixels
            inside = out[:, 2] == 1
            pos = (out[:, 1].float() * 256).round().long() * w + (out[:, 0].float() * 256).round().long()
            assert torch.equal(torch.where(inside, pos, -1), out_masks)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("kind", ["policy", "imagenet", "cifar"])
def test_half_precision_images_are_warped_like_float32_at_full_size(kind, dtype):
    """The report's case: 224 px, the same draws: no pixel may land elsewhere than with float32."""
    x = _coordinates(8, 224, 224)
    ref = _warp(kind, x, 12, "nearest")
    out = _warp(kind, x.to(dtype), 12, "nearest")
    moved = (out.float() != ref).any(1).float().mean().item()
    assert moved == 0.0, f"{moved:.2%} of the pixels moved"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("fn", [A.trivial_augment, A.rand_augment], ids=lambda f: f.__name__)
def test_policy_presets_give_half_images_the_float32_masks(fn, dtype):
    """Whole presets: the same generator seed draws the same operations for every dtype, so the masks (and the
    geometry behind them) are identical; images keep their dtype."""
    images, masks = _mask_batch(torch.int64, "BHW", b=16, h=32, w=32)
    _, ref_masks = fn(images, masks=masks, generator=torch.Generator().manual_seed(3))
    out, out_masks = fn(images.to(dtype), masks=masks, generator=torch.Generator().manual_seed(3))
    assert out.dtype == dtype and torch.equal(out_masks, ref_masks)


def test_matrices_are_float32_whatever_the_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        g = torch.Generator().manual_seed(0)
        assert A.sample_pad_crop_flip(3, 8, 8, generator=g).matrix.dtype == A.WARP_DTYPE == torch.float32
        assert A.sample_random_resized_crop_flip(3, 8, 8, generator=g).matrix.dtype == torch.float32
    finally:
        torch.set_default_dtype(previous)


# ------------------------------------------------------------------------------------------------------------
# statistics in 0-255 units and float input outside [0, 1] are named, not silently used.
@pytest.mark.parametrize(
    "mean,std",
    [
        ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375)),
        ((0.485, 0.456, 0.406), (58.395, 57.12, 57.375)),
        ((123.675, 116.28, 103.53), (0.229, 0.224, 0.225)),
        ((-0.1,), (0.5,)),
        ((127.5,), (127.5,)),
    ],
)
def test_statistics_in_0_255_units_are_rejected_with_the_fix(mean, std):
    with pytest.raises(ValueError, match=r"0-255 units.*Fix: divide them by 255: mean=\("):
        A.check_normalization_stats(mean, std)
    with pytest.raises(ValueError, match="0-255 units"):
        A.normalize(torch.rand(1, len(mean), 2, 2), mean, std)


def test_statistics_in_unit_range_are_accepted():
    for mean, std in [((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), ((0.5,), (0.5,)), ((0.0,), (1.0,))]:
        A.check_normalization_stats(mean, std)
    with pytest.raises(ValueError, match="positive"):
        A.check_normalization_stats((0.5,), (-0.2,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_unit_range_problem_names_normalised_and_0_255_floats(dtype):
    x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    assert A.unit_range_problem(x.to(dtype)) is None
    assert A.unit_range_problem((x * 255).to(torch.uint8)) is None  # uint8: never read
    assert A.unit_range_problem(torch.empty(0, 3, 8, 8, dtype=dtype)) is None
    assert A.unit_range_problem((x + 0.005).to(dtype)) is None  # within the tolerance
    normalised = A.normalize(x, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)).to(dtype)
    assert "values in [-2." in A.unit_range_problem(normalised)
    assert str(dtype) in A.unit_range_problem((x * 255).to(dtype))
    assert "nan" in A.unit_range_problem(torch.full((1, 1, 2, 2), float("nan"), dtype=dtype))
    assert A.unit_range_problem(torch.randn(2, 3, 8, 8).to(dtype)) is not None


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(0.1, 1.0), seed=st.integers(0, 2**16))
def test_pixel_scale_scales_the_translations_and_nothing_else(scale, seed):
    full = A.sample_trivial_augment(256, generator=torch.Generator().manual_seed(seed))
    small = A.sample_trivial_augment(256, pixel_scale=scale, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(full.ops, small.ops)
    moves = (full.ops == OPS.index("TranslateX")) | (full.ops == OPS.index("TranslateY"))
    assert torch.allclose(small.magnitudes[moves], full.magnitudes[moves] * scale)
    assert torch.equal(small.magnitudes[~moves], full.magnitudes[~moves])
    with pytest.raises(ValueError, match="pixel_scale"):
        A.sample_trivial_augment(4, pixel_scale=0.0)


@settings(max_examples=30, deadline=None)
@given(p=st.sampled_from([0.0, 0.3, 0.5, 1.0]), seed=st.integers(0, 2**16), kind=st.sampled_from(["u8", "float"]))
def test_random_hflip_flips_each_image_and_its_mask_alike_with_probability_p(p, seed, kind):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (64, 3, 4, 5), dtype=torch.uint8, generator=g)
    x = x if kind == "u8" else x.float() / 255
    masks = torch.arange(64 * 4 * 5).reshape(64, 4, 5)
    out, out_masks = A.random_hflip(x, masks, flip_p=p, generator=torch.Generator().manual_seed(seed))
    assert out.dtype == x.dtype and out.shape == x.shape and out_masks.shape == masks.shape
    flipped = [bool(torch.equal(out[i], x[i].flip(-1))) and not torch.equal(x[i], x[i].flip(-1)) for i in range(64)]
    for i in range(64):
        assert torch.equal(out[i], x[i].flip(-1) if flipped[i] else x[i])
        assert torch.equal(out_masks[i], masks[i].flip(-1) if flipped[i] else masks[i])  # the same draw
    if p in (0.0, 1.0):
        assert all(flipped) == (p == 1.0) and any(flipped) == (p == 1.0)
    else:
        assert 0 < sum(flipped) < 64  # per sample, not per batch (64 draws at 0.3-0.5)


@pytest.mark.parametrize("kind", ["u8", "float64"])
def test_the_flip_preset_is_the_float_image_or_its_mirror_and_masks_follow(kind):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 256, (64, 3, 4, 5), dtype=torch.uint8, generator=g)
    x = x if kind == "u8" else x.double() / 255
    unit = x.float() / 255 if kind == "u8" else x
    masks = torch.arange(64 * 4 * 5).reshape(64, 4, 5)
    out, out_masks = A.flip_augment(x, masks=masks, generator=torch.Generator().manual_seed(1))
    assert out.dtype == (torch.float32 if kind == "u8" else torch.float64) and out.shape == x.shape
    flipped = [torch.equal(out_masks[i], masks[i].flip(-1)) for i in range(64)]
    for i in range(64):
        assert torch.equal(out[i], unit[i].flip(-1) if flipped[i] else unit[i])
    assert 0 < sum(flipped) < 64  # each image its own draw, p = 0.5
    assert torch.equal(A.flip_augment(x, flip_p=0.0), unit)  # nothing else changes a pixel
    assert A.build_augmentation("flip")(x).shape == x.shape
    with pytest.raises(ValueError, match="flip_p"):
        A.flip_augment(x, flip_p=-0.1)


def test_flip_p_defaults_to_torchvisions_trivial_augment_without_a_flip():
    x = _synthetic(8)
    plain = A.trivial_augment(x, generator=torch.Generator().manual_seed(5))
    assert torch.equal(plain, A.trivial_augment(x, flip_p=0.0, generator=torch.Generator().manual_seed(5)))
    with pytest.raises(ValueError, match="flip_p"):
        A.trivial_augment(x, flip_p=1.5)
    flipped = A.trivial_augment(x, flip_p=1.0, generator=torch.Generator().manual_seed(5))
    assert flipped.shape == plain.shape and not torch.equal(flipped, plain)
