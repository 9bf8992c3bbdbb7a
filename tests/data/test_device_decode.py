"""FastImageFolder(backend="nvjpeg") + decode_batch + GPUDecode, exercised on the CPU (no CUDA here).

torchvision's ``decode_jpeg`` takes the same batched call on CPU and CUDA, so everything but nvJPEG itself (the
CUDA kernels) runs here: crop choice in workers, collation, EXIF orientation, fallbacks, errors, Lightning wiring.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from image_helpers import data as _data
from image_helpers import gradient_image as _gradient
from image_helpers import mad as _mad
from PIL import Image
from torch.utils.data import DataLoader
from trainer_helpers import QUIET_KW

from lightning_efficient import FastImageFolder, GPUDecode, uint8_collate
from lightning_efficient.data import EncodedImages, ImageDecodeError, decode_batch


def test_eval_batch_matches_pillow_backend():
    root = _data("hymenoptera", "val")
    nv = FastImageFolder(root, 64, train=False, backend="nvjpeg")
    pil = FastImageFolder(root, 64, train=False)
    idx = list(range(0, len(nv), 9))
    encoded, targets = uint8_collate([nv[i] for i in idx])
    assert isinstance(encoded, EncodedImages) and len(encoded) == len(idx)
    assert targets.dtype == torch.int64 and targets.tolist() == [nv.targets[i] for i in idx]
    images = decode_batch(encoded, "cpu")
    assert images.dtype == torch.uint8 and images.shape == (len(idx), 3, 64, 64)
    for k, i in enumerate(idx):
        assert _mad(images[k], pil[i][0]) < 4


def test_train_crop_is_the_same_window_as_pillow_backend():
    root = _data("hymenoptera", "train")
    nv = FastImageFolder(root, 48, train=True, backend="nvjpeg")
    pil = FastImageFolder(root, 48, train=True, draft=False)  # full-size decode on both sides: only the window
    for i in range(0, len(nv), 40):
        torch.manual_seed(i)
        a = decode_batch([nv[i][0]], "cpu")[0]
        torch.manual_seed(i)
        b = pil[i][0]
        assert _mad(a, b) < 3  # same window; a different window differs by ~25


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_applied_after_device_decode(tmp_path, orientation):
    inverse = {2: 0, 3: 3, 4: 1, 5: 4, 6: 2, 7: 6, 8: 5}  # Image.Transpose that makes the stored image
    oriented = _gradient(96, 64)
    stored = oriented if orientation == 1 else oriented.transpose(Image.Transpose(inverse[orientation]))
    exif = Image.Exif()
    exif[0x0112] = orientation
    (tmp_path / "a").mkdir()
    stored.save(tmp_path / "a" / "x.jpg", quality=95, exif=exif)
    nv = FastImageFolder(tmp_path, (32, 48), train=False, backend="nvjpeg")
    pil = FastImageFolder(tmp_path, (32, 48), train=False)
    got = decode_batch([nv[0][0]], "cpu")[0]
    assert got.shape == (3, 32, 48)
    assert _mad(got, pil[0][0]) < 3


def test_mixed_formats_and_corrupt_file(tmp_path):
    (tmp_path / "a").mkdir()
    _gradient(80, 60).save(tmp_path / "a" / "1.png")
    _gradient(80, 60).convert("L").save(tmp_path / "a" / "2.jpg")
    _gradient(80, 60).convert("CMYK").save(tmp_path / "a" / "3.jpg")
    good = (tmp_path / "a" / "2.jpg").read_bytes()
    (tmp_path / "a" / "4.jpg").write_bytes(good[: len(good) // 2])  # truncated: header readable, data not
    nv = FastImageFolder(tmp_path, 24, train=False, backend="nvjpeg")
    pil = FastImageFolder(tmp_path, 24, train=False)
    batch, _ = uint8_collate([nv[i] for i in range(3)])
    fallbacks: list[str] = []
    images = decode_batch(batch, "cpu", cpu_fallbacks=fallbacks)
    assert [Path(p).name for p in fallbacks] == ["1.png"]  # not a JPEG; torchvision's CPU decoder converts CMYK
    for k in range(3):
        assert _mad(images[k], pil[k][0]) < 6
    gray = images[1]
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[1], gray[2])
    with pytest.raises(ImageDecodeError, match="4.jpg"):
        decode_batch(uint8_collate([nv[i] for i in range(4)])[0], "cpu")


def test_unreadable_header_fails_in_the_worker_naming_the_file(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "bad.jpg").write_bytes(b"not an image")
    with pytest.raises(ImageDecodeError, match="bad.jpg"):
        FastImageFolder(tmp_path, 24, backend="nvjpeg")[0]


def test_skip_mode_skips_truncated_files_in_the_worker(tmp_path):
    (tmp_path / "a").mkdir()
    _gradient(80, 60).save(tmp_path / "a" / "1_good.jpg")
    good = (tmp_path / "a" / "1_good.jpg").read_bytes()
    (tmp_path / "a" / "0_truncated.jpg").write_bytes(good[: len(good) // 2])
    nv = FastImageFolder(tmp_path, 24, backend="nvjpeg", on_error="skip")
    with pytest.warns(UserWarning, match="0_truncated.jpg") as record:
        item, _ = nv[0]
    assert "pass on_error='skip'" not in str(record[0].message)  # no advice to do what was done
    assert item.path.endswith("1_good.jpg") and nv.num_skipped == 1
    assert "bytes" in repr(item) and len(repr(item)) < 300  # the file's bytes are not printed


def test_decode_batch_on_the_whole_batch_says_to_pass_the_images():
    root = _data("hymenoptera", "val")
    nv = FastImageFolder(root, 32, train=False, backend="nvjpeg")
    batch = uint8_collate([nv[0], nv[1]])
    with pytest.raises(TypeError, match=r"decode_batch\(batch\[0\], device\)"):
        decode_batch(batch, "cpu")
    assert decode_batch(batch[0]).shape == (2, 3, 32, 32)  # default device: cuda if available, else cpu


def test_encoded_batch_errors_say_what_to_add():
    root = _data("hymenoptera", "val")
    nv = FastImageFolder(root, 32, train=False, backend="nvjpeg")
    encoded, _ = uint8_collate([nv[0], nv[1]])
    with pytest.raises(AttributeError, match="Add GPUDecode"):
        encoded.float()
    assert "2 files" in repr(encoded)
    again = pickle.loads(pickle.dumps(encoded))  # crosses DataLoader worker queues
    assert len(again) == 2 and again[0].data == encoded[0].data
    with pytest.raises(ValueError, match="empty"):
        decode_batch([], "cpu")


def test_dataloader_workers_yield_encoded_batches():
    root = _data("hymenoptera", "val")
    nv = FastImageFolder(root, 32, train=False, backend="nvjpeg")
    loader = DataLoader(nv, batch_size=8, num_workers=2, collate_fn=uint8_collate, pin_memory=False)
    encoded, targets = next(iter(loader))
    assert isinstance(encoded, EncodedImages) and len(encoded) == 8 and targets.shape == (8,)
    assert decode_batch(encoded, "cpu").shape == (8, 3, 32, 32)


def test_argument_errors(tmp_path):
    (tmp_path / "a").mkdir()
    _gradient(40, 30).save(tmp_path / "a" / "x.jpg")
    with pytest.raises(ValueError, match="nothing to work on"):
        FastImageFolder(tmp_path, 24, backend="nvjpeg", transform=lambda x: x)
    with pytest.raises(ValueError, match="backend='nvjpeg' use one of"):
        FastImageFolder(tmp_path, 24, backend="nvjpeg", interpolation="lanczos")
    with pytest.raises(ValueError, match="interpolation must be one of"):
        GPUDecode(interpolation="lanczos")


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)
        self.seen: list[tuple] = []

    def training_step(self, batch, batch_idx):
        images, targets = batch
        self.seen.append((type(images).__name__, images.dtype, tuple(images.shape)))
        return torch.nn.functional.cross_entropy(self.layer(images.float().mean((2, 3))), targets)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_gpudecode_callback_in_a_trainer_on_cpu():
    root = _data("hymenoptera", "val")
    nv = FastImageFolder(root, 32, train=True, backend="nvjpeg")
    loader = DataLoader(nv, batch_size=4, shuffle=True, collate_fn=uint8_collate)
    model = _Tiny()
    callback = GPUDecode()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=3,
        **QUIET_KW,
        callbacks=[callback],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, loader)
    assert model.seen == [("Tensor", torch.uint8, (4, 3, 32, 32))] * 3
    assert callback.batches_decoded == 3
    assert len([w for w in caught if "GPUDecode: the model is on cpu" in str(w.message)]) == 1
    assert "on_after_batch_transfer" not in model.__dict__  # hook restored at teardown
