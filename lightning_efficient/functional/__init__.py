"""Functional cores: pure functions on tensors, modules and schedulers, usable without a Trainer.

Submodules: ``layout`` (channels_last), ``schedules`` (LR as a function of fractional epochs),
``augment`` (per-sample batch augmentation).
"""
