"""``lightning-efficient tune``: :func:`~lightning_efficient.tune` for a torchvision model by name, on synthetic
input (one batch of random images, repeated for 100 batches per epoch: loading costs nothing) or on an ImageFolder
(``FastImageFolder`` uint8 batches, TrivialAugment and normalisation on the device)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional


class TuneCliError(Exception):
    """A user mistake (unknown model, bad ``--data``): printed as one line, exit status 2."""


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
    """Tune ``model_name`` (the demo's classifier), print the table and the advice, write the JSON to ``out``.

    ``data``: an ImageFolder root (its ``train/`` split if present), read with ``workers`` DataLoader workers
    (default: ``suggest_loader_kwargs()``'s); ``tune_kwargs`` go to :func:`~lightning_efficient.tune`. Returns the
    :class:`~lightning_efficient.TuneResult`.

    Raises:
        TuneCliError: an unknown model, or ``data`` that is not an ImageFolder root.
    """
    from torch.utils.data import DataLoader

    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD, FastImageFolder, GPUAugmentation, tune, uint8_collate
    from lightning_efficient.app.demo import make_classifier
    from lightning_efficient.data.loader import suggest_loader_kwargs
    from lightning_efficient.data.samples import repeated_batch

    callbacks: list[Any] = []
    loader = DataLoader(repeated_batch(batch_size, image_size, 10, 100), batch_size=batch_size)
    if data:
        split = Path(data).expanduser() / "train" if (Path(data).expanduser() / "train").is_dir() else Path(data)
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
        callbacks = [GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD)]
    try:
        model = make_classifier(len(getattr(loader.dataset, "classes", range(10))), 0.01, 1, arch=model_name)
    except ValueError as err:
        raise TuneCliError(f"--model {err}") from None
    print(f"tuning {model_name} at {image_size} px, batch {batch_size}, on {data or 'synthetic input'} ...")
    result = tune(
        model, loader, callbacks=callbacks, devices=1, verbose=False, num_workers=None if data else False, **tune_kwargs
    )
    workers_text = f"; DataLoader(num_workers={result.num_workers})" if data and result.num_workers is not None else ""
    print(
        f"{result}\nuse it: Trainer(**recipe(precision={result.precision!r}, channels_last={result.channels_last}))"
        + "; result.prepare_model(model) (compiles it)" * result.compile
        + workers_text
    )
    if out:
        Path(out).write_text(result.to_json())
        print(f"wrote {out}")
    return result
