"""DDP subprocess for tests/callbacks/test_efficiency_report.py: 2 CPU processes (gloo) with EfficiencyReport.

Usage: python ddp_report_script.py OUT_DIR   (rank 0 writes summary.json there; the report is printed once)
"""

import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import destroy_process_group_at_exit

from lightning_efficient import EfficiencyReport


class TinyNet(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(
            TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 2, (64,), generator=g)), batch_size=8
        )


if __name__ == "__main__":
    destroy_process_group_at_exit()
    out = Path(sys.argv[1])
    report = EfficiencyReport(skip_first=1)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[report],
    )
    trainer.fit(TinyNet())
    if trainer.is_global_zero:
        summary = report.summary()
        (out / "summary.json").write_text(json.dumps({k: summary[k] for k in ("steps", "samples", "world_size")}))
