"""EfficiencyReport: data-bound vs compute-bound runs, each checklist line both ways, DDP prints once."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from trainer_helpers import TRAINER_KW, TinyClassifier, ddp_script_env

import lightning_efficient as le
from lightning_efficient.functional.checklist import checklist
from lightning_efficient.functional.measurement import Measurement
from lightning_efficient.functional.run_facts import RunFacts, verdict


class SlowDataset(Dataset):
    """Each item takes ``delay`` seconds to 'decode': a stand-in for a slow input pipeline."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.zeros(3, 8, 8), i % 2


def _fit(model, loader, report, callbacks_extra=(), **kw):
    trainer = pl.Trainer(
        max_epochs=1,
        **TRAINER_KW,
        callbacks=[*callbacks_extra, report],
        **kw,
    )
    trainer.fit(model, loader)
    return trainer


def test_slow_loader_is_data_bound_and_the_advice_says_what_to_do(capsys):
    report = le.EfficiencyReport(skip_first=1)
    # 4 items x 40 ms per batch of an 8x8 image through a 1-layer net: waiting dominates by far.
    _fit(TinyClassifier(), DataLoader(SlowDataset(24, 0.04), batch_size=4, num_workers=0), report)
    s = report.summary()
    assert s["verdict"] == "data-bound"
    assert s["data_wait_share"] > 0.5
    assert s["steps"] == 5 and s["samples"] == 20
    first = report.checks[0]
    assert first.ok is False and "waiting for data" in first.detail
    assert "raise num_workers to" in first.advice
    out = capsys.readouterr().out
    assert "Efficiency report: data-bound" in out and "raise num_workers to" in out


def test_fast_loader_is_compute_bound():
    report = le.EfficiencyReport(skip_first=1, verbose=False)
    g = torch.Generator().manual_seed(0)
    # 16 steps of in-memory batches: one scheduling hiccup of a busy machine cannot tip the share over 25%.
    data = TensorDataset(torch.randn(256, 3, 64, 64, generator=g), torch.randint(0, 2, (256,), generator=g))
    _fit(TinyClassifier(width=64), DataLoader(data, batch_size=16), report)
    s = report.summary()
    assert s["verdict"] == "compute-bound"
    assert 0.0 <= s["data_wait_share"] < 0.25
    assert s["images_per_s"] > 0 and s["peak_memory_mb"] > 0
    assert report.checks[0].ok is True


class SlowCheckpoint(pl.callbacks.ModelCheckpoint):
    """A checkpoint saved every step that takes 250 ms (a large model on a slow disk)."""

    def on_train_batch_end(self, *args, **kwargs):
        time.sleep(0.25)
        super().on_train_batch_end(*args, **kwargs)


def test_time_other_callbacks_spend_between_steps_is_not_data_wait(tmp_path, capsys):
    report = le.EfficiencyReport(skip_first=1)
    data = TensorDataset(torch.randn(24, 3, 8, 8), torch.randint(0, 2, (24,)))  # in memory: fetching costs ~0
    ckpt = SlowCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ckpt, report],
    )
    trainer.fit(TinyClassifier(), DataLoader(data, batch_size=4))
    s = report.summary()
    assert s["verdict"] == "compute-bound" and s["data_wait_share"] < 0.25, s  # was data-bound: the save counted
    assert s["other_share"] > 0.5  # 250 ms of each step happened in the checkpoint callback
    assert report.checks[0].ok is True and "raise num_workers" not in report.report()
    assert "other (transfer, hooks, callbacks)" in capsys.readouterr().out


def test_metrics_reach_the_logger(tmp_path):
    report = le.EfficiencyReport(log_every_n_steps=2, skip_first=0, verbose=False)
    data = TensorDataset(torch.randn(32, 3, 8, 8), torch.randint(0, 2, (32,)))
    logger = pl.loggers.CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[report],
        log_every_n_steps=2,
    )  # Lightning warns when its interval exceeds the 8 batches
    trainer.fit(TinyClassifier(), DataLoader(data, batch_size=4))
    text = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    for name in ("efficiency/images_per_s", "efficiency/data_wait_share", "efficiency/step_time_s"):
        assert name in text


