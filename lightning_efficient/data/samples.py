"""Small real datasets and subsets for demos, notebooks and benchmarks (no download)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def balanced_subset(targets: list[int], n: int, seed: int) -> list[int]:
    """Indices of ``n`` samples, as equal a number per class as possible, chosen with ``seed``; sorted.

    ``n <= 0`` or ``n >= len(targets)`` returns all indices.
    """
    import torch

    if n <= 0 or n >= len(targets):
        return list(range(len(targets)))
    g = torch.Generator().manual_seed(seed)
    by_class: dict[int, list[int]] = {}
    for i in torch.randperm(len(targets), generator=g).tolist():
        by_class.setdefault(targets[i], []).append(i)
    chosen: list[int] = []
    queues = [by_class[c] for c in sorted(by_class)]
    while len(chosen) < n:
        for q in queues:
            if q and len(chosen) < n:
                chosen.append(q.pop())
    return sorted(chosen)


def digits_imagefolder(root: str | os.PathLike, size: int = 32) -> Path:
    """Write scikit-learn's digits (1,797 real 8x8 scans of handwritten digits, shipped inside the package, no
    download) as an ImageFolder of ``size`` x ``size`` PNGs under ``root``: ``train/`` (80%) and ``val/`` (20%).

    Returns:
        ``root``.

    Raises:
        ModuleNotFoundError: scikit-learn is not installed (the message says how to install it).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ModuleNotFoundError(
            "scikit-learn (which ships the digits dataset) is missing: "
            '`pip install "lightning_efficient[demo]"` (or scikit-learn), or use your own image folder.',
            name="sklearn",
        ) from None
    import numpy as np
    from PIL import Image

    root = Path(root)
    digits = load_digits()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(digits.images))
    n_val = len(order) // 5
    for rank, i in enumerate(order):
        split = "val" if rank < n_val else "train"
        folder = root / split / str(digits.target[i])
        folder.mkdir(parents=True, exist_ok=True)
        pixels = (digits.images[i] * (255.0 / 16.0)).clip(0, 255).astype("uint8")
        Image.fromarray(pixels, mode="L").convert("RGB").resize((size, size), Image.Resampling.BILINEAR).save(
            folder / f"{i:04d}.png"
        )
    return root


def repeated_batch(batch_size: int, image_size: int, num_classes: int, batches: int) -> Any:
    """In-memory data that costs nothing to load: ``batches x batch_size`` items cycling through one seeded batch of
    images (``float32 [3, image_size, image_size]`` in ``[0, 1)``) and ``int64`` labels."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch_size, 3, image_size, image_size, generator=g)
    images = torch.utils.data.TensorDataset(x, torch.randint(0, num_classes, (batch_size,), generator=g))
    return torch.utils.data.Subset(images, [i % batch_size for i in range(batches * batch_size)])
