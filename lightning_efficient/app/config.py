"""The demo's settings (:class:`DemoConfig`), its defaults, and the command line's usage error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: ``--image-size`` when not given, with ``--data`` and for scikit-learn's digits (8x8 scans upsampled to it, so
#: that the demo's images are as large in pixels as real ones and the practices matter).
DEFAULT_IMAGE_SIZE = 112
DIGITS_IMAGE_SIZE = DEFAULT_IMAGE_SIZE

#: The parts of the efficient side an ablation can leave out (``DemoConfig.ablate``; ``""``: none).
ABLATIONS = ("", "lr schedule", "augmentation", "throughput", "progressive resizing")


class UsageError(Exception):
    """A user mistake on the command line (``demo`` or ``tune``: a bad ``--data``, an unreadable image, an unknown
    ``--model``...): printed as one line, exit status 2."""


@dataclass
class DemoConfig:
    """Settings of one demo run (both sides use the same).

    Attributes:
        data: ImageFolder root with ``train/`` and ``val/`` class folders.
        epochs: training epochs.
        train_images, val_images: images taken from each split (a seeded, class-balanced subset; 0 = all).
        image_size: side of the square training/validation crops, pixels; ``None``: :data:`DEFAULT_IMAGE_SIZE`
            (112), also for the scikit-learn digits fallback (written as PNGs of this size).
        batch_size: images per batch.
        workers: DataLoader worker processes per run, as ``DataLoader(num_workers=...)`` (0: load in the main
            process); ``None`` ("auto"): :func:`~lightning_efficient.suggest_loader_kwargs`'s choice (training on
            a GPU: one per CPU core, less one; on the CPU: a quarter of the cores, none up to 3).
        lr: peak learning rate of SGD (momentum 0.9, nesterov), reached after a 1-epoch linear warmup from
            0.1x, then cosine annealing to 0 at the end; stepped per epoch (baseline) or per step (efficient).
        seed: seed for the subset, the model initialisation, shuffling and augmentation.
        progress: show Lightning's progress bars.
        tune: the efficient side runs :func:`~lightning_efficient.tune` first (within its time budget, or reusing
            a stored decision) and trains with its choice (``False``: ``recipe()``'s defaults).
        efficient_first: train the efficient side first (default: the baseline first).
        val_every: validate every this share of an epoch (``Trainer(val_check_interval=...)``), both sides.
        progressive_resize: the efficient side trains with :class:`~lightning_efficient.ProgressiveResize`.
        ablate: the efficient side without one of its parts (an ablation): ``"lr schedule"`` (per-epoch LR, no
            StepwiseLR), ``"augmentation"`` (the baseline's per-image CPU augmentation instead of GPUAugmentation),
            ``"throughput"`` (``32-true``, NCHW, the loader as given: no tune()), ``"progressive resizing"``.
    """

    data: str
    epochs: int = 4
    train_images: int = 1600
    val_images: int = 500
    image_size: Optional[int] = None
    batch_size: int = 32
    workers: Optional[int] = None
    lr: float = 0.025
    seed: int = 0
    progress: bool = True
    tune: bool = True
    efficient_first: bool = False
    val_every: float = 1.0
    progressive_resize: bool = False
    ablate: str = ""


def resolve_workers(workers: Optional[int]) -> int:
    """``workers`` (0 included: no worker processes), or for ``None`` ("auto") the DataLoader workers
    :func:`suggest_loader_kwargs` recommends here (training on a GPU: one per CPU core, less one; on the CPU: a
    quarter of the cores, none up to 3)."""
    from lightning_efficient import suggest_loader_kwargs

    if workers is None:
        return suggest_loader_kwargs().kwargs["num_workers"]
    return workers
