"""``lightning-efficient tune``: :func:`~lightning_efficient.tune` for a torchvision model by name, on synthetic
input (one batch of random images, repeated for 100 batches per epoch: loading costs nothing) or on an ImageFolder
(``FastImageFolder`` uint8 batches, TrivialAugment and normalisation on the device)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional


def run(model_name: str, *, image_size: int, batch_size: int, data=None, workers=None, out=None, **tune_kwargs) -> Any:
    """Tune ``model_name`` (the demo's classifier); print the table and advice; write the JSON to ``out``. ``data``: an
    ImageFolder root (its ``train/`` if present) read by ``workers`` loader workers (default: suggest_loader_kwargs());
    ``tune_kwargs`` go to tune(). Returns the TuneResult; UsageError: an unknown model, no ImageFolder at ``data``."""
    from torch.utils.data import DataLoader

    from lightning_efficient import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        FastImageFolder,
        GPUAugmentation,
        recommended_precision,
        tune,
        uint8_collate,
    )
    from lightning_efficient.app.classifier import make_classifier
    from lightning_efficient.app.config import UsageError, resolve_workers
    from lightning_efficient.data import repeated_batch

    check_out(out)  # before any measuring: a result that cannot be written is a usage error now, not after tuning
    try:
        recommended_precision(str(tune_kwargs.get("accelerator", "auto")))  # an unknown or absent accelerator
    except ValueError as err:
        raise UsageError(f"--accelerator: {err}") from None
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
    try:
        result = tune(model, loader, **options, **tune_kwargs)
    except (TypeError, ValueError) as err:  # tune()'s argument checks, before it measures anything
        raise UsageError(_flags(str(err))) from None
    except RuntimeError as err:  # the data failed to load: name the file, not the traceback
        if (bad := unreadable_image(err)) is None:
            raise
        raise UsageError(f"--data: {bad}") from None
    advice = f"Trainer(**recipe(precision={result.precision!r}, channels_last={result.channels_last}))"
    advice += "; result.prepare_model(model) (compiles it)" * result.compile
    advice += f"; DataLoader(num_workers={result.num_workers})" * bool(data and result.num_workers is not None)
    print(f"{result}\nuse it: {advice}")
    if out:
        try:
            Path(out).expanduser().write_text(result.to_json())
        except OSError as err:
            raise UsageError(
                f"--out {out}: cannot be written ({type(err).__name__}: {err}); write elsewhere."
            ) from None
        print(f"wrote {out}")
    return result


def check_out(out: Any) -> None:
    """Raise UsageError where ``--out`` cannot be written: a folder, or a file in a folder that does not exist."""
    from lightning_efficient.app.config import UsageError

    if not out:
        return
    path = Path(out).expanduser()
    if path.is_dir():
        raise UsageError(f"--out {out}: a folder; give a file name, e.g. --out {path / 'tune.json'}.")
    if not path.parent.is_dir():
        raise UsageError(f"--out {out}: the folder {path.parent} does not exist; create it or write elsewhere.")
    if not os.access(path.parent, os.W_OK):
        raise UsageError(f"--out {out}: the folder {path.parent} is not writable; write elsewhere.")


def unreadable_image(err: BaseException) -> Optional[str]:
    """The message of the image-decoding error behind ``err`` (tune()'s "fail to train" error, raised from an
    :class:`~lightning_efficient.data.ImageDecodeError` in the training process or a DataLoader worker), or None."""
    from lightning_efficient.data.decode import ImageDecodeError

    seen: Optional[BaseException] = err
    while seen is not None:
        if isinstance(seen, ImageDecodeError):
            lines = [line for line in str(seen).splitlines() if line.strip()]
            found = next((x for x in reversed(lines) if "ImageDecodeError: " in x), lines[-1] if lines else "")
            return found.split("ImageDecodeError: ", 1)[-1].strip() or "an image could not be decoded"
        seen = seen.__cause__ or seen.__context__
    return None


def _flags(text: str) -> str:
    """tune()'s argument errors in the command's words (``--precisions``, ``--budget``, ...)."""
    for name in ("precisions", "budget", "max_seconds", "compile", "num_workers", "min_gain"):
        text = text.replace(f"tune({name}=", f"--{name.replace('_', '-')} (tune({name}=")
    return text.replace("tune(): precision", "--precisions: precision")
