"""Every callback can be configured from a LightningCLI YAML file."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import TinyClassifier

import lightning_efficient as le

pytest.importorskip("jsonargparse")
from pytorch_lightning.cli import LightningCLI

CONFIG = """
seed_everything: 0
trainer:
  max_epochs: 1
  accelerator: cpu
  devices: 1
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  precision: bf16-mixed
  callbacks:
    - class_path: lightning_efficient.GPUAugmentation
      init_args:
        augmentation: trivial_augment
        mean: [0.485, 0.456, 0.406]
        std: [0.229, 0.224, 0.225]
    - class_path: lightning_efficient.ChannelsLast
    - class_path: lightning_efficient.StepwiseLR
      init_args:
        steps_per_epoch: null
    - class_path: lightning_efficient.EfficiencyReport
      init_args:
        log_every_n_steps: 10
        skip_first: 1
        verbose: false
"""


class CLIModel(TinyClassifier):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__(lr=lr)

    def configure_optimizers(self):
        opt = super().configure_optimizers()
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1)}


class CLIData(pl.LightningDataModule):
    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=g)
        return DataLoader(TensorDataset(x, torch.randint(0, 2, (16,), generator=g)), batch_size=4)


def test_all_callbacks_from_yaml(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["cli"])  # LightningCLI warns when both `args` and pytest's argv are given
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    cli = LightningCLI(CLIModel, CLIData, args=["--config", str(path)], run=False, save_config_callback=None)
    types = [type(c) for c in cli.trainer.callbacks]
    for cls in (le.GPUAugmentation, le.ChannelsLast, le.StepwiseLR, le.EfficiencyReport):
        assert cls in types
    report = next(c for c in cli.trainer.callbacks if isinstance(c, le.EfficiencyReport))
    assert report.log_every_n_steps == 10 and report.skip_first == 1
    cli.trainer.fit(cli.model, cli.datamodule)
    assert report.summary()["steps"] == 3
    assert all(c.ok is not False for c in report.checks if c.practice != "input pipeline keeps up")