def test_the_measurement_skips_warmup_and_computes_shares():
    t = Measurement(skip_first=1)
    t.add(100.0, 0.0, 100.0, 8)  # warm-up, ignored
    t.add(1.0, 1.0, 2.0, 8)
    t.add(1.0, 0.0, 3.0, 8)
    assert t.steps == 2 and t.samples == 16
    assert t.data_wait_share == pytest.approx(2 / 8)
    assert t.transform_share == pytest.approx(1 / 8)
    assert t.images_per_s == pytest.approx(16 / 8)
    assert math.isnan(Measurement().images_per_s)
    assert verdict(0.25) == "data-bound" and verdict(0.24) == "compute-bound"


BASE = dict(
    precision="bf16-mixed",
    recommended_precision="bf16-mixed",
    accelerator="cpu",
    model_channels_last=1.0,
    inputs_channels_last=True,
    lr_per_step=True,
    device_augmentation=True,
    num_workers=2,
    cpu_cores=2,
    pin_memory=True,
    persistent_workers=True,
    pillow_simd=True,
    decodes_images=True,
    epochs=3,
)


def _check(facts: RunFacts, practice: str, share: float = 0.05):
    return next(c for c in checklist(facts, share) if c.practice == practice)


@pytest.mark.parametrize(
    "practice, bad, advice",
    [
        ("mixed precision", dict(precision="32-true"), "precision='bf16-mixed'"),
        ("model channels_last", dict(model_channels_last=0.0), "ChannelsLast()"),
        ("inputs channels_last", dict(inputs_channels_last=False), "ChannelsLast()"),
        ("LR stepped per optimizer step", dict(lr_per_step=False), "StepwiseLR()"),
        (
            "augmentation on the device",
            dict(device_augmentation=False, cpu_augmentation=("TrivialAugmentWide",)),
            "GPUAugmentation",
        ),
        ("DataLoader workers", dict(num_workers=0), "num_workers=2"),
        ("persistent_workers", dict(persistent_workers=False), "persistent_workers=True"),
        ("Pillow-SIMD", dict(pillow_simd=False), "pillow-simd"),
    ],
)
def test_each_checklist_line_both_ways(practice, bad, advice):
    good = _check(RunFacts(**BASE), practice, share=0.6)
    assert good.ok is True, good
    failing = _check(RunFacts(**{**BASE, **bad}), practice, share=0.6)
    assert failing.ok is False, failing
    assert advice in failing.advice
    assert "->" in failing.line() and failing.line().startswith("[ ]")


def test_pin_memory_only_checked_on_cuda():
    assert not any(c.practice == "pin_memory" for c in checklist(RunFacts(**BASE), 0.1))
    cuda = RunFacts(**{**BASE, "accelerator": "cuda", "pin_memory": False})
    assert _check(cuda, "pin_memory").ok is False


def test_data_wait_line_recommends_the_right_fix():
    facts = RunFacts(
        **{
            **BASE,
            "device_augmentation": False,
            "cpu_augmentation": ("TrivialAugmentWide",),
            "num_workers": 1,
            "cpu_cores": 6,
        }
    )
    line = checklist(facts, 0.62)[0]
    assert line.ok is False
    assert line.detail.startswith("62% of step time is spent waiting for data")
    assert "move augmentation to GPUAugmentation" in line.advice and "raise num_workers to 6" in line.advice
    assert checklist(facts, 0.1)[0].ok is True


def test_report_sees_recipe_practices(capsys):
    data = TensorDataset(torch.randn(32, 3, 16, 16), torch.randint(0, 2, (32,)))
    kw = le.recipe(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    report = next(c for c in kw["callbacks"] if isinstance(c, le.EfficiencyReport))
    pl.Trainer(**kw).fit(TinyClassifier(), DataLoader(data, batch_size=8))
    checks = {c.practice: c for c in report.checks}
    assert checks["mixed precision"].ok is True
    assert checks["model channels_last"].ok is True
    assert checks["inputs channels_last"].ok is True

    plain = le.EfficiencyReport(verbose=False)
    _fit(TinyClassifier(), DataLoader(data, batch_size=8), plain, precision="32-true")
    checks = {c.practice: c for c in plain.checks}
    assert checks["model channels_last"].ok is False
    assert checks["inputs channels_last"].ok is False


class PlateauNet(TinyClassifier):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}


class CosineNet(TinyClassifier):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, 2)}


