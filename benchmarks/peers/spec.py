"""What every side of the peers benchmark shares: the settings, the data lists, the clock and the evaluator.

Imported inside each tool's own virtual environment, so it needs only the standard library, numpy and torch (no
Lightning, no lightning_efficient, no benchmark harness).

* :class:`Spec`: the settings one run gets from the driver (a JSON file), the same for every side but ``side``;
* :func:`lr_at`: the schedule every side follows, as a function of the optimizer step (linear warmup from 0.1x the
  peak, then cosine to 0), for the sides whose tool takes a function and for the tests;
* :class:`Curve`: training seconds from the process start (the driver's launch time; imports, tuning and
  compilation included) less the time spent validating, top-1 every ``val_every`` of an epoch, and images/s;
* :func:`evaluate`: top-1 on the whole validation split, from the driver's decoded copy (the whole image resized
  to ``size`` px, as every side validates), the same code on every side so that top-1 means the same thing.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: ImageNet's channel statistics (the normalisation every side uses).
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@dataclass
class Spec:
    """One run's settings (written by the driver, read by the side).

    Attributes:
        side: which side runs (see ``benchmarks.peers.SIDES``).
        seed: seed of the model's initialisation, shuffling and augmentation.
        data: Imagenette root (``train/``, ``val/``).
        train_list: JSON file with the training subset (``samples``: ``[path, label]`` in ImageFolder order,
            ``indices`` into ImageFolder's ``samples``, ``classes``).
        val_file: ``.npz`` with the validation split decoded at ``size`` px (``images`` uint8 ``[N, size, size,
            3]``, ``labels`` int64 ``[N]``).
        size: training crop side and validation side, pixels.
        epochs: training epochs.
        batch_size: images per optimizer step.
        lr: peak learning rate (SGD, momentum 0.9, no Nesterov).
        warmup_epochs: linear warmup from ``0.1 * lr`` to ``lr`` over this many (whole) epochs, then cosine to 0.
        weight_decay: L2 weight decay on conv and linear weights (not on biases and norm parameters).
        workers: DataLoader worker processes of the peers' loaders (ours: tune()'s choice).
        val_every: validate every this share of an epoch.
        launch: ``time.time()`` when the driver started this process (training seconds count from it).
        out: where the side writes its result (JSON).
        options: side-specific switches (e.g. ``{"progressive_resize": false}``).
    """

    side: str
    seed: int
    data: str
    train_list: str
    val_file: str
    out: str
    size: int = 128
    epochs: int = 4
    batch_size: int = 32
    lr: float = 0.05
    warmup_epochs: int = 1
    weight_decay: float = 5e-4
    workers: int = 1
    val_every: float = 0.5
    launch: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def from_json(cls, path: str | Path) -> Spec:
        return cls(**json.loads(Path(path).read_text()))

    def train_samples(self) -> dict[str, Any]:
        """The training subset: ``{"classes", "samples": [[path, label], ...], "indices": [...]}``."""
        return json.loads(Path(self.train_list).read_text())

    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch (the last partial batch is dropped on every side)."""
        return len(self.train_samples()["indices"]) // self.batch_size


def parse_spec() -> Spec:
    """The ``--spec`` file named on the command line of a side."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True, help="the run's settings, written by python -m benchmarks.peers")
    return Spec.from_json(parser.parse_args().spec)


def lr_at(step: float, spec: Spec, steps_per_epoch: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based): linear from ``0.1 * lr`` to ``lr`` over the warmup,
    then cosine to 0 at the end of the run (what ``SequentialLR(LinearLR(0.1), CosineAnnealingLR)`` gives when
    stepped once per optimizer step)."""
    warmup = spec.warmup_epochs * steps_per_epoch
    total = spec.epochs * steps_per_epoch
    if step < warmup:
        return spec.lr * (0.1 + 0.9 * step / warmup)
    return 0.5 * spec.lr * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1.0, total - warmup))))


