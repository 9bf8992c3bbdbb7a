"""DDP subprocess for tests/callbacks/test_stepwise_lr.py: 2 CPU processes (gloo), each saves the LRs it used.

Usage: python ddp_stepwise_script.py OUT_DIR
"""

import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.optim import lr_scheduler as L
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import QUIET_KW, destroy_process_group_at_exit

from lightning_efficient.callbacks.stepwise_lr import StepwiseLR


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.used_lrs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def on_before_optimizer_step(self, optimizer):
        self.used_lrs.append([g["lr"] for g in optimizer.param_groups])

    def configure_optimizers(self):
        opt = torch.optim.SGD(
            [{"params": [self.layer.weight], "lr": 0.4}, {"params": [self.layer.bias], "lr": 0.1}], lr=1.0
        )
        return {"optimizer": opt, "lr_scheduler": L.CosineAnnealingLR(opt, T_max=3, eta_min=0.01)}

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(12, 3, generator=g), torch.randn(12, 1, generator=g)), batch_size=2)


class Save(pl.Callback):
    def __init__(self, out):
        self.out = Path(out)

    def on_train_end(self, trainer, pl_module):
        steps = trainer.callbacks[0].current_steps_per_epoch
        torch.save({"lrs": pl_module.used_lrs, "steps_per_epoch": steps}, self.out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    destroy_process_group_at_exit()
    torch.set_num_threads(1)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=3,
        callbacks=[StepwiseLR(), Save(sys.argv[1])],
        **QUIET_KW,
    )
    trainer.fit(Net())
