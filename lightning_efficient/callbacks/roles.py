"""What each kind of callback does to a training run, by type: the one table that tune() (which callbacks train
along in its measuring fits) and EfficiencyReport (which callbacks spend time between steps) read.

Roles: ``"step cost"`` (changes the cost of a training step: augmentation, layout, decoding, frozen layers,
gradient accumulation, weight averaging, pruning), ``"writes"``, ``"stops"``, ``"searches"``, ``"logs"``,
``"resizes"`` (changes what the model sees over the run; tune() measures without it, at the final size) and
``"factor"`` (a setting tune() measures itself). A callback of no listed type has the role ``"step cost"``.
"""

from __future__ import annotations

from typing import Any

#: ``(class name, role, why)``: the first class a callback is an instance of decides; Lightning's classes are looked
#: up in the package of the run's Trainer (``pytorch_lightning.callbacks`` or ``lightning.pytorch.callbacks``), this
#: package's in :mod:`lightning_efficient.callbacks`.
ROLES: tuple[tuple[str, str, str], ...] = (
    ("Checkpoint", "writes", "saves checkpoints"),  # ModelCheckpoint, OnExceptionCheckpoint
    ("EarlyStopping", "stops", "stops the run on a metric"),
    ("Timer", "stops", "stops the run after a time"),
    ("SpikeDetection", "stops", "stops the run on a loss spike"),
    ("LearningRateFinder", "searches", "runs its own range test"),
    ("BatchSizeFinder", "searches", "tries its own batch sizes"),
    ("LearningRateMonitor", "logs", "logs learning rates"),
    ("ProgressBar", "logs", "draws progress"),  # TQDMProgressBar, RichProgressBar
    ("ModelSummary", "logs", "prints a summary"),  # RichModelSummary
    ("DeviceStatsMonitor", "logs", "logs device statistics"),
    ("ThroughputMonitor", "logs", "logs throughput"),
    ("BasePredictionWriter", "writes", "writes predictions"),
    ("StochasticWeightAveraging", "writes", "averages at epoch ends and replaces the LR schedule"),
    ("WeightAveraging", "step cost", "updates an average after optimizer steps"),  # EMAWeightAveraging
    ("ModelPruning", "step cost", "pruning masks change a step's cost"),
    ("BaseFinetuning", "step cost", "frozen layers change a step's cost"),  # BackboneFinetuning
    ("GradientAccumulationScheduler", "step cost", "changes the optimizer steps per batch"),
    ("StepwiseLR", "writes", "sets learning rates (tune()'s measuring fits leave LR schedulers out)"),
    ("EfficiencyReport", "logs", "measures and reports"),
    ("GPUDecode", "step cost", "decodes on the device"),
    ("GPUAugmentation", "step cost", "augments on the device"),
    ("ChannelsLast", "factor", "a setting tune() measures itself"),
    ("ProgressiveResize", "resizes", "changes the image size over the run (tune() measures at the final size)"),
)


def role(callback: Any, package: Any) -> str:
    """The role of ``callback`` (:data:`ROLES`) in a run of the Lightning ``package`` (``pytorch_lightning`` or
    ``lightning.pytorch``)."""
    import lightning_efficient.callbacks as ours

    for name, kind, _ in ROLES:
        cls = getattr(package.callbacks, name, None) or getattr(ours, name, None)
        if cls is not None and isinstance(callback, cls):
            return kind
    return "step cost"
