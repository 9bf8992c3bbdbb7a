"""Epoch-wise vs step-wise LR schedule, everything else equal: val top-1 over several seeds on Imagenette.

ResNet-18 (torchvision, from scratch), SGD nesterov, peak LR 0.05 at batch 64 (0.2 per 256), weight decay 5e-4, label
smoothing 0.1; schedule = 1-epoch linear warmup from 0.1x, then cosine to 0 (PyTorch SequentialLR of LinearLR and
CosineAnnealingLR, the demo's module). Both arms use the same recipe (bf16-mixed where supported, ChannelsLast,
FastImageFolder uint8 batches, per-sample TrivialAugment on the device); the only difference is whether
``StepwiseLR`` runs the schedule per optimizer step or Lightning steps it per epoch. Runs alternate between the arms
(seed 0: epoch, step; seed 1: step, epoch; ...). Speed does not matter here, only accuracy.

    python -m benchmarks.schedule_accuracy [--seeds 3] [--epochs 5] [--train-images 5000] [--size 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Subset

from benchmarks.harness import RESULTS, markdown_table, write_results
from lightning_efficient import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ChannelsLast,
    FastImageFolder,
    GPUAugmentation,
    StepwiseLR,
    recommended_precision,
    uint8_collate,
)
from lightning_efficient.app.classifier import make_classifier
from lightning_efficient.data import balanced_subset

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenette"


def train_once(arm: str, seed: int, args: argparse.Namespace) -> dict:
    pl.seed_everything(seed, workers=True, verbose=False)
    train = FastImageFolder(args.data / "train", size=args.size, train=True)
    val = FastImageFolder(args.data / "val", size=args.size, train=False)
    kw = dict(
        batch_size=args.batch_size,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        collate_fn=uint8_collate,
    )
    if args.train_images:
        train = Subset(train, balanced_subset(train.targets, args.train_images, seed=1234))  # same subset for all
    train_loader = DataLoader(train, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(seed), **kw)
    val_loader = DataLoader(val, shuffle=False, **kw)
    callbacks = [GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD), ChannelsLast()]
    if arm == "step-wise":
        callbacks.append(StepwiseLR(verbose=False))
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        precision=recommended_precision(),
        callbacks=callbacks,
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    model = make_classifier(len(val.classes), args.lr, args.epochs)
    start = time.perf_counter()
    trainer.fit(model, train_loader, val_loader)
    return {
        "arm": arm,
        "seed": seed,
        "val_top1": float(trainer.callback_metrics["val/top1"]),
        "seconds": time.perf_counter() - start,
        "steps": trainer.global_step,
    }


def summarise(runs: list[dict], args: argparse.Namespace) -> str:
    rows = []
    for arm in ("epoch-wise", "step-wise"):
        accs = [r["val_top1"] for r in runs if r["arm"] == arm]
        if not accs:
            continue
        sd = statistics.stdev(accs) if len(accs) > 1 else float("nan")
        rows.append(
            (
                arm,
                len(accs),
                f"{100 * statistics.mean(accs):.2f}",
                f"{100 * sd:.2f}",
                f"{100 * min(accs):.2f} - {100 * max(accs):.2f}",
                ", ".join(f"{100 * a:.2f}" for a in accs),
            )
        )
    per_seed = []
    for seed in sorted({r["seed"] for r in runs}):
        pair = {r["arm"]: r["val_top1"] for r in runs if r["seed"] == seed}
        if len(pair) == 2:
            per_seed.append(
                (
                    seed,
                    f"{100 * pair['epoch-wise']:.2f}",
                    f"{100 * pair['step-wise']:.2f}",
                    f"{100 * (pair['step-wise'] - pair['epoch-wise']):+.2f}",
                )
            )
    body = (
        "ResNet-18 from scratch on Imagenette ("
        + (
            f"a class-balanced subset of {args.train_images} training images"
            if args.train_images
            else "full train split"
        )
        + f", {args.size} px, batch {args.batch_size}, "
        f"{args.epochs} epochs, peak LR {args.lr}, 1-epoch warmup + cosine), val top-1 on the full val split "
        f"at the end of training. Mean, sample standard deviation and range over seeds.\n\n"
        + markdown_table(("schedule", "runs", "mean top-1 %", "std", "range", "per seed"), rows)
        + "\n\nPer seed (same seed = same initialisation, data order and augmentation draws):\n\n"
        + markdown_table(("seed", "epoch-wise %", "step-wise %", "difference (pp)"), per_seed)
        + "\n"
    )
    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--train-images", type=int, default=5000, help="class-balanced train subset, 0 = all")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if not args.data.is_dir():
        raise SystemExit(f"{args.data}: Imagenette not found; pass --data with an ImageFolder root (train/, val/).")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    runs: list[dict] = []
    for seed in range(args.seeds):
        arms = ("epoch-wise", "step-wise") if seed % 2 == 0 else ("step-wise", "epoch-wise")
        for arm in arms:
            result = train_once(arm, seed, args)
            runs.append(result)
            print(json.dumps(result), flush=True)
            body = summarise(runs, args)
            write_results(
                "schedule_accuracy",
                "LR schedule: epoch-wise vs step-wise (StepwiseLR), val top-1",
                body,
                {"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs},
            )
    print(summarise(runs, args))
    print(f"wrote {RESULTS / 'schedule_accuracy.md'}")


if __name__ == "__main__":
    main()
