"""DDP subprocess for tests/callbacks/test_progressive_resize.py: 2 CPU processes (gloo); each rank writes the image
sides its training steps saw to rankN.json.

Usage: python ddp_resize_script.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import QUIET_KW, destroy_process_group_at_exit

from lightning_efficient import ProgressiveResize


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 2, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.sides = []

    def training_step(self, batch, batch_idx):
        self.sides.append(batch[0].shape[-1])
        return self.net(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    destroy_process_group_at_exit()
    model = Net()
    data = TensorDataset(torch.rand(8, 3, 32, 32), torch.zeros(8))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=4,
        **QUIET_KW,
        callbacks=[ProgressiveResize(min_side=0)],
    )
    trainer.fit(model, DataLoader(data, batch_size=2))
    (Path(sys.argv[1]) / f"rank{trainer.global_rank}.json").write_text(json.dumps(model.sides))
