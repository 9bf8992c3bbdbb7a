"""ChannelsLast under DDP: 2 CPU processes, gloo. Run by
``tests/callbacks/test_channels_last.py::test_ddp_two_processes``.

Usage: ``python tests/callbacks/ddp_channels_last_script.py OUT_DIR``. Lightning's ``strategy="ddp"`` re-launches this
script for rank 1. Each rank writes ``OUT_DIR/rank{r}.json`` with what it saw: the layout of every batch
``training_step``/``validation_step`` received, whether the conv weights are channels_last inside the
DDP-wrapped model and after training, and a checksum of its final parameters (equal across ranks iff DDP's
gradient all-reduce worked on the channels_last gradients).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import QUIET_KW, destroy_process_group_at_exit

from lightning_efficient.callbacks.channels_last import ChannelsLast
from lightning_efficient.functional.layout import is_channels_last


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 4),
        )
        self.seen: list[bool] = []
        self.wrapped_weights_cl: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(is_channels_last(x) and y.dtype == torch.long)
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(is_channels_last(x))

    def on_train_start(self) -> None:
        wrapped = self.trainer.strategy.model
        self.wrapped_weights_cl = [
            isinstance(wrapped, DistributedDataParallel),
            *(is_channels_last(m.weight) for m in wrapped.modules() if isinstance(m, nn.Conv2d)),
        ]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def main(out_dir: Path) -> None:
    pl.seed_everything(0)
    data = TensorDataset(torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,)))
    model = Net()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        callbacks=[ChannelsLast()],
        **QUIET_KW,
    )
    trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    rank = trainer.global_rank
    result = {
        "rank": rank,
        "world_size": trainer.world_size,
        "seen": model.seen,
        "wrapped_weights_cl": model.wrapped_weights_cl,
        "final_weights_cl": [is_channels_last(m.weight) for m in model.modules() if isinstance(m, nn.Conv2d)],
        "checksum": float(sum(p.detach().double().sum() for p in model.parameters())),
        "report": trainer.callbacks[0].report().summary(),
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    destroy_process_group_at_exit()
    main(Path(sys.argv[1]))
