"""Images/s of the CPU loading pipeline: torchvision ``ImageFolder`` + ``RandomResizedCrop`` + ``ToTensor`` vs
:class:`~lightning_efficient.FastImageFolder`, on hymenoptera (large, varied JPEGs) and Imagenette (224x224 JPEGs).

Variants (training transforms, same crop distribution, bilinear):

* ``ImageFolder+RRC+ToTensor`` (the reference): ``ImageFolder(root, transform=Compose([RandomResizedCrop(size),
  ToTensor()]))``: full decode, crop+resize in Pillow, ``float32 [3, H, W]`` in 0..1, ``default_collate``.
* ``FastImageFolder``: ``FastImageFolder(root, size, train=True)``: header-only crop choice, DCT-scaled decode
  (``Image.draft``), one crop+resize, ``uint8 [3, H, W]``, ``uint8_collate``.
* ``FastImageFolder resize=pil``: the same, resized by Pillow's ``Image.resize(box=...)`` instead of torch's
  antialiased ``uint8`` kernels (what the resize engine brings; ``resize="auto"`` picks Pillow under Pillow-SIMD).
* ``FastImageFolder draft=False``: the same without DCT scaling (what ``draft`` alone brings).
* ``FastImageFolder backend=torchvision``: ``torchvision.io.decode_image`` + ``v2.functional.resized_crop`` on
  ``uint8``.

Each measurement is one pass of a ``DataLoader`` (batch 32, ``shuffle=False``) over a fixed, seeded list of
images, ``num_workers`` 0 (decode in the main process) or 2 (persistent workers, so worker start-up is paid in the
warm-up pass, not in the measurement); images/s = images yielded / wall time of the pass. The files are read once
in the warm-up, so they are in the page cache: this measures decoding and transforms, not the disk. Variants are
interleaved (``benchmarks.harness.interleave``), with ``torch.manual_seed`` before every pass; with
``num_workers=0`` every variant draws the same crop windows (FastImageFolder reproduces torchvision's draws).
The main process runs torch with ``--threads 1`` by default, as DataLoader workers do: with 2 intra-op threads on a
busy 2-core machine, the small per-image tensor copies (``ToTensor``, the ``uint8`` HWC->CHW copy) wait on OpenMP
barriers and in-process decoding was measured 6x slower (62 vs 370 images/s on Imagenette), which says nothing
about decoding.

    python -m benchmarks.decoding                 # stock Pillow, writes benchmarks/results/decoding.md/.json
    python -m benchmarks.decoding --quick         # smoke test in seconds, writes nothing
    bash benchmarks/pillow_simd_env.sh && /tmp/simd-venv/bin/python -m benchmarks.decoding --label pillow-simd
                                                  # writes benchmarks/results/decoding-pillow-simd.md/.json

The headline: ``FastImageFolder`` over the reference on hymenoptera at 224 px.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
from PIL import Image
from torch.utils.data import default_collate
from torchvision import transforms
from torchvision.datasets import ImageFolder

from benchmarks.harness import (
    DATA,
    RESULTS,
    Comparison,
    comparison_table,
    dataset_roots,
    interleave,
    make_loader,
    markdown_table,
    one_pass,
    pick_indices,
    pil_description,
    write_results,
)
from lightning_efficient import FastImageFolder, pil_flavour, uint8_collate

REFERENCE = "ImageFolder+RRC+ToTensor"
FAST = "FastImageFolder"
TARGET_SIZE = 224


def image_stats(paths: list[str]) -> str:
    """Median/max megapixels of the images (header only)."""
    mp = []
    for p in paths:
        with Image.open(p) as im:
            mp.append(im.size[0] * im.size[1] / 1e6)
    return f"median {statistics.median(mp):.2f} MP, max {max(mp):.2f} MP"


def make_datasets(root: Path, size: int) -> dict[str, tuple[torch.utils.data.Dataset, Callable]]:
    """Variant name -> (dataset, collate_fn). All share ImageFolder's folder scan, so index i is the same file."""
    usual = transforms.Compose([transforms.RandomResizedCrop(size), transforms.ToTensor()])
    baseline = ImageFolder(root, transform=usual)
    return {
        REFERENCE: (baseline, default_collate),
        FAST: (FastImageFolder(root, size, train=True), uint8_collate),
        f"{FAST} resize=pil": (FastImageFolder(root, size, train=True, resize="pil"), uint8_collate),
        f"{FAST} draft=False": (FastImageFolder(root, size, train=True, draft=False), uint8_collate),
        f"{FAST} backend=torchvision": (FastImageFolder(root, size, train=True, backend="torchvision"), uint8_collate),
    }


