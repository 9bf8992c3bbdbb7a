"""What each kind of callback does to a training run, by type: the one table that tune() (which callbacks train
along in its measuring fits) and EfficiencyReport (which callbacks spend time between steps) read.

The roles are the members of :class:`Role`. A callback of no listed type has the role ``Role.STEP_COST``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """What a callback does to a run (members are strings: ``Role.STEP_COST == "step cost"``)."""

    #: changes the cost of a training step: augmentation, layout, decoding, frozen layers, gradient
    #: accumulation, weight averaging, pruning (tune()'s measuring fits keep it)
    STEP_COST = "step cost"
    WRITES = "writes"  #: saves checkpoints, predictions, or sets learning rates
    STOPS = "stops"  #: stops the run
    SEARCHES = "searches"  #: runs a search of its own
    LOGS = "logs"  #: logs or draws
    RESIZES = "resizes"  #: changes what the model sees over the run (tune() measures at the final size)
    FACTOR = "factor"  #: a setting tune() measures itself


#: ``(class name, role, why)``: the first class a callback is an instance of decides; Lightning's classes are looked
#: up in the package of the run's Trainer (``pytorch_lightning.callbacks`` or ``lightning.pytorch.callbacks``), this
#: package's in :mod:`lightning_efficient.callbacks`.
ROLES: tuple[tuple[str, Role, str], ...] = (
    ("Checkpoint", Role.WRITES, "saves checkpoints"),  # ModelCheckpoint, OnExceptionCheckpoint
    ("EarlyStopping", Role.STOPS, "stops the run on a metric"),
    ("Timer", Role.STOPS, "stops the run after a time"),
    ("SpikeDetection", Role.STOPS, "stops the run on a loss spike"),
    ("LearningRateFinder", Role.SEARCHES, "runs its own range test"),
    ("BatchSizeFinder", Role.SEARCHES, "tries its own batch sizes"),
    ("LearningRateMonitor", Role.LOGS, "logs learning rates"),
    ("ProgressBar", Role.LOGS, "draws progress"),  # TQDMProgressBar, RichProgressBar
    ("ModelSummary", Role.LOGS, "prints a summary"),  # RichModelSummary
    ("DeviceStatsMonitor", Role.LOGS, "logs device statistics"),
    ("ThroughputMonitor", Role.LOGS, "logs throughput"),
    ("BasePredictionWriter", Role.WRITES, "writes predictions"),
    ("StochasticWeightAveraging", Role.WRITES, "averages at epoch ends and replaces the LR schedule"),
    ("WeightAveraging", Role.STEP_COST, "updates an average after optimizer steps"),  # EMAWeightAveraging
    ("ModelPruning", Role.STEP_COST, "pruning masks change a step's cost"),
    ("BaseFinetuning", Role.STEP_COST, "frozen layers change a step's cost"),  # BackboneFinetuning
    ("GradientAccumulationScheduler", Role.STEP_COST, "changes the optimizer steps per batch"),
    ("StepwiseLR", Role.WRITES, "sets learning rates (tune()'s measuring fits leave LR schedulers out)"),
    ("EfficiencyReport", Role.LOGS, "measures and reports"),
    ("GPUDecode", Role.STEP_COST, "decodes on the device"),
    ("GPUAugmentation", Role.STEP_COST, "augments on the device"),
    ("ChannelsLast", Role.FACTOR, "a setting tune() measures itself"),
    ("ProgressiveResize", Role.RESIZES, "changes the image size over the run (tune() measures at the final size)"),
)


def role(callback: Any, package: Any) -> Role:
    """The role of ``callback`` (:data:`ROLES`) in a run of the Lightning ``package`` (``pytorch_lightning`` or
    ``lightning.pytorch``)."""
    import lightning_efficient.callbacks as ours

    for name, kind, _ in ROLES:
        cls = getattr(package.callbacks, name, None) or getattr(ours, name, None)
        if cls is not None and isinstance(callback, cls):
            return kind
    return Role.STEP_COST
