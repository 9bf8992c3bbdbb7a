"""One home for crop geometry (lightning_efficient.functional.crop), the backend strategies, Pillow-SIMD detection."""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from image_helpers import gradient_image
from torchvision import transforms as T

import lightning_efficient.data.decode.flavour as flavour
from lightning_efficient import FastImageFolder
from lightning_efficient.data import is_pillow_simd
from lightning_efficient.data.backends import BACKENDS, NvjpegBackend, PilBackend, TorchvisionBackend, make_backend
from lightning_efficient.data.crop_choice import CropChoice
from lightning_efficient.data.decode import center_crop_box, random_resized_crop_box
from lightning_efficient.functional import crop


def test_old_import_paths_are_the_one_home():
    assert random_resized_crop_box is crop.random_resized_crop_window
    assert center_crop_box is crop.center_crop_box


@settings(max_examples=60, deadline=None)
@given(
    w=st.integers(1, 3000),
    h=st.integers(1, 3000),
    seed=st.integers(0, 2**31 - 1),
    smin=st.floats(0.01, 1.0),
    rlo=st.floats(0.2, 1.0),
    rhi=st.floats(1.0, 5.0),
)
def test_random_resized_crop_window_is_torchvision(w, h, seed, smin, rlo, rhi):
    torch.manual_seed(seed)
    ours = crop.random_resized_crop_window(w, h, (smin, 1.0), (rlo, rhi))
    torch.manual_seed(seed)
    theirs = T.RandomResizedCrop.get_params(torch.empty(1, h, w), [smin, 1.0], [rlo, rhi])
    assert ours == tuple(theirs)


@pytest.mark.parametrize(("w", "h"), [(100, 10), (10, 100), (50, 50)])
def test_fallback_is_the_central_crop_clamped_to_ratio(w, h):
    top, left, ch, cw = crop.random_resized_crop_fallback(w, h, (3 / 4, 4 / 3))
    assert 0 <= top and 0 <= left and top + ch <= h and left + cw <= w
    assert 3 / 4 - 0.05 <= cw / ch <= 4 / 3 + 0.05 or (cw, ch) == (w, h)
    assert crop.crop_window_to_box((top, left, ch, cw)) == (float(left), float(top), float(left + cw), float(top + ch))


def test_crop_choice_train_and_eval():
    train = CropChoice((32, 32), True, (0.08, 1.0), (3 / 4, 4 / 3), 37)
    torch.manual_seed(0)
    box = train.box(640, 480)
    torch.manual_seed(0)
    top, left, h, w = crop.random_resized_crop_window(640, 480)
    assert box == (left, top, left + w, top + h)
    ev = CropChoice((32, 32), False, (0.08, 1.0), (3 / 4, 4 / 3), 37)
    assert ev.box(640, 480) == crop.center_crop_box(640, 480, (32, 32), 37)


def test_backend_chosen_once_per_dataset(tmp_path):
    (tmp_path / "c").mkdir()
    gradient_image(64, 48).save(tmp_path / "c" / "x.jpg", quality=95)
    for name, cls in (("pil", PilBackend), ("torchvision", TorchvisionBackend), ("nvjpeg", NvjpegBackend)):
        ds = FastImageFolder(tmp_path, 16, backend=name)
        assert type(ds.decoder) is cls and BACKENDS[name] is cls and ds.backend == name
        assert pickle.loads(pickle.dumps(ds)).decoder == ds.decoder  # DataLoader workers get a copy
    assert not hasattr(FastImageFolder, "output_size")  # dead code removed: use .size


def test_make_backend_validates():
    assert make_backend("pil", interpolation="lanczos").resize_engine == "pil"
    with pytest.raises(ValueError, match="Unknown backend"):
        make_backend("opencv")
    with pytest.raises(ValueError, match="backend='torchvision' use one of"):
        make_backend("torchvision", interpolation="box")


def test_is_pillow_simd_reads_the_distribution(monkeypatch):
    import PIL

    assert is_pillow_simd() is False  # the test environment has stock Pillow
    assert flavour.pil_distribution() == "Pillow"
    monkeypatch.setattr(flavour, "_installed_distributions", lambda: (f"Pillow-SIMD=={PIL.__version__}",))
    assert is_pillow_simd() and flavour.pil_flavour() == f"Pillow-SIMD {PIL.__version__}"
    # both installed with the imported version: the metadata cannot tell, the '.post' suffix decides
    monkeypatch.setattr(
        flavour, "_installed_distributions", lambda: ("Pillow-SIMD==9.5.0.post2", "Pillow==9.5.0.post2")
    )
    monkeypatch.setattr(PIL, "__version__", "9.5.0.post2")
    assert flavour.pil_distribution() is None and is_pillow_simd()
