"""Does the row-limited JPEG decode pay? ``FastImageFolder(row_limited_decode=True)`` (A, the default) vs
``row_limited_decode=False`` (B), interleaved in one process, on hymenoptera (large photos of varied sizes) and
Imagenette (224x224 JPEGs) at 224 px, training crops (RandomResizedCrop), ``num_workers=0``, one torch thread.

The row limit is the one place the package uses Pillow private attributes
(``lightning_efficient/data/decode/row_limit.py``); it is kept only while this benchmark shows a gain. Everything
else (DataLoader, seeded image list, interleaving, images/s) is as in ``benchmarks/decoding.py``, whose helpers
this reuses.

    python -m benchmarks.row_limited_decode            # full run (~1-2 minutes), writes
                                                       # benchmarks/results/row_limited_decode.md/.json
    python -m benchmarks.row_limited_decode --quick    # smoke test in seconds, writes nothing
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import torch

from benchmarks.harness import (
    DATA,
    RESULTS,
    comparison_table,
    dataset_roots,
    interleave,
    make_loader,
    one_pass,
    pick_indices,
    pil_description,
    write_results,
)
from lightning_efficient import FastImageFolder, uint8_collate
from lightning_efficient.data.decode import row_limit_available

ON = "row_limited_decode=True"
OFF = "row_limited_decode=False"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="folder holding hymenoptera/ and imagenette/")
    parser.add_argument("--size", type=int, default=224, help="output size in pixels")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--images", type=int, default=400, help="at most this many images per dataset")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results-dir", type=Path, default=None, help=f"default {RESULTS}")
    parser.add_argument("--quick", action="store_true", help="1 round of 32 images; writes only with --results-dir")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.images = 1, 1, 32
    if args.rounds < 1 or args.images < 1:
        parser.error("--rounds and --images must be >= 1")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    if not row_limit_available():
        raise SystemExit("The row-limited decode does not work with this Pillow: nothing to compare.")
    print(f"PIL: {pil_description()}")
    start = time.perf_counter()
    sections, results = [], {}
    for name, root in dataset_roots(args.data).items():
        if not root.is_dir():
            print(f"skipping {name}: {root} is absent")
            continue
        datasets = {
            ON: FastImageFolder(root, args.size, train=True, row_limited_decode=True),
            OFF: FastImageFolder(root, args.size, train=True, row_limited_decode=False),
        }
        indices = pick_indices(len(datasets[ON]), args.images, args.seed)
        loaders = {k: make_loader(ds, indices, uint8_collate, 0, args.batch_size, args.seed) for k, ds in datasets.items()}
        print(f"{name}: {len(indices)} images, {args.size} px")
        comp = interleave(
            {k: (lambda loader=loader: one_pass(loader, args.seed)) for k, loader in loaders.items()},
            rounds=args.rounds,
            warmup=args.warmup,
        )
        table = comparison_table(comp, "images/s")
        print(table)
        sections.append(f"## {name}, {len(indices)} images, {args.size} px, num_workers=0\n\n{table}\n")
        results[name] = {"images": len(indices), "values": comp.values, "summary": {k: comp.summary(k) for k in comp.names}}
    elapsed = time.perf_counter() - start
    print(f"{elapsed:.0f} s")
    if args.quick and args.results_dir is None:
        print("--quick: not writing results (pass --results-dir to write them)")
        return
    body = "\n".join(
        [
            f"Images/s of one DataLoader pass; ratio = {OFF} / {ON} per interleaved pair (below 1: the row limit",
            f"pays). {args.rounds} rounds, batch {args.batch_size}, one torch thread, PIL: {pil_description()}.",
            "",
            *sections,
        ]
    )
    data = {"args": {k: str(v) for k, v in vars(args).items()}, "elapsed_s": elapsed, "load": os.getloadavg(),
            "results": results}
    path = write_results("row_limited_decode", "Row-limited JPEG decode on vs off (FastImageFolder)", body, data,
                         results_dir=args.results_dir or RESULTS)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
