"""``benchmarks.augmentation`` on a CUDA machine: TrivialAugment in CPU workers vs per sample on the GPU.

The same three comparisons as ``python -m benchmarks.augmentation`` (augmentation only; input pipeline; end-to-end
ResNet-18 training through ``pl.Trainer``), with GPU-sized settings: 224 px, batch 256, ``bf16-mixed`` +
``ChannelsLast`` on both sides, DataLoader workers = CPU cores - 1 (at most 15; the same number for both sides).
Target of the issue: end-to-end images/s of B (GPUAugmentation) >= 1.5x A (torchvision ``TrivialAugmentWide`` in
workers) on 16 CPU cores + one H200. The script prints whether it was met.

Data: Imagenette (``--data``, else ``../shared/data/imagenette`` or ``./shared/data/imagenette``). Without it the
script writes 2,000 synthetic JPEGs (10 classes, 320x256, smooth random content) to a temporary folder and says so
in the results: decoding cost is then realistic, image content is not.

Exits 0 with a message when CUDA is absent; exits 2 with a message naming what to install when a dependency
(kornia, pytorch_lightning, torchvision) is missing, since ``lightning_efficient`` cannot be imported without them.

    python -m benchmarks.augmentation_gpu                  # about 4 minutes on 16 cores + H200
    python -m benchmarks.augmentation_gpu --quick          # about 1 minute: fewer batches, 1 round
    python -m benchmarks.augmentation_gpu --out "$OUT"     # results folder (default benchmarks/results)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

REQUIRED = {"torch": "torch", "torchvision": "torchvision", "pytorch_lightning": "pytorch-lightning",
            "kornia": "kornia", "PIL": "pillow"}


def preflight() -> Optional[tuple[int, str]]:
    """``None`` when the benchmark can run, else ``(exit status, message)``."""
    missing = [pip for mod, pip in REQUIRED.items() if importlib.util.find_spec(mod) is None]
    if missing:
        return 2, (
            f"[augmentation_gpu] cannot run: missing Python package(s) {', '.join(missing)} (lightning_efficient "
            f"imports them). Install with `pip install {' '.join(missing)}` and run again."
        )
    import torch

    if not torch.cuda.is_available():
        return 0, "[augmentation_gpu] skipped: no CUDA device (torch.cuda.is_available() is False)."
    try:
        import lightning_efficient  # noqa: F401
    except Exception as err:  # noqa: BLE001 - reported, not hidden
        return 2, f"[augmentation_gpu] cannot import lightning_efficient: {type(err).__name__}: {err}"
    return None


def synthetic_jpegs(root: Path, classes: int = 10, per_class: int = 200, seed: int = 0) -> Path:
    """Write ``classes * per_class`` smooth random 320x256 RGB JPEGs as ``root/train/<class>/<i>.jpg``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in range(classes):
        folder = root / "train" / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            low = Image.fromarray(rng.integers(0, 256, (12, 15, 3), dtype=np.uint8))
            img = np.asarray(low.resize((320, 256), Image.BICUBIC), dtype=np.int16)
            img = (img + rng.integers(-12, 13, img.shape, dtype=np.int16)).clip(0, 255).astype(np.uint8)
            Image.fromarray(img).save(folder / f"{i:04d}.jpg", quality=90)
    return root / "train"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer batches, 1 round (a smoke test of the script)")
    parser.add_argument("--data", help="Imagenette root (with train/)")
    parser.add_argument("--out", help="results folder (default benchmarks/results)")
    parser.add_argument("--workers", type=int, help="DataLoader workers for both sides (default cores - 1, <= 15)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args(argv)

    problem = preflight()
    if problem is not None:
        status, message = problem
        print(message, file=sys.stderr if status else sys.stdout)
        return status

    import torch

    from benchmarks.augmentation import RESULTS, Settings, find_data, run

    cores = len(os.sched_getaffinity(0))
    workers = args.workers if args.workers is not None else max(1, min(15, cores - 1))
    s = Settings(
        device="cuda", size=args.size, batch_size=args.batch_size, workers=workers,
        micro_images=1024, pipeline_batches=3 * workers, fit_batches=6 * workers,
        rounds=3, fit_rounds=3, warmup=1, precision="bf16-mixed",
    )
    if args.quick:
        s.micro_images, s.pipeline_batches, s.fit_batches, s.rounds, s.fit_rounds = 256, 2 * workers, 2 * workers, 1, 1
    shm = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 0
    need = 2 * workers * args.batch_size * 3 * args.size**2 * 4
    if shm and shm < 2 * need:
        print(f"[augmentation_gpu] warning: /dev/shm has {shm / 2**30:.1f} GiB free; float batches in flight need "
              f"about {need / 2**30:.1f} GiB. If workers die with a bus error, pass --workers 4 or --batch-size 128.")
    print(f"[augmentation_gpu] {torch.cuda.get_device_name()}, {cores} CPU cores, torch {torch.__version__}",
          flush=True)

    root = find_data(args.data)
    tmp = None
    data_note = f"Imagenette train ({root}), fixed class-balanced subset, cycled when more images are needed"
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="augmentation_gpu_"))
        print(f"[augmentation_gpu] Imagenette not found; writing 2,000 synthetic JPEGs to {tmp}", flush=True)
        root = synthetic_jpegs(tmp)
        data_note = "SYNTHETIC JPEGs (Imagenette absent): 10 classes x 200, 320x256, smooth random content"
    try:
        run(
            s, root, "augmentation_gpu", "TrivialAugment: CPU workers vs on the GPU",
            Path(args.out) if args.out else RESULTS, target=1.5, data_note=data_note,
            note=(
                "A decodes, crops, augments (torchvision TrivialAugmentWide on PIL), converts to float and "
                "normalises every image in the workers and ships float32 batches; B's workers decode and crop to "
                "uint8 only (FastImageFolder) and the GPU converts, augments per sample and normalises. The "
                "augmentation-only comparison (1) runs A in one Python process (one core) against B on the GPU. "
                "C feeds in-memory uint8 batches (no loader) through GPUAugmentation: the most the GPU step allows, "
                "so A's and B's shares of C say how far each is from being input-bound. Imagenette's JPEGs are "
                "small (about 224 px), so decoding is cheap here; with full-size ImageNet JPEGs decoding weighs "
                "more on both sides and B's advantage shrinks."
            ),
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
