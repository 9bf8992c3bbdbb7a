"""The :mod:`benchmarks.decoding` matrix on a GPU machine (many cores), plus nvJPEG decoding on the GPU.

Variants per dataset x output size x ``num_workers`` (default 8 and 16):

* the four CPU pipelines of :mod:`benchmarks.decoding` (``ImageFolder+RRC+ToTensor`` reference, ``FastImageFolder``,
  ``draft=False``, ``backend=torchvision``), with ``pin_memory=True`` and each batch copied to the GPU
  (``non_blocking``) so the host-to-device transfer is counted: float32 for the reference, uint8 for the others;
* ``nvJPEG batch + GPU RRC`` (if ``torchvision.io.decode_jpeg(device="cuda")`` works here): DataLoader workers only
  read the file bytes; the main process decodes each batch with one ``decode_jpeg(list_of_bytes, device="cuda")``
  call (nvJPEG) and does the RandomResizedCrop per image on the GPU (torchvision ``v2.functional.resized_crop``,
  bilinear, antialias), giving ``uint8 [B, 3, S, S]`` on the GPU. Crop windows are drawn exactly as torchvision /
  FastImageFolder draw them (torch CPU RNG). EXIF orientation is not applied on this path (torchvision's CUDA
  decoder does not support it): irrelevant for throughput. Files the GPU decoder rejects are decoded on the CPU
  (counted and reported).

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
from torch.utils.data import DataLoader, Dataset

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
from lightning_efficient import pil_flavour
from lightning_efficient.data.decode import random_resized_crop_box

NVJPEG = "nvJPEG batch + GPU RRC"
JPEG_MAGIC = b"\xff\xd8"


class FileBytes(Dataset):
    """``(uint8 [n_bytes] tensor of the file, target)`` for each ``(path, target)`` in ``samples``."""

    def __init__(self, samples: list[tuple[str, int]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, target = self.samples[index]
        return torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8), target


def list_collate(batch):
    """Keep the byte tensors as a list (they have different lengths); targets as int64 [B]."""
    return [data for data, _ in batch], torch.tensor([target for _, target in batch], dtype=torch.int64)


class GPUDecoder:
    """Batched nvJPEG decode + per-image RandomResizedCrop on ``device``; counts CPU fallbacks."""

    def __init__(self, device: torch.device, size: int) -> None:
        self.device = device
        self.size = size
        self.cpu_fallbacks = 0

    def _decode(self, datas: list[torch.Tensor]) -> list[torch.Tensor]:
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg

        jpeg = [k for k, d in enumerate(datas) if bytes(d[:2].tolist()) == JPEG_MAGIC]
        out: list[torch.Tensor | None] = [None] * len(datas)
        if jpeg:
            try:
                decoded = decode_jpeg([datas[k] for k in jpeg], mode=ImageReadMode.RGB, device=self.device)
            except RuntimeError:  # one file nvJPEG cannot handle fails the whole call: retry one by one
                decoded = []
                for k in jpeg:
                    try:
                        decoded.append(decode_jpeg(datas[k], mode=ImageReadMode.RGB, device=self.device))
                    except RuntimeError:
                        decoded.append(None)
            for k, img in zip(jpeg, decoded):
                out[k] = img
        for k, img in enumerate(out):
            if img is None:  # not a JPEG, or rejected by nvJPEG: decode on the CPU
                self.cpu_fallbacks += 1
                out[k] = decode_image(datas[k], mode=ImageReadMode.RGB).to(self.device, non_blocking=True)
        return out  # type: ignore[return-value]

    def __call__(self, datas: list[torch.Tensor]) -> torch.Tensor:
        from torchvision.transforms.v2 import functional as F

        crops = []
        for img in self._decode(datas):
            height, width = img.shape[-2:]
            top, left, h, w = random_resized_crop_box(width, height)
            crops.append(F.resized_crop(img, top, left, h, w, [self.size, self.size], antialias=True))
        return torch.stack(crops)


def nvjpeg_pass(loader: DataLoader, decoder: GPUDecoder, seed: int) -> float:
    torch.manual_seed(seed)
    n = 0
    start = time.perf_counter()
    for datas, _ in loader:
        n += decoder(datas).shape[0]
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
                    decoder = GPUDecoder(device, size)
                    byte_loader = make_loader(FileBytes(ref_ds.samples), indices, list_collate, workers,
                                              args.batch_size, args.seed)
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
