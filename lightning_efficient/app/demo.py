"""The main job: train the same ResNet-18 twice, plain Lightning vs ``recipe()``, and compare.

*baseline*: ``32-true``, NCHW, LR schedule stepped per epoch, torchvision ``RandomResizedCrop`` +
``TrivialAugmentWide`` + ``ToTensor`` per image in CPU DataLoader workers.
*efficient*: :func:`~lightning_efficient.recipe` as :func:`~lightning_efficient.tune` chose it for this model,
data and machine (precision, ChannelsLast and ``num_workers`` measured, not assumed; StepwiseLR,
EfficiencyReport), :class:`~lightning_efficient.FastImageFolder` feeding ``uint8`` batches, TrivialAugment per
sample on the device (:class:`~lightning_efficient.GPUAugmentation`). Its wall time includes the tuning.

Same seed, same images (the same subset of the same ImageFolder order), same epochs, same model, optimizer and
schedule. Each run happens in its own process (so peak memory is its own); the parent prints one table.

The settings are in :mod:`~lightning_efficient.app.config`, the checks of the data and the offline fallback in
:mod:`~lightning_efficient.app.data`, the model in :mod:`~lightning_efficient.app.classifier`, one side's run in
:mod:`~lightning_efficient.app.runs` and the table in :mod:`~lightning_efficient.app.table`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from lightning_efficient.app.config import (
    DEFAULT_IMAGE_SIZE,
    DIGITS_IMAGE_SIZE,
    DemoConfig,
    UsageError,
    resolve_workers,
)
from lightning_efficient.app.data import check_data, check_images, digits_imagefolder
from lightning_efficient.app.runs import run_in_subprocess
from lightning_efficient.app.table import ROWS, add_time_to_target, format_table, plot_curves
from lightning_efficient.data import balanced_subset


def run_demo(
    cfg: DemoConfig, out: Optional[str] = None, reports: bool = True, plot: Optional[str] = None
) -> dict[str, Any]:
    """Validate the data, train baseline then efficient (each in a fresh process), print the table.

    Returns the JSON-able results (also written to ``out`` when given); with ``plot``, writes the top-1 against
    wall-clock curves of both sides to that PNG file.

    Raises:
        UsageError: bad data (missing folder, no class folders, empty split, unreadable image).
    """
    from torchvision.datasets import ImageFolder

    root = check_data(cfg.data)
    cfg.data = str(root)
    if cfg.image_size is None:
        cfg.image_size = DEFAULT_IMAGE_SIZE
    train_samples = ImageFolder(root / "train").samples
    val_samples = ImageFolder(root / "val").samples
    train_idx = balanced_subset([t for _, t in train_samples], cfg.train_images, cfg.seed)
    val_idx = balanced_subset([t for _, t in val_samples], cfg.val_images, cfg.seed + 1)
    if len(train_idx) < cfg.batch_size:
        raise UsageError(
            f"{root / 'train'}: {len(train_idx)} training images is less than one batch of {cfg.batch_size};"
            " add images or pass a smaller --batch-size."
        )
    check_images([train_samples[i][0] for i in train_idx] + [val_samples[i][0] for i in val_idx])

    cfg.workers = resolve_workers(cfg.workers)
    results: dict[str, Any] = {}
    for kind in ("efficient", "baseline") if cfg.efficient_first else ("baseline", "efficient"):
        results[kind] = run_in_subprocess(kind, cfg, train_idx, val_idx)
    if reports:
        for kind in ("baseline", "efficient"):
            print(f"\n[{kind}] {results[kind]['report']}")
    from lightning_efficient import cpu_has_native_bf16

    kind = "native bf16" if cpu_has_native_bf16() else "no native bf16"
    print(
        f"\nResNet-18 on {root} ({len(train_idx)} train / {len(val_idx)} val images, {cfg.image_size} px, "
        f"batch {cfg.batch_size}, {cfg.epochs} epoch{'s' * (cfg.epochs != 1)}, "
        f"{cfg.workers} DataLoader worker{'s' * (cfg.workers != 1)}, seed {cfg.seed}; "
        f"CPU: {os.cpu_count()} cores, {kind}):\n"
    )
    add_time_to_target(results)
    print(format_table(results), flush=True)
    tuned = results["efficient"].get("tuned") or {}
    if tuned:
        how = (
            f"reused the decision stored in {tuned['reused_from']}"
            if tuned["reused_from"]
            else f"measured {', '.join(tuned['measured']) or 'only the settings in use, no change'}; decided by "
            f"recipe()'s defaults (not measured within its {tuned['budget_s']:.0f} s budget): "
            f"{', '.join(tuned['by_rule']) or 'nothing'}"
        )
        print(
            f"\nefficient side: tune() took {tuned['tuning_s']:.1f} s (inside its wall time), {how}; chose "
            f"{tuned['chosen']}:"
        )
        for reason in tuned["reasons"]:
            print(f"  - {reason}")
    if plot:
        name = "scikit-learn digits" if root.name.startswith("lightning_efficient_digits_") else root.name
        plot_curves(results, plot, f"ResNet-18, {name}, {len(train_idx)} train images, {cfg.image_size} px")
        print(f"\nwrote {plot}")
    payload = {
        "config": asdict(cfg),
        "train_images": len(train_idx),
        "val_images": len(val_idx),
        "machine": {
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "native_bf16": cpu_has_native_bf16(),
        },
        "results": {k: {kk: vv for kk, vv in v.items() if kk != "report"} for k, v in results.items()},
        "ratios": {
            key: results["efficient"][key] / results["baseline"][key]
            for _, key, _, _ in ROWS
            if results["baseline"][key]
        },
        "reports": {k: v["report"] for k, v in results.items()},
    }
    if out:
        Path(out).write_text(json.dumps(payload, indent=2))
        print(f"\nwrote {out}")
    return payload


def run_demo_with_fallback(
    cfg: DemoConfig, out: Optional[str], reports: bool, plot: Optional[str] = None
) -> dict[str, Any]:
    """Like :func:`run_demo`; with ``cfg.data`` empty, first writes scikit-learn's digits to a temporary folder
    as ``cfg.image_size`` px PNGs (default :data:`DIGITS_IMAGE_SIZE`), and says so once they are written.

    Raises:
        UsageError: as :func:`run_demo`, or (before anything is printed) scikit-learn is missing.
    """
    import importlib.util

    if plot and importlib.util.find_spec("matplotlib") is None:  # say so before training, not after
        raise UsageError('--plot needs matplotlib: pip install "lightning_efficient[plot]" (or matplotlib).')
    if cfg.data:
        return run_demo(cfg, out, reports, plot)
    if cfg.image_size is None:
        cfg.image_size = DIGITS_IMAGE_SIZE
    tmp = tempfile.mkdtemp(prefix="lightning_efficient_digits_")
    try:
        cfg.data = str(digits_imagefolder(tmp, size=cfg.image_size))
        print(
            f"no --data given: using scikit-learn's digits (offline), written as {cfg.image_size} px PNGs to an "
            f"ImageFolder in {tmp}"
        )
        return run_demo(cfg, out, reports, plot)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
