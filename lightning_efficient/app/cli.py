"""``lightning-efficient`` command line: ``demo`` (the main job) and ``doctor`` (environment check)."""

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


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _workers(text: str) -> Optional[int]:
    """``--workers``: ``auto`` (None: one per CPU core, less one) or an integer >= 0 (0: load in the main process)."""
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
        help="train ResNet-18 twice (plain Lightning vs recipe()) and print a side-by-side table",
        description="Train the same ResNet-18 twice, same seed and epochs: plain Lightning (32-true, NCHW, "
        "per-epoch LR, per-image CPU augmentation) vs recipe() (mixed precision, channels_last, per-step LR, "
        "uint8 FastImageFolder, augmentation on the device). Prints wall time, images/s, data-wait share, "
        "val top-1, peak memory and ratios. Full length on Imagenette: "
        "--train-images 0 --val-images 0 --image-size 224 --epochs 16",
    )
    demo.add_argument("--data", default=None, help="ImageFolder root with train/ and val/ "
                      "(default: scikit-learn's digits, offline)")
    demo.add_argument("--out", default=None, help="write the figures as JSON to this file")
    demo.add_argument("--epochs", type=_positive(int), default=4, help="training epochs (default 4)")
    demo.add_argument("--train-images", type=_non_negative_int, default=1600,
                      help="class-balanced training subset, 0 = all (default 1600)")
    demo.add_argument("--val-images", type=_non_negative_int, default=500,
                      help="class-balanced validation subset, 0 = all (default 500)")
    demo.add_argument("--image-size", type=_positive(int), default=None,
                      help="side of the square crops in pixels (default: 112 with --data; 32 with scikit-learn's "
                      "digits, 8x8-pixel scans written as PNGs of this size)")
    demo.add_argument("--batch-size", type=_positive(int), default=32, help="images per batch (default 32)")
    demo.add_argument("--workers", type=_workers, default=None, metavar="{auto,N}",
                      help="DataLoader worker processes per run: 'auto' (default) = one per CPU core, less one "
                      "for training; 0 = load in the main process, as DataLoader(num_workers=0)")
    demo.add_argument("--lr", type=_positive(float), default=0.025,
                      help="peak SGD learning rate at batch 32 (default 0.025)")
    demo.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")
    demo.add_argument("--no-progress", action="store_true", help="hide Lightning's progress bar")
    demo.add_argument("--no-reports", action="store_true", help="do not print the two efficiency reports")
    sub.add_parser(
        "doctor",
        help="check the environment (torch/CUDA/cuDNN, bf16, AMX, kornia, PIL flavour, cores) and say what to use",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``lightning-efficient`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from lightning_efficient.app.demo import DemoConfig, DemoError, run_demo_with_fallback

        cfg = DemoConfig(
            data=args.data or "", epochs=args.epochs, train_images=args.train_images, val_images=args.val_images,
            image_size=args.image_size, batch_size=args.batch_size, workers=args.workers, lr=args.lr,
            seed=args.seed, progress=not args.no_progress,
        )
        try:
            run_demo_with_fallback(cfg, args.out, reports=not args.no_reports)
        except DemoError as e:
            print(f"lightning-efficient demo: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("lightning-efficient demo: interrupted", file=sys.stderr)
            return 130
    elif args.command == "doctor":
        from lightning_efficient.app.doctor import report

        print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