class Unsized(torch.utils.data.IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        return iter([(torch.randn(3, 16, 16, generator=g), int(i % 2)) for i in range(16)])


def test_an_lr_left_per_epoch_by_stepwise_lr_is_explained_not_advised_again():
    data = TensorDataset(torch.randn(32, 3, 16, 16), torch.randint(0, 2, (32,)))
    plateau = le.EfficiencyReport(verbose=False)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, callbacks=[le.StepwiseLR(verbose=False), plateau])  # fmt: skip
    trainer.fit(PlateauNet(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    check = {c.practice: c for c in plateau.checks}["LR stepped per optimizer step"]
    assert check.ok is None and "ReduceLROnPlateau" in check.detail and "StepwiseLR()" not in check.advice
    unsized = le.EfficiencyReport(verbose=False)
    with pytest.warns(UserWarning, match="steps_per_epoch"):
        _fit(CosineNet(), DataLoader(Unsized(), batch_size=8), unsized, [le.StepwiseLR(verbose=False)])
    check = {c.practice: c for c in unsized.checks}["LR stepped per optimizer step"]
    assert check.ok is False and "StepwiseLR(steps_per_epoch=N)" in check.advice and "no length" in check.detail


@pytest.mark.ddp
def test_ddp_two_processes_print_one_report(tmp_path):
    """DDP (2 CPU processes, gloo, strategy="ddp" in a subprocess): figures gathered, report printed once."""
    script = Path(__file__).with_name("ddp_report_script.py")
    env = ddp_script_env()
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=240, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("Efficiency report:") == 1, result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    # 64 samples / 2 ranks / batch 8 = 4 batches per rank, the first skipped: 3 x 8 samples x 2 ranks counted.
    assert summary == {"steps": 6, "samples": 48, "world_size": 2}
    assert "48 samples" in result.stdout


def test_cuda_event_code_path_on_cpu_gives_the_same_verdicts():
    from lightning_efficient.functional.timing import CudaEventClock, HostEvent

    slow = le.EfficiencyReport(skip_first=1, verbose=False, clock=CudaEventClock(HostEvent))
    _fit(TinyClassifier(), DataLoader(SlowDataset(24, 0.04), batch_size=4, num_workers=0), slow)
    s = slow.summary()
    assert s["clock"] == "cuda events" and s["verdict"] == "data-bound" and s["steps"] == 5
    assert len(s["peak_memory_mb_per_device"]) == 1 and s["peak_memory_mb"] > 0


def test_on_device_transforms_are_timed_through_the_pipeline_clock():
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randint(0, 256, (32, 3, 32, 32), dtype=torch.uint8, generator=g), torch.randint(0, 2, (32,), generator=g)
    )
    report = le.EfficiencyReport(skip_first=1, verbose=False)
    _fit(
        TinyClassifier(),
        DataLoader(data, batch_size=8),
        report,
        callbacks_extra=[le.GPUAugmentation("trivial_augment")],
    )
    s = report.summary()
    assert 0 < s["transform_share"] < 1
    assert {c.practice: c.ok for c in report.checks}["augmentation on the device"] is True


@pytest.mark.parametrize("clock", ["sundial", object()])
def test_a_wrong_clock_is_rejected(clock):
    with pytest.raises(ValueError, match="clock"):
        le.EfficiencyReport(clock=clock)


class TwoLoaderNet(TinyClassifier):
    def training_step(self, batch, batch_idx):
        parts = batch.values() if isinstance(batch, dict) else batch
        return sum(nn.functional.cross_entropy(self.net(x), y) for x, y in parts)


def _data(n: int) -> TensorDataset:
    return TensorDataset(torch.randn(n, 3, 8, 8), torch.randint(0, 2, (n,)))


@pytest.mark.parametrize("given", ["list", "dict", "combined"])
def test_every_training_loaders_images_are_counted(given):
    small, large = DataLoader(_data(16), batch_size=2), DataLoader(_data(48), batch_size=6)
    from pytorch_lightning.utilities import CombinedLoader

    loaders = {
        "list": [small, large],
        "dict": {"small": small, "large": large},
        "combined": CombinedLoader([small, large], "max_size_cycle"),
    }[given]
    report = le.EfficiencyReport(skip_first=0, verbose=False)
    _fit(TwoLoaderNet(), loaders, report)
    figures = report.summary()
    assert figures["steps"] == 8 and figures["samples"] == 8 * (2 + 6)  # every loader's images, not the first's
    assert figures["samples_per_loader"] == [16, 48]
    assert re.search(r"images per training loader +16, 48 \(every batch\)", report.report())


def test_one_loader_counts_as_before():
    report = le.EfficiencyReport(skip_first=0, verbose=False)
    _fit(TinyClassifier(), DataLoader(_data(16), batch_size=4), report)
    assert report.summary()["samples"] == 16 and report.summary()["samples_per_loader"] == [16]
    assert "images per training loader" not in report.report()
