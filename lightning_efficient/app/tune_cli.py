"""``lightning-efficient tune``: :func:`~lightning_efficient.tune` for a torchvision model by name.

Synthetic input by default (one batch of random images, repeated: the input pipeline costs nothing), or a real
ImageFolder with ``--data`` (``FastImageFolder`` uint8 batches, TrivialAugment and normalisation on the device).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Optional, Sequence


class TuneCliError(Exception):
    """A user mistake (unknown model, bad ``--data``): printed as one line, exit status 2."""


def classifier(model_name: str, num_classes: int) -> Any:
    """A LightningModule training ``torchvision.models.<model_name>`` (SGD, lr 0.01, momentum 0.9, cross-entropy).

    Raises:
        TuneCliError: ``model_name`` is not a torchvision classification model (the message lists close names).
    """
    import pytorch_lightning as pl
    import torch
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    if model_name not in names:
        close = difflib.get_close_matches(model_name, names, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise TuneCliError(f"--model {model_name!r} is not a torchvision classification model{hint}.")

    class TorchvisionClassifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = torchvision.models.get_model(model_name, weights=None, num_classes=num_classes)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.model(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    return TorchvisionClassifier()


def synthetic(batch_size: int, image_size: int, num_classes: int, batches: int) -> Any:
    """A map-style dataset of ``batches x batch_size`` items cycling through one seeded batch of random images
    (``float32 [3, S, S]`` in ``[0, 1)``) and labels: input that costs nothing to load."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch_size, 3, image_size, image_size, generator=g)
    y = torch.randint(0, num_classes, (batch_size,), generator=g)
    return torch.utils.data.Subset(
        torch.utils.data.TensorDataset(x, y), [i % batch_size for i in range(batches * batch_size)]
    )


def run(
    model_name: str,
    *,
    image_size: int,
    batch_size: int,
    data: Optional[str] = None,
    workers: Optional[int] = None,
    out: Optional[str] = None,
    **tune_kwargs: Any,
) -> Any:
    """Tune ``model_name`` (one epoch: 100 batches) and print the table and the advice; returns the TuneResult.

    ``data``: an ImageFolder root (its ``train/`` split if present); ``workers``: its loader's ``num_workers``
    (default: :func:`~lightning_efficient.suggest_loader_kwargs`'s); ``out``: write the result as JSON there;
    ``tune_kwargs``: for :func:`~lightning_efficient.tune` (``precisions``, ``compile``, ``max_epochs``...).

    Raises:
        TuneCliError: an unknown model, or ``data`` that is not an ImageFolder root.
    """
    from torch.utils.data import DataLoader

    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD, FastImageFolder, GPUAugmentation, tune, uint8_collate
    from lightning_efficient.data.loader import suggest_loader_kwargs

    callbacks: list[Any] = []
    if data:
        root = Path(data).expanduser()
        split = root / "train" if (root / "train").is_dir() else root
        try:
            dataset = FastImageFolder(split, size=image_size, train=True)
        except (OSError, ValueError, RuntimeError) as err:
            raise TuneCliError(f"--data {split}: not an ImageFolder root, one folder per class ({err}).") from None
        workers = suggest_loader_kwargs(cuda=False).kwargs["num_workers"] if workers is None else workers
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
        loader = DataLoader(synthetic(batch_size, image_size, num_classes, 100), batch_size=batch_size)
        tune_kwargs.setdefault("num_workers", False)
    model = classifier(model_name, num_classes)
    print(f"tuning {model_name} at {image_size} px, batch {batch_size}, on {data or 'synthetic input'} ...")
    result = tune(model, loader, callbacks=callbacks, devices=1, verbose=False, **tune_kwargs)
    print(result)
    workers_text = f"; DataLoader(num_workers={result.num_workers})" if data and result.num_workers is not None else ""
    compile_text = "; result.prepare_model(model) (compiles it)" if result.compile else ""
    print(
        f"\nuse it: Trainer(**recipe(precision={result.precision!r}, channels_last={result.channels_last}))"
        f"{compile_text}{workers_text}"
    )
    if out:
        Path(out).write_text(result.to_json())
        print(f"wrote {out}")
    return result
