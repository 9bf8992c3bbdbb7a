"""Thin Lightning callbacks; each wires one functional core (``lightning_efficient.functional``) into hooks."""

from lightning_efficient.callbacks.channels_last import ChannelsLast
from lightning_efficient.callbacks.efficiency_report import EfficiencyReport
from lightning_efficient.callbacks.gpu_augmentation import GPUAugmentation
from lightning_efficient.callbacks.gpu_decode import GPUDecode
from lightning_efficient.callbacks.progressive_resize import ProgressiveResize
from lightning_efficient.callbacks.stepwise_lr import StepwiseLR

__all__ = ["ChannelsLast", "EfficiencyReport", "GPUAugmentation", "GPUDecode", "ProgressiveResize", "StepwiseLR"]
