"""DDP subprocess for tests/tune/test_tuner.py: ``tune()`` with 2 CPU processes (gloo, strategy="ddp").

Usage: python ddp_tune_script.py OUT_DIR   (each rank writes rankN.json there: its world size, the result and whether
it was reused from the cache; rank 0 prints the table)
"""

import json
import os
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import destroy_process_group_at_exit

from lightning_efficient import tune


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


def _rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("LOCAL_RANK", 0))


if __name__ == "__main__":
    destroy_process_group_at_exit()
    out = Path(sys.argv[1])
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
    result = tune(
        TinyNet(),
        DataLoader(data, batch_size=4),
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        precisions=["32-true"],
        num_workers=False,
        max_seconds=1e6,
    )
    # A real fit with the choice: where tune() reused a stored decision without a fit, this launches rank 1, whose
    # tune() then reads the same file.
    pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(TinyNet(), DataLoader(data, batch_size=4))
    out_result = {k: v for k, v in result.to_dict().items() if k not in ("tuning_s", "reused_from")}
    (out / f"rank{_rank()}.json").write_text(
        json.dumps(
            {
                "world_size": torch.distributed.get_world_size(),
                "result": out_result,
                "reused": result.reused_from is not None,
            }
        )
    )
