"""DDP subprocess for tests/callbacks/test_efficiency_report.py: 2 CPU processes (gloo) with EfficiencyReport.

Usage: python ddp_report_script.py OUT_DIR   (rank 0 writes summary.json there; the report is printed once)
"""

import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import QUIET_KW, TinyClassifier, destroy_process_group_at_exit

from lightning_efficient import EfficiencyReport


class TinyNet(TinyClassifier):
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
        **QUIET_KW,
        callbacks=[report],
    )
    trainer.fit(TinyNet())
    if trainer.is_global_zero:
        summary = report.summary()
        (out / "summary.json").write_text(json.dumps({k: summary[k] for k in ("steps", "samples", "world_size")}))
