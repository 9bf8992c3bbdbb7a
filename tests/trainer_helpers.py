"""Shared Trainer settings for the tests: one CPU process, nothing written, no progress output."""

from __future__ import annotations

#: ``pl.Trainer(**TRAINER_KW, ...)``: CPU, one device, no logger, checkpoints, progress bar or model summary.
TRAINER_KW = dict(
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
