"""The :mod:`benchmarks.decoding` matrix on a GPU machine (many cores), plus nvJPEG decoding on the GPU.

Variants per dataset x output size x ``num_workers`` (default 8 and 16):

* the four CPU pipelines of :mod:`benchmarks.decoding` (``ImageFolder+RRC+ToTensor`` reference, ``FastImageFolder``,
  ``draft=False``, ``backend=torchvision``), with ``pin_memory=True`` and each batch copied to the GPU
  (``non_blocking``) so the host-to-device transfer is counted: float32 for the reference, uint8 for the others;
* ``nvJPEG batch + GPU RRC`` (if ``torchvision.io.decode_jpeg(device="cuda")`` works here): the package's own path,
  ``FastImageFolder(backend="nvjpeg")`` + ``uint8_collate`` + :func:`lightning_efficient.data.decode_batch` (what
  the ``GPUDecode`` callback calls): DataLoader workers read the file bytes and draw the crop from the header; the
  main process decodes each batch with one ``decode_jpeg(list_of_bytes, device="cuda")`` call (nvJPEG), crops,
  resizes (antialiased) and applies EXIF orientation on the GPU, giving ``uint8 [B, 3, S, S]`` there. Files the
  GPU decoder rejects are decoded by Pillow on the CPU (counted and reported).

One measurement = one pass over a fixed, seeded image list, ending with ``torch.cuda.synchronize``; images/s =
images / wall time. Variants are interleaved. Without CUDA the script prints why and exits with status 0.

    python -m benchmarks.decoding_gpu                   # writes benchmarks/results/decoding-gpu.md/.json
    python -m benchmarks.decoding_gpu --quick           # smoke test, writes nothing
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from benchmarks.decoding import (
    DATA,
    FAST,
    REFERENCE,
    check_outputs,
    dataset_roots,
    image_stats,
    pil_description,
    make_datasets,
    make_loader,
    one_pass,
    pick_indices,
)
from benchmarks.harness import RESULTS, comparison_table, interleave, markdown_table, write_results
from lightning_efficient import FastImageFolder, pil_flavour, uint8_collate
from lightning_efficient.data import EncodedImages, decode_batch

NVJPEG = "nvJPEG batch + GPU RRC"


class CountingGPUDecode:
    """:func:`lightning_efficient.data.decode_batch` on ``device``, counting the images decoded on the CPU instead."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.fallback_paths: list[str] = []

    @property
    def cpu_fallbacks(self) -> int:
        return len(self.fallback_paths)

    def __call__(self, encoded: EncodedImages) -> torch.Tensor:
        return decode_batch(encoded, self.device, cpu_fallbacks=self.fallback_paths)


def nvjpeg_pass(loader: DataLoader, decoder: CountingGPUDecode, seed: int) -> float:
    torch.manual_seed(seed)
    n = 0
    start = time.perf_counter()
    for encoded, _ in loader:
        n += decoder(encoded).shape[0]
    torch.cuda.synchronize(decoder.device)
    return n / (time.perf_counter() - start)


