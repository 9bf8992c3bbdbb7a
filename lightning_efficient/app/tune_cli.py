"""``lightning-efficient tune``: :func:`~lightning_efficient.tune` for a torchvision model by name, on synthetic
input (one batch of random images, repeated for 100 batches per epoch: loading costs nothing) or on an ImageFolder
(``FastImageFolder`` uint8 batches, TrivialAugment and normalisation on the device)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run(model_name: str, *, image_size: int, batch_size: int, data=None, workers=None, out=None, **tune_kwargs) -> Any:
    """Tune ``model_name`` (the demo's classifier); print the table and advice; write the JSON to ``out``. ``data``: an
    ImageFolder root (its ``train/`` if present) read by ``workers`` loader workers (default: suggest_loader_kwargs());
    ``tune_kwargs`` go to tune(). Returns the TuneResult; UsageError: an unknown model, no ImageFolder at ``data``."""
    from torch.utils.data import DataLoader

    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD, FastImageFolder, GPUAugmentation, tune, uint8_collate
    from lightning_efficient.app.demo import UsageError, make_classifier, resolve_workers
    from lightning_efficient.data.samples import repeated_batch

    options: dict[str, Any] = dict(callbacks=[], devices=1, verbose=False, num_workers=False)  # synthetic input
    loader = DataLoader(repeated_batch(batch_size, image_size, 10, 100), batch_size=batch_size)
    if data:
        split = Path(data).expanduser() / "train" if (Path(data).expanduser() / "train").is_dir() else Path(data)
        try:
            dataset = FastImageFolder(split, size=image_size, train=True)
        except (OSError, ValueError, RuntimeError) as err:
            raise UsageError(f"--data {split}: not an ImageFolder root, one folder per class ({err}).") from None
        kw: dict[str, Any] = dict(num_workers=(w := resolve_workers(workers)), persistent_workers=w > 0)
        loader = DataLoader(dataset, batch_size, shuffle=True, drop_last=True, collate_fn=uint8_collate, **kw)
        augment = GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD)  # uint8 to float, on device
        options.update(callbacks=[augment], num_workers=None)  # and measure the worker counts
    try:
        model = make_classifier(len(getattr(loader.dataset, "classes", range(10))), 0.01, 1, arch=model_name)
    except ValueError as err:
        raise UsageError(f"--model {err}") from None
    print(f"tuning {model_name} at {image_size} px, batch {batch_size}, on {data or 'synthetic input'} ...")
    result = tune(model, loader, **options, **tune_kwargs)
    advice = f"Trainer(**recipe(precision={result.precision!r}, channels_last={result.channels_last}))"
    advice += "; result.prepare_model(model) (compiles it)" * result.compile
    advice += f"; DataLoader(num_workers={result.num_workers})" * bool(data and result.num_workers is not None)
    print(f"{result}\nuse it: {advice}")
    if out:
        Path(out).write_text(result.to_json())
        print(f"wrote {out}")
    return result
