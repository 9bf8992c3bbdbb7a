"""CUDA-only behaviour (marked ``cuda``: skipped without a GPU; run by ``benchmarks/gpu_suite.py`` part a).

Each test states what it proves on a GPU that the CPU tests cannot: nvJPEG decoding, CUDA autocast with
GradScaler, device-side RNG, pinned memory, and the absence of host-device synchronisation in our batch hooks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import QUIET_KW, TinyClassifier

import lightning_efficient as le
from lightning_efficient.data import EncodedImages, decode_batch
from lightning_efficient.functional import apply_trivial_augment, batch_to_channels_last, sample_trivial_augment
from lightning_efficient.functional.layout import is_channels_last

pytestmark = pytest.mark.cuda
CUDA = torch.device("cuda")


def _jpeg_folder(root: Path, n: int = 8, size: tuple[int, int] = (72, 56)) -> Path:
    """``root/<class>/<i>.jpg``: smooth colour gradients (nvJPEG and libjpeg-turbo agree closely on them)."""
    for c in ("a", "b"):
        (root / c).mkdir(parents=True, exist_ok=True)
    x = np.linspace(0, 1, size[0])[None, :]
    y = np.linspace(0, 1, size[1])[:, None]
    for i in range(n):
        rgb = np.stack([255 * x * np.ones_like(y), 255 * y * np.ones_like(x), 255 * ((i + 1) / n) * (1 - x) * y], -1)
        Image.fromarray(rgb.astype(np.uint8)).save(root / ("a" if i % 2 else "b") / f"{i}.jpg", quality=95)
    return root


def _encoded_batch(root: Path, size: int = 32) -> EncodedImages:
    dataset = le.FastImageFolder(root, size, train=False, backend="nvjpeg")
    images, _ = le.uint8_collate([dataset[i] for i in range(len(dataset))])
    assert isinstance(images, EncodedImages)
    return images


class TinyNet(TinyClassifier):
    def __init__(self, steps_per_epoch: int = 4, epochs: int = 3) -> None:
        super().__init__(lr=0.1)
        self.epochs = epochs
        self.lrs: list[float] = []
        self.seen: list[tuple[torch.dtype, bool, str]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append((x.dtype, is_channels_last(x), x.device.type))
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        opt = super().configure_optimizers()
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.epochs)}


def _trainer(precision: str, callbacks: list, epochs: int = 3) -> pl.Trainer:
    return pl.Trainer(
        accelerator="gpu",
        devices=1,
        precision=precision,
        max_epochs=epochs,
        **QUIET_KW,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )


def test_decode_augment_channels_last_on_cuda_equals_the_cpu_result(tmp_path: Path) -> None:
    encoded = _encoded_batch(_jpeg_folder(tmp_path))
    on_cpu = decode_batch(encoded, "cpu")
    on_gpu = decode_batch(encoded, CUDA)
    assert on_gpu.device.type == "cuda" and on_gpu.dtype == torch.uint8 and on_gpu.shape == on_cpu.shape
    # nvJPEG and libjpeg-turbo differ in IDCT and chroma upsampling by a few levels at most.
    assert (on_gpu.cpu().float() - on_cpu.float()).abs().mean() < 2.0
    params = sample_trivial_augment(len(on_cpu), generator=torch.Generator().manual_seed(0))
    params_gpu = type(params)(ops=params.ops.to(CUDA), magnitudes=params.magnitudes.to(CUDA))
    cpu = batch_to_channels_last(apply_trivial_augment(on_cpu.float() / 255, params))
    gpu = batch_to_channels_last(apply_trivial_augment(on_cpu.to(CUDA).float() / 255, params_gpu))
    assert is_channels_last(gpu) and gpu.dtype == torch.float32
    assert torch.allclose(gpu.cpu(), cpu, atol=2e-2)  # same draws, same ops: kernels differ only in rounding


def test_the_whole_chain_in_a_fit_delivers_channels_last_float_batches_on_cuda(tmp_path: Path) -> None:
    dataset = le.FastImageFolder(_jpeg_folder(tmp_path), 32, backend="nvjpeg")
    loader = DataLoader(dataset, batch_size=4, collate_fn=le.uint8_collate, pin_memory=True)
    model = TinyNet()
    callbacks = [
        le.GPUDecode(),
        le.GPUAugmentation("trivial_augment", mean=le.IMAGENET_MEAN, std=le.IMAGENET_STD),
        le.ChannelsLast(),
    ]
    _trainer("bf16-mixed", callbacks, epochs=1).fit(model, loader)
    assert model.seen and all(s == (torch.float32, True, "cuda") for s in model.seen)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_fits_with_stepwise_lr_follow_the_schedule_per_step(precision: str) -> None:
    g = torch.Generator().manual_seed(0)
    # Huge inputs make the first fp16 steps overflow, so GradScaler skips them (bf16 needs no scaler).
    x = torch.randn(16, 3, 8, 8, generator=g) * (1e4 if precision == "16-mixed" else 1.0)
    loader = DataLoader(TensorDataset(x, torch.randint(0, 2, (16,), generator=g)), batch_size=4)
    model = TinyNet(steps_per_epoch=4, epochs=3)
    trainer = _trainer(precision, [le.StepwiseLR()])
    trainer.fit(model, loader)
    expected = [0.05 * (1 + np.cos(np.pi * k / 12)) for k in range(12)]  # cosine over 3 epochs of 4 steps
    assert np.allclose(model.lrs, expected, atol=1e-6), model.lrs
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_augmentation_on_cuda_is_seeded_and_drawn_per_sample() -> None:
    images = torch.full((8, 3, 16, 16), 0.5, device=CUDA)
    images[:, :, :8] = 0.9  # some structure for the geometric ops to move
    batch = (images, torch.zeros(8, dtype=torch.long, device=CUDA))

    def run(seed: int) -> torch.Tensor:
        aug = le.GPUAugmentation("trivial_augment", seed=seed)
        return aug.process(batch, augment=True, dtype=torch.float32)[0]

    a, b, c = run(0), run(0), run(1)
    assert a.device.type == "cuda"
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    distinct = {tuple(s.flatten()[:64].tolist()) for s in a.cpu()}
    assert len(distinct) > 1  # per-sample draws: identical inputs come out differently


def test_pinned_memory_and_non_blocking_transfer_with_uint8_collate(tmp_path: Path) -> None:
    dataset = le.FastImageFolder(_jpeg_folder(tmp_path), 32, train=False)
    loader = DataLoader(dataset, batch_size=4, collate_fn=le.uint8_collate, pin_memory=True)
    images, targets = next(iter(loader))
    assert images.is_pinned() and images.dtype == torch.uint8
    moved = images.to(CUDA, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    assert torch.equal(moved.cpu(), images)


def test_our_batch_hooks_do_not_synchronise_host_and_device() -> None:
    model = TinyNet().to(CUDA)
    batch = (
        torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8, device=CUDA),
        torch.zeros(4, dtype=torch.long, device=CUDA),
    )
    aug = le.GPUAugmentation("trivial_augment", mean=le.IMAGENET_MEAN, std=le.IMAGENET_STD, seed=0)
    aug.process(batch, augment=True, dtype=torch.float32)  # warm-up: lazy CUDA initialisation may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = aug.process(batch, augment=True, dtype=torch.float32)
        out = batch_to_channels_last(out)
        model.net(out[0])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert is_channels_last(out[0])


def test_efficiency_report_times_cuda_with_events_and_reports_cuda_memory() -> None:
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(
        TensorDataset(torch.randn(64, 3, 32, 32, generator=g), torch.randint(0, 2, (64,), generator=g)),
        batch_size=8,
        pin_memory=True,
    )
    report = le.EfficiencyReport(verbose=False, skip_first=1)
    _trainer("bf16-mixed", [report, le.ChannelsLast()], epochs=1).fit(TinyNet(), loader)
    s = report.summary()
    assert s["steps"] == 7 and s["samples"] == 56
    assert 0 <= s["data_wait_share"] <= 1 and s["images_per_s"] > 0
    assert s["peak_memory_mb"] > 0 and "CUDA" in report.report()