def check_outputs(datasets: dict, index: int, size: int) -> None:
    """Fail early if a variant does not yield what the table claims (shape and dtype)."""
    for name, (ds, _) in datasets.items():
        img, _ = ds[index]
        want = torch.float32 if name == REFERENCE else torch.uint8
        if tuple(img.shape) != (3, size, size) or img.dtype != want:
            raise RuntimeError(f"{name} yielded {img.dtype} {tuple(img.shape)}, expected {want} (3, {size}, {size})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="folder holding hymenoptera/ and imagenette/")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--datasets", default="hymenoptera,imagenette", help="comma-separated subset to run")
    parser.add_argument("--sizes", default=None, help="output sizes in pixels, comma-separated (default 224,112)")
    parser.add_argument("--workers", default="0,2", help="DataLoader num_workers values, comma-separated")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hymenoptera-images", type=int, default=400, help="at most this many (it has 397 JPEGs)")
    parser.add_argument("--imagenette-images", type=int, default=1000, help="a seeded subset of the val split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads in the main process (DataLoader workers always use 1); >1 lets small tensor "
        "copies spin on OpenMP barriers when the machine is busy",
    )
    parser.add_argument("--label", default="", help="results go to decoding-<label>.md (e.g. pillow-simd)")
    parser.add_argument("--results-dir", type=Path, default=None, help=f"default {RESULTS}")
    parser.add_argument("--quick", action="store_true", help="tiny settings, 1 round; writes only with --results-dir")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.hymenoptera_images, args.imagenette_images = 1, 1, 32, 64
        args.sizes = args.sizes or "224"
    args.sizes = args.sizes or "224,112"
    if args.label and not re.fullmatch(r"[A-Za-z0-9._-]+", args.label):
        parser.error(f"--label must be letters, digits, '.', '_' or '-' (it becomes a file name), got {args.label!r}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    roots = dataset_roots(args.data)
    chosen = [d for d in args.datasets.split(",") if d]
    if not chosen or any(d not in roots for d in chosen):
        parser.error(f"--datasets must name some of {list(roots)}, got {args.datasets!r}")
    if args.hymenoptera_images < 1 or args.imagenette_images < 1:
        parser.error("--hymenoptera-images and --imagenette-images must be >= 1 (use --datasets to leave one out)")
    workers_list = [int(w) for w in args.workers.split(",") if w]
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    flavour = pil_flavour()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"PIL: {pil_description()}; torch threads {torch.get_num_threads()}; cores {cpus}; load {load_before}")
    limits = {"hymenoptera": args.hymenoptera_images, "imagenette": args.imagenette_images}

    sections: list[str] = []
    results: dict[str, dict] = {}
    target_lines: list[str] = []
    t_start = time.perf_counter()
    for ds_name in chosen:
        root = roots[ds_name]
        if not root.is_dir():
            print(f"skipping {ds_name}: {root} not found")
            sections.append(f"### {ds_name}\n\nskipped: `{root}` not found.\n")
            continue
        for size in sizes:
            datasets = make_datasets(root, size)
            ref_ds = datasets[REFERENCE][0]
            indices = pick_indices(len(ref_ds), limits[ds_name], args.seed)
            for name, (ds, _) in datasets.items():  # same scan, same files, same order
                if ds.samples != ref_ds.samples:
                    raise RuntimeError(f"{name} lists different files than ImageFolder on {root}")
            check_outputs(datasets, indices[0], size)
            stats = image_stats([ref_ds.samples[i][0] for i in indices])
            for workers in workers_list:
                key = f"{ds_name} {size}px workers={workers}"
                print(f"{key}: {len(indices)} images ({stats})")
                loaders = {
                    name: make_loader(ds, indices, collate, workers, args.batch_size, args.seed)
                    for name, (ds, collate) in datasets.items()
                }
                variants = {name: (lambda ld=ld: one_pass(ld, args.seed)) for name, ld in loaders.items()}
                comp: Comparison = interleave(variants, rounds=args.rounds, warmup=args.warmup)
                del variants, loaders  # shuts the persistent workers down
                gc.collect()
                table = comparison_table(comp, "images/s")
                print(table)
                sections.append(f"### {key}\n\n{len(indices)} images ({stats}), batch {args.batch_size}.\n\n{table}\n")
                results[key] = {
                    "dataset": ds_name,
                    "size": size,
                    "workers": workers,
                    "images": len(indices),
                    "image_stats": stats,
                    "values": comp.values,
                    "summary": {n: comp.summary(n) for n in comp.names},
                }
                if ds_name == "hymenoptera" and size == TARGET_SIZE:
                    r = comp.summary(FAST)["ratio_median"]
                    target_lines.append(f"workers={workers}: {FAST} / reference = {r:.2f}x")
    elapsed = time.perf_counter() - t_start
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None

    if target_lines:
        head = f"On hymenoptera at {TARGET_SIZE} px, with {flavour}"
        target_md = head + ":\n\n" + "\n".join(f"- {line}" for line in target_lines)
    else:
        target_md = f"Hymenoptera at {TARGET_SIZE} px: not measured in this run."
    summary_rows = [
        (
            k,
            f"{v['summary'][REFERENCE]['median']:.0f}",
            f"{v['summary'][FAST]['median']:.0f}",
            f"{v['summary'][FAST]['ratio_median']:.2f}x",
        )
        for k, v in results.items()
    ]
    body = "\n".join(
        [
            f"PIL: **{pil_description()}**. Training transforms (RandomResizedCrop, scale (0.08, 1), bilinear). "
            f"{args.rounds} interleaved rounds after {args.warmup} warm-up pass(es) per variant; seed {args.seed}; "
            f"torch threads in the main process: {args.threads} (workers use 1).",
            "",
            "Reference = torchvision `ImageFolder` + `RandomResizedCrop(size)` + `ToTensor()` (float32 output, "
            "`default_collate`); FastImageFolder variants yield uint8 (`uint8_collate`). One measurement = one "
            "DataLoader pass (batch "
            f"{args.batch_size}, persistent workers when num_workers > 0) over a fixed, seeded image list, files "
            "in the page cache.",
            "",
            target_md,
            "",
            f"Load average (1, 5, 15 min) before: {load_before}, after: {load_after}; {elapsed:.0f} s in all. "
            "The machine may have been shared with other work; the ratios come from back-to-back interleaved pairs "
            "in one process and stay meaningful, absolute images/s less so.",
            "",
            "## Summary (medians)",
            "",
            markdown_table(("setting", f"{REFERENCE} images/s", f"{FAST} images/s", "ratio"), summary_rows),
            "",
            "## Details",
            "",
            *sections,
            "",
            f"Command: `python -m benchmarks.decoding {' '.join(_argv())}`",
        ]
    )
    print(target_md)
    print(f"{elapsed:.0f} s")
    if args.quick and args.results_dir is None:
        print("--quick: not writing results (pass --results-dir to write them)")
        return
    name = "decoding" + (f"-{args.label}" if args.label else "")
    data = {
        "args": vars(args),
        "pil": flavour,
        "load_before": load_before,
        "load_after": load_after,
        "elapsed_s": elapsed,
        "results": results,
        "target": target_lines,
    }
    path = write_results(
        name,
        f"CPU image loading: ImageFolder vs FastImageFolder ({flavour})",
        body,
        data,
        results_dir=args.results_dir or RESULTS,
    )
    print(f"wrote {path}")


def _argv() -> list[str]:
    import sys

    return sys.argv[1:]


if __name__ == "__main__":
    main()
