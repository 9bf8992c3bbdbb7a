"""Shared pieces of the tests' fits: the Trainer settings (one CPU process, nothing written, no progress output),
the tiny image classifier most fits train, and DDP clean-up."""

from __future__ import annotations

import atexit
import os
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn

#: ``pl.Trainer(accelerator=..., devices=..., **QUIET_KW)``: no logger, checkpoints, progress bar or model summary.
QUIET_KW = dict(
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)

#: ``pl.Trainer(**TRAINER_KW, ...)``: CPU, one device, and :data:`QUIET_KW`.
TRAINER_KW = dict(accelerator="cpu", devices=1, **QUIET_KW)


class TinyClassifier(pl.LightningModule):
    """conv(3 -> ``width``, 3x3, padding 1) -> ReLU -> global average pool -> Linear(``width``, 2) in ``self.net``;
    cross-entropy on ``(images, targets)`` batches; plain SGD at ``lr``. Tests subclass it to record what they check.
    """

    def __init__(self, width: int = 8, lr: float = 0.01) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 2)
        )
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def _destroy_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def destroy_process_group_at_exit() -> None:
    """Destroy the default process group at interpreter exit, while the interpreter is still whole.

    Lightning's DDP strategies never destroy the group; left to interpreter finalization, Gloo's worker threads can
    abort the process after training has finished ("terminate called without an active exception", SIGABRT; see
    pytorch/pytorch#179291 and #190489). Call it once per DDP process; calling it again changes nothing.
    """
    atexit.unregister(_destroy_process_group)
    atexit.register(_destroy_process_group)


class DestroyProcessGroupAtExit(pl.Callback):
    """``destroy_process_group_at_exit()`` in every process of a fit: for ``ddp_spawn``, whose processes run no test
    code of their own."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        destroy_process_group_at_exit()


def ddp_script_env(**extra: str) -> dict[str, str]:
    """The environment for a DDP script run in a subprocess: warnings off, and ``tests/`` importable (this module)."""
    path = os.pathsep.join(p for p in (str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=path, **extra)
