"""A run stopped by a checkpoint saved mid-epoch inside ProgressiveResize's ramp, and the same run uninterrupted:
what each training batch saw (image side, learning rate, GPUAugmentation's random stream). Used in-process by
tests/callbacks/test_mid_epoch_resume.py, and as a DDP subprocess (2 CPU processes, gloo):

    python mid_epoch_resume.py OUT_DIR DEVICES ACCUMULATE    # writes OUT_DIR/{full,resumed}-rankN.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import QUIET_KW, destroy_process_group_at_exit

import lightning_efficient as le

EPOCHS, SIDE, PER_RANK = 10, 32, 8  #: 4 batches of 2 per epoch and rank; the ramp spans epochs 5-8
STOP_AFTER = 26  #: batches before the checkpoint: epoch 6, after its batch 1 (epoch start 16 px, batch 2 24 px)


class Net(pl.LightningModule):
    """Records ``(epoch, batch_idx, side, lr, augmentation stream)`` of every training batch in ``seen``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
        self.seen: list[list] = []

    def training_step(self, batch, batch_idx):
        augment = next(c for c in self.trainer.callbacks if isinstance(c, le.GPUAugmentation))
        state = augment.generator(batch[0].device).get_state().numpy().tobytes()
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.seen.append([self.current_epoch, batch_idx, batch[0].shape[-1], lr, hashlib.sha1(state).hexdigest()])
        return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=1)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS - 1)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warmup, cosine], milestones=[1])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


def loader(devices: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    n = PER_RANK * devices
    images = torch.randint(0, 256, (n, 3, SIDE, SIDE), dtype=torch.uint8, generator=g)
    return DataLoader(TensorDataset(images, torch.randint(0, 2, (n,), generator=g)), batch_size=2)


def fit(devices: int, accumulate: int, root: Path, ckpt: Path | None = None, saver: bool = False) -> tuple[Net, int]:
    """One fit of the run; ``saver``: write a checkpoint after :data:`STOP_AFTER` batches; returns (model, rank)."""
    pl.seed_everything(0, verbose=False)
    model = Net()
    callbacks = [le.ProgressiveResize(min_side=0), le.GPUAugmentation("trivial_augment", seed=1), le.StepwiseLR()]
    if saver:
        every = STOP_AFTER // accumulate
        callbacks.append(
            pl.callbacks.ModelCheckpoint(root, filename="{step}", every_n_train_steps=every, save_top_k=-1)
        )
    ddp = dict(strategy="ddp", devices=devices) if devices > 1 else dict(devices=1)
    trainer = pl.Trainer(
        accelerator="cpu",
        **ddp,
        max_epochs=EPOCHS,
        accumulate_grad_batches=accumulate,
        **{**QUIET_KW, "enable_checkpointing": saver},
        callbacks=callbacks,
        default_root_dir=root,
    )
    trainer.fit(model, loader(devices), ckpt_path=ckpt)
    return model, trainer.global_rank


def both(devices: int, accumulate: int, root: Path) -> tuple[list, list]:
    """``(seen by the uninterrupted run from the checkpoint on, seen by the resumed run)`` on this rank."""
    full, _ = fit(devices, accumulate, root / "full", saver=True)
    ckpt = root / "full" / f"step={STOP_AFTER // accumulate}.ckpt"
    resumed, rank = fit(devices, accumulate, root / "resumed", ckpt=ckpt)
    return full.seen[STOP_AFTER:], resumed.seen


if __name__ == "__main__":
    destroy_process_group_at_exit()
    out, devices, accumulate = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    full, _ = fit(devices, accumulate, out / "full", saver=True)
    resumed, rank = fit(
        devices, accumulate, out / "resumed", ckpt=out / "full" / f"step={STOP_AFTER // accumulate}.ckpt"
    )
    (out / f"full-rank{rank}.json").write_text(json.dumps(full.seen[STOP_AFTER:]))
    (out / f"resumed-rank{rank}.json").write_text(json.dumps(resumed.seen))
