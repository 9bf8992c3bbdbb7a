"""``lightning-efficient tune``: :func:`~lightning_efficient.tune` for a torchvision model by name.

Synthetic input by default (one batch of random images, repeated: the input pipeline costs nothing, so the
table shows what the model's compute gains), or a real ImageFolder with ``--data`` (``FastImageFolder`` uint8
batches, TrivialAugment and normalisation on the device: the table then includes the input pipeline).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional, Sequence


class TuneCliError(Exception):
    """A user mistake (unknown model, bad ``--data``): printed as one line, exit status 2."""


def classifier(model_name: str, num_classes: int) -> Any:
    """A LightningModule training ``torchvision.models.<model_name>`` with SGD (lr 0.01, momentum 0.9) and
    cross-entropy on ``(images, labels)`` batches.

    Raises:
        TuneCliError: ``model_name`` is not a torchvision classification model (the message lists close names).
    """
    import pytorch_lightning as pl
    import torch
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    if model_name not in names:
        import difflib

        close = difflib.get_close_matches(model_name, names, n=3)
        raise TuneCliError(
            f"--model {model_name!r} is not a torchvision classification model"
            + (f" (did you mean {', '.join(close)}?)" if close else "")
            + "; see torchvision.models.list_models()."
        )

    class TorchvisionClassifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = torchvision.models.get_model(model_name, weights=None, num_classes=num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    return TorchvisionClassifier()


class RepeatedBatch:
    """A map-style dataset of ``length`` items cycling through one fixed batch of random images
    (``float32 [3, S, S]`` in ``[0, 1)``, seeded) and labels: synthetic input that costs nothing to load."""

    def __init__(self, batch_size: int, image_size: int, num_classes: int, length: int) -> None:
        import torch

        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(batch_size, 3, image_size, image_size, generator=g)
        self.labels = torch.randint(0, num_classes, (batch_size,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        j = i % len(self.labels)
        return self.images[j], self.labels[j]


#: tune()'s Python wording in its notes and skip reasons, and the command line's for the same thing.
_CLI_WORDS = (
    ("num_workers not tuned (num_workers=False)", "num_workers not tuned"),
    (
        "(compile=None measures it on CUDA only; pass compile=True)",
        "(measured on CUDA only by default; pass --compile)",
    ),
    ("pass precisions=[...] to measure it", "pass --precisions 32-true bf16-mixed to measure it"),
    ("or raise window_steps/repeats", "or take more timed windows (--steps WARMUP WINDOW REPEATS, e.g. --steps 2 3 6)"),
)


def _in_cli_words(result: Any, synthetic: bool) -> None:
    """Reword ``result``'s notes and skip reasons for the command line (flags, not Python arguments)."""

    def reword(text: str) -> str:
        for python, cli in _CLI_WORDS:
            text = text.replace(python, cli)
        if synthetic and text == "num_workers not tuned":
            text = "num_workers not tuned: synthetic input (pass --data DIR to tune the loader's workers)"
        return text

    result.notes = [reword(n) for n in result.notes]
    result.reasons = [reword(r) for r in result.reasons]
    for m in result.measurements:
        if m.skipped:
            m.skipped = reword(m.skipped)


def run(
    model_name: str,
    *,
    image_size: int,
    batch_size: int,
    data: Optional[str] = None,
    workers: Optional[int] = None,
    precisions: Optional[Sequence[str]] = None,
    compile: Optional[bool] = None,
    planned_steps: Optional[int] = None,
    accelerator: str = "auto",
    out: Optional[str] = None,
    steps: tuple[int, int, int] = (2, 3, 3),
) -> Any:
    """Tune ``model_name`` and print the table; returns the :class:`~lightning_efficient.TuneResult`.

    Args:
        model_name: a torchvision classification model (``resnet50``, ``mobilenet_v3_large``...).
        image_size: side of the square input, pixels.
        batch_size: images per batch.
        data: ImageFolder root (its ``train/`` split if present); ``None``: synthetic input.
        workers: ``num_workers`` of the loader as given (``None``: one per CPU core, less one, for ``data``;
            0 for synthetic input).
        precisions, compile, planned_steps: as :func:`~lightning_efficient.tune`.
        accelerator: ``Trainer(accelerator=...)``.
        out: write the result as JSON to this file.
        steps: ``(warmup_steps, window_steps, repeats)``.

    Raises:
        TuneCliError: an unknown model, or ``data`` that is not an ImageFolder root.
    """
    from torch.utils.data import DataLoader

    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD, FastImageFolder, GPUAugmentation, tune, uint8_collate
    from lightning_efficient.data.loader import suggest_loader_kwargs

    callbacks: list[Any] = []
    warmup, window, repeats = steps
    if data:
        root = Path(data).expanduser()
        split = root / "train" if (root / "train").is_dir() else root
        if not split.is_dir():
            raise TuneCliError(f"--data {root}: no such folder; pass an ImageFolder root (one folder per class).")
        try:
            dataset = FastImageFolder(split, size=image_size, train=True)
        except (OSError, ValueError, RuntimeError) as err:
            raise TuneCliError(f"--data {split}: not an ImageFolder ({err}).") from None
        if workers is None:
            workers = suggest_loader_kwargs(cuda=False).kwargs["num_workers"]
        loader = DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=workers,
            persistent_workers=workers > 0,
            collate_fn=uint8_collate,
        )
        num_classes = len(dataset.classes)
        callbacks.append(GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD))
    else:
        num_classes = 10
        needed = warmup + window * repeats
        loader = DataLoader(
            RepeatedBatch(batch_size, image_size, num_classes, batch_size * needed),
            batch_size=batch_size,
            num_workers=workers or 0,
        )
    model = classifier(model_name, num_classes)
    source = f"{data}" if data else "synthetic input"
    print(f"tuning {model_name} at {image_size} px, batch {batch_size}, on {source} ...", flush=True)
    with warnings.catch_warnings():
        # The noise warning is also one of the result's notes, printed below in the command line's words.
        warnings.filterwarnings("ignore", message=r"tune\(\): the machine is noisy", category=UserWarning)
        result = tune(
            model,
            loader,
            precisions=precisions,
            compile=compile,
            planned_steps=planned_steps,
            num_workers=None if data else False,
            warmup_steps=warmup,
            window_steps=window,
            repeats=repeats,
            accelerator=accelerator,
            devices=1,
            callbacks=callbacks,
            verbose=False,
        )
    _in_cli_words(result, synthetic=not data)
    print(result)
    print(
        f"\nuse it: Trainer(**recipe(precision={result.precision!r}, channels_last={result.channels_last}))"
        + ("; result.prepare_model(model) (compiles it)" if result.compile else "")
        + (f"; DataLoader(num_workers={result.num_workers})" if data and result.num_workers is not None else "")
    )
    if any(note.startswith("the machine is noisy") for note in result.notes):
        print("  (provisional: the machine was noisy while measuring, see the note above; rerun on a quiet machine)")
    if out:
        Path(out).write_text(result.to_json())
        print(f"wrote {out}")
    return result