def nvjpeg_available(device: torch.device) -> str:
    """'' if ``decode_jpeg(device="cuda")`` decodes a small JPEG correctly here, else the reason it does not."""
    try:
        from torchvision.io import decode_jpeg, encode_jpeg

        img = torch.zeros(3, 16, 16, dtype=torch.uint8)
        img[0] = 200
        out = decode_jpeg([encode_jpeg(img)], device=device)[0]
        if out.device.type != "cuda" or tuple(out.shape) != (3, 16, 16) or abs(int(out[0].float().mean()) - 200) > 5:
            return f"decode_jpeg(device='cuda') returned {out.dtype} {tuple(out.shape)} on {out.device}"
        return ""
    except Exception as err:  # noqa: BLE001  (any failure means: not usable here)
        first_line = (str(err).strip().splitlines() or [""])[0]
        return f"{type(err).__name__}: {first_line}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="folder holding hymenoptera/ and imagenette/")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--sizes", default="224,112", help="output sizes in pixels, comma-separated")
    parser.add_argument("--workers", default="8,16", help="DataLoader num_workers values, comma-separated")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hymenoptera-images", type=int, default=400)
    parser.add_argument("--imagenette-images", type=int, default=3000, help="a seeded subset of the val split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="gpu", help="results go to decoding-<label>.md")
    parser.add_argument("--results-dir", type=Path, default=None, help=f"default {RESULTS}")
    parser.add_argument("--quick", action="store_true", help="tiny settings, 1 round; writes only with --results-dir")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print("decoding_gpu: CUDA is not available on this machine, nothing to measure; "
              "run it on a machine with an NVIDIA GPU (the CPU-only benchmark is `python -m benchmarks.decoding`).")
        return 0
    if args.quick:
        args.rounds, args.warmup, args.hymenoptera_images, args.imagenette_images = 1, 1, 64, 128
        args.sizes = "224"
    sizes = [int(s) for s in args.sizes.split(",") if s]
    workers_list = [int(w) for w in args.workers.split(",") if w]
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torchvision\.io")  # 0.29 io deprecation

    device = torch.device("cuda")
    torch.set_num_threads(1)  # the main process only moves batches; keep it off the workers' cores
    nvjpeg_reason = nvjpeg_available(device)
    flavour = pil_flavour()
    print(f"GPU: {torch.cuda.get_device_name(device)}; PIL: {flavour}; "
          f"nvJPEG: {'available' if not nvjpeg_reason else 'unavailable (' + nvjpeg_reason + ')'}")
    limits = {"hymenoptera": args.hymenoptera_images, "imagenette": args.imagenette_images}

    sections: list[str] = []
    results: dict[str, dict] = {}
    t_start = time.perf_counter()
    for ds_name, root in dataset_roots(args.data).items():
        if not root.is_dir():
            print(f"skipping {ds_name}: {root} not found")
            sections.append(f"### {ds_name}\n\nskipped: `{root}` not found.\n")
            continue
        for size in sizes:
            datasets = make_datasets(root, size)
            ref_ds = datasets[REFERENCE][0]
            indices = pick_indices(len(ref_ds), limits[ds_name], args.seed)
            check_outputs(datasets, indices[0], size)
            stats = image_stats([ref_ds.samples[i][0] for i in indices])
            for workers in workers_list:
                key = f"{ds_name} {size}px workers={workers}"
                print(f"{key}: {len(indices)} images ({stats})")
                loaders = {
                    name: make_loader(ds, indices, collate, workers, args.batch_size, args.seed, pin_memory=True)
                    for name, (ds, collate) in datasets.items()
                }
                variants = {name: (lambda ld=ld: one_pass(ld, args.seed, device)) for name, ld in loaders.items()}
                decoder = None
                if not nvjpeg_reason:
                    decoder = CountingGPUDecode(device)
                    encoded_ds = FastImageFolder(root, size, train=True, backend="nvjpeg")
                    byte_loader = make_loader(encoded_ds, indices, uint8_collate, workers, args.batch_size, args.seed)
                    variants[NVJPEG] = lambda bl=byte_loader, dec=decoder: nvjpeg_pass(bl, dec, args.seed)
                    del byte_loader  # only the lambda holds it, so `del variants` shuts its workers down
                comp = interleave(variants, rounds=args.rounds, warmup=args.warmup)
                del variants, loaders
                gc.collect()
                table = comparison_table(comp, "images/s")
                print(table)
                note = ""
                if decoder is not None and decoder.cpu_fallbacks:
                    note = f" {NVJPEG}: {decoder.cpu_fallbacks} image decodes fell back to the CPU over all passes."
                sections.append(
                    f"### {key}\n\n{len(indices)} images ({stats}), batch {args.batch_size}.{note}\n\n{table}\n"
                )
                results[key] = {
                    "dataset": ds_name, "size": size, "workers": workers, "images": len(indices), "image_stats": stats,
                    "cpu_fallbacks": decoder.cpu_fallbacks if decoder is not None else None,
                    "values": comp.values, "summary": {n: comp.summary(n) for n in comp.names},
                }
    elapsed = time.perf_counter() - t_start

    columns = [FAST] + ([NVJPEG] if not nvjpeg_reason else [])
    rows = [
        (k, f"{v['summary'][REFERENCE]['median']:.0f}",
         *(f"{v['summary'][c]['median']:.0f} ({v['summary'][c]['ratio_median']:.2f}x)" for c in columns))
        for k, v in results.items()
    ]
    body = "\n".join(
        [
            f"GPU: **{torch.cuda.get_device_name(device)}**; PIL: **{pil_description()}**; nvJPEG: "
            f"{'available' if not nvjpeg_reason else 'unavailable (' + nvjpeg_reason + ')'}. Training transforms "
            f"(RandomResizedCrop, scale (0.08, 1), bilinear). {args.rounds} interleaved rounds after {args.warmup} "
            f"warm-up pass(es) per variant; batch {args.batch_size}; seed {args.seed}; {elapsed:.0f} s in all.",
            "",
            "Every variant ends with its batches on the GPU (pinned memory, non-blocking copies, synchronize at the "
            "end of the pass). Reference = `ImageFolder` + `RandomResizedCrop` + `ToTensor` (float32).",
            "",
            "## Summary (median images/s, ratio to the reference)",
            "",
            markdown_table(("setting", REFERENCE, *columns), rows),
            "",
            "## Details",
            "",
            *sections,
            "",
            f"Command: `python -m benchmarks.decoding_gpu {' '.join(sys.argv[1:])}`",
        ]
    )
    print(f"{elapsed:.0f} s")
    if args.quick and args.results_dir is None:
        print("--quick: not writing results (pass --results-dir to write them)")
        return 0
    name = "decoding" + (f"-{args.label}" if args.label else "")
    data = {"args": vars(args), "pil": flavour, "nvjpeg": nvjpeg_reason or "available", "elapsed_s": elapsed,
            "results": results}
    path = write_results(name, f"GPU machine image loading: ImageFolder vs FastImageFolder vs nvJPEG ({flavour})",
                         body, data, results_dir=args.results_dir or RESULTS)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
