"""``lightning-efficient`` command line: ``demo`` (the main job), ``tune`` (measure the practices for a torchvision
model here) and ``doctor`` (environment check)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Optional, Sequence


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    return parse


def _share(text: str) -> float:
    value = _positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(
            f"expected a fraction in (0, 1], e.g. 0.05, got {text!r} (--max-seconds caps it)"
        )
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _workers(text: str) -> Optional[int]:
    """``--workers``: ``auto`` (None: as suggest_loader_kwargs()) or an integer >= 0 (0: load in the main process)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return _non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 0, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightning-efficient", description="Faster CNN training with PyTorch Lightning callbacks."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="train ResNet-18 twice (plain Lightning vs recipe() after tune()) and print a side-by-side table",
        description="Train the same ResNet-18 twice, same seed and epochs: plain Lightning (32-true, NCHW, "
        "per-epoch LR, per-image CPU augmentation) vs recipe() (per-step LR, uint8 FastImageFolder, "
        "augmentation on the device) with the precision, channels_last and num_workers that tune() measured "
        "first within its time budget, a share of the run: on a short run the budget may allow no "
        "measurement, and recipe()'s defaults are kept (the output says which). "
        "Validates every epoch; prints wall time, time to the baseline's final top-1, images/s, data-wait "
        "share, val top-1, peak memory and ratios. Full length on Imagenette: "
        "--train-images 0 --val-images 0 --image-size 224 --epochs 16",
    )
    demo.add_argument(
        "--data", default=None, help="ImageFolder root with train/ and val/ (default: scikit-learn's digits, offline)"
    )
    demo.add_argument("--out", default=None, help="write the figures as JSON to this file")
    demo.add_argument("--epochs", type=_positive(int), default=4, help="training epochs (default 4)")
    demo.add_argument(
        "--train-images",
        type=_non_negative_int,
        default=1600,
        help="class-balanced training subset, 0 = all (default 1600)",
    )
    demo.add_argument(
        "--val-images",
        type=_non_negative_int,
        default=500,
        help="class-balanced validation subset, 0 = all (default 500)",
    )
    demo.add_argument(
        "--image-size",
        type=_positive(int),
        default=None,
        help="side of the square crops in pixels (default 112; scikit-learn's digits, 8x8-pixel "
        "scans, are written as PNGs of this size)",
    )
    demo.add_argument("--batch-size", type=_positive(int), default=32, help="images per batch (default 32)")
    demo.add_argument(
        "--workers",
        type=_workers,
        default=None,
        metavar="{auto,N}",
        help="DataLoader worker processes per run: 'auto' (default) = as suggest_loader_kwargs() (training on a "
        "GPU: one per CPU core, less one; on the CPU: a quarter of the cores, none up to 3); 0 = load in the main "
        "process, as DataLoader(num_workers=0)",
    )
    demo.add_argument(
        "--lr", type=_positive(float), default=0.025, help="peak SGD learning rate at batch 32 (default 0.025)"
    )
    demo.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")
    demo.add_argument("--no-progress", action="store_true", help="hide Lightning's progress bar")
    demo.add_argument("--no-reports", action="store_true", help="do not print the two efficiency reports")
    demo.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="write val top-1 against wall-clock seconds of both sides to this PNG",
    )
    demo.add_argument("--efficient-first", action="store_true", help="train the efficient side first")
    demo.add_argument(
        "--no-tune",
        action="store_true",
        help="efficient side: recipe()'s defaults instead of the settings tune() measures first",
    )
    tune = sub.add_parser(
        "tune",
        help="measure which settings (precision, channels_last, torch.compile, num_workers) train a torchvision "
        "model fastest on this machine",
        description="Run lightning_efficient.tune() for a torchvision model by name (precision, channels_last, "
        "torch.compile and num_workers), on synthetic input (or "
        "--data): pairs of adjacent timing windows decide each setting, within a time budget (a share of the "
        "planned run, capped); a decision is stored and reused. Prints the table and the recipe() arguments.",
    )
    tune.add_argument("--model", default="resnet50", help="torchvision model name (default resnet50)")
    tune.add_argument("--image-size", type=_positive(int), default=224, help="input side in pixels (default 224)")
    tune.add_argument("--batch-size", type=_positive(int), default=64, help="images per batch (default 64)")
    tune.add_argument(
        "--data",
        default=None,
        help="ImageFolder root (its train/ split if present); default: "
        "synthetic input (one random batch, repeated, 100 batches per epoch)",
    )
    tune.add_argument(
        "--workers",
        type=_workers,
        default=None,
        metavar="{auto,N}",
        help="num_workers of the loader as given with --data (default auto); tune() also tries others",
    )
    tune.add_argument(
        "--precisions",
        nargs="+",
        default=None,
        metavar="P",
        help="precisions to try (default: those this hardware runs natively)",
    )
    tune.add_argument(
        "--compile",
        dest="compile",
        action="store_true",
        default=None,
        help="also measure torch.compile (default: on CUDA only)",
    )
    tune.add_argument("--no-compile", dest="compile", action="store_false", help="never measure torch.compile")
    tune.add_argument(
        "--max-epochs",
        type=_positive(int),
        default=None,
        help="epochs of your planned run (the budget is a share of it; default: no planned length)",
    )
    tune.add_argument(
        "--budget", type=_share, default=0.05, help="share of the planned run tuning may spend (default 0.05)"
    )
    tune.add_argument("--max-seconds", type=_positive(float), default=60.0, help="the budget's cap (default 60 s)")
    tune.add_argument("--no-cache", action="store_true", help="measure again; neither reuse nor store a decision")
    tune.add_argument("--accelerator", default="auto", help="Trainer(accelerator=...) (default auto)")
    tune.add_argument("--out", default=None, help="write the result as JSON to this file")
    sub.add_parser(
        "doctor",
        help="check the environment (torch/CUDA/cuDNN, bf16, AMX, kornia, PIL flavour, cores) and say what to use",
        description="Check the environment (torch, CUDA, cuDNN, native bf16, AMX, kornia, the PIL flavour, CPU "
        "cores) and say which settings to use here.",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``lightning-efficient`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from lightning_efficient.app.config import DemoConfig, UsageError
        from lightning_efficient.app.demo import run_demo_with_fallback

        cfg = DemoConfig(
            data=args.data or "",
            epochs=args.epochs,
            train_images=args.train_images,
            val_images=args.val_images,
            image_size=args.image_size,
            batch_size=args.batch_size,
            workers=args.workers,
            lr=args.lr,
            seed=args.seed,
            progress=not args.no_progress,
            tune=not args.no_tune,
            efficient_first=args.efficient_first,
        )
        try:
            run_demo_with_fallback(cfg, args.out, reports=not args.no_reports, plot=args.plot)
        except UsageError as e:
            print(f"lightning-efficient demo: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("lightning-efficient demo: interrupted", file=sys.stderr)
            return 130
    elif args.command == "tune":
        from lightning_efficient import quiet_lightning
        from lightning_efficient.app.config import UsageError
        from lightning_efficient.app.tune_cli import run

        try:
            with quiet_lightning():
                kw = {"max_epochs": args.max_epochs} if args.max_epochs else {}
                run(
                    args.model,
                    image_size=args.image_size,
                    batch_size=args.batch_size,
                    data=args.data,
                    workers=args.workers,
                    out=args.out,
                    precisions=args.precisions,
                    compile=args.compile,
                    budget=args.budget,
                    max_seconds=args.max_seconds,
                    cache=not args.no_cache,
                    accelerator=args.accelerator,
                    **kw,
                )
        except UsageError as e:
            print(f"lightning-efficient tune: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("lightning-efficient tune: interrupted", file=sys.stderr)
            return 130
    elif args.command == "doctor":
        from lightning_efficient import doctor_report as report

        print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