def evaluate(model: Any, images: Any, labels: Any, batch: int = 250) -> float:
    """Top-1 of ``model`` on the validation split (``images`` uint8 ``[N, H, W, 3]``, ``labels`` ``[N]``): float32,
    normalised with :data:`MEAN` / :data:`STD`, channels_last input, ``eval()`` mode, no gradients; the model's
    training mode is restored."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    correct = 0
    with torch.inference_mode():
        for i in range(0, len(labels), batch):
            x = torch.from_numpy(images[i : i + batch]).to(device).permute(0, 3, 1, 2).float()
            x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
            pred = model(x).argmax(1).cpu()
            correct += int((pred == torch.from_numpy(labels[i : i + batch])).sum())
    model.train(was_training)
    return correct / len(labels)


class Curve:
    """Top-1 against training seconds for one run.

    Call :meth:`step` after every optimizer step with the images it trained on; it validates (whole split) at every
    ``val_every`` of an epoch. Training seconds: wall clock since ``spec.launch`` (the process start, imports and
    set-up included) less the seconds spent validating.
    """

    def __init__(self, spec: Spec, steps_per_epoch: int) -> None:
        import numpy as np

        self.spec, self.steps_per_epoch = spec, steps_per_epoch
        data = np.load(spec.val_file)
        self.val_images, self.val_labels = data["images"], data["labels"]
        total = spec.epochs * steps_per_epoch
        every = spec.val_every * steps_per_epoch
        self.val_steps = sorted({min(total, max(1, round(k * every))) for k in range(1, math.ceil(total / every) + 1)})
        self.points: list[dict[str, float]] = []
        self.validation_s = 0.0
        self.images = 0
        self.steps = 0
        self.first_step_s: float | None = None  # training seconds when the first step began
        self.extra: dict[str, Any] = {}
        self.lrs: list[float] = []  # the learning rate each optimizer step used
        self.step_s: list[float] = []  # training seconds at the end of each optimizer step

    def train_s(self) -> float:
        return time.time() - self.spec.launch - self.validation_s

    def begin(self) -> None:
        """The first training step begins (for images/s, which leaves out the set-up)."""
        if self.first_step_s is None:
            self.first_step_s = self.train_s()

    def step(self, images: int, model: Any, lr: float) -> None:
        """One optimizer step on ``images`` images with learning rate ``lr`` is done; validates ``model`` where
        one is due."""
        self.begin()
        self.steps += 1
        self.images += images
        self.lrs.append(float(lr))
        self.step_s.append(self.train_s())
        if self.steps in self.val_steps and (not self.points or self.points[-1]["step"] != self.steps):
            self.validate(model)

    def validate(self, model: Any) -> None:
        now = self.train_s()
        started = time.time()
        top1 = evaluate(model, self.val_images, self.val_labels)
        self.validation_s += time.time() - started
        self.points.append(
            {"step": self.steps, "epoch": self.steps / self.steps_per_epoch, "train_s": now, "top1": top1}
        )
        print(
            f"    {self.spec.side} seed {self.spec.seed}: epoch {self.steps / self.steps_per_epoch:.2f}, "
            f"{now:.0f} s, top-1 {100 * top1:.1f}%",
            flush=True,
        )

    def result(self, **extra: Any) -> dict[str, Any]:
        """What the side writes to ``spec.out``."""
        import torch

        last = self.points[-1]["train_s"] if self.points else math.nan
        expected = [lr_at(k, self.spec, self.steps_per_epoch) for k in range(len(self.lrs))]
        deviation = max((abs(a - b) for a, b in zip(self.lrs, expected, strict=True)), default=0.0) / self.spec.lr
        start = self.first_step_s if self.first_step_s is not None else math.nan
        return {
            "side": self.spec.side,
            "seed": self.spec.seed,
            "points": self.points,
            "final_top1": self.points[-1]["top1"] if self.points else math.nan,
            "train_s": last,
            "setup_s": start,
            "images": self.images,
            "steps": self.steps,
            "images_per_s": self.images / (last - start) if last > start else math.nan,
            "validation_s": self.validation_s,
            "lrs": self.lrs,
            "step_s": self.step_s,
            "lr_max_deviation": deviation,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            **self.extra,
            **extra,
        }

    def write(self, **extra: Any) -> None:
        Path(self.spec.out).write_text(json.dumps(self.result(**extra), indent=1))
