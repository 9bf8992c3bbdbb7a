"""ChannelsLast on a CUDA GPU: Trainer images/s, {32-true, bf16-mixed[, 16-mixed]} x {NCHW, ChannelsLast}, 224 px.

The GPU counterpart of ``benchmarks/channels_last.py``: for ResNet-18, ResNet-50 and MobileNetV3-Large (10 classes,
random init), each precision is measured with and without ``callbacks=[ChannelsLast()]``, interleaved in one
process; ratios are per round (variants of a round run back to back). Batch 128, 224 px, SGD with momentum,
``Trainer(accelerator="gpu", devices=1, benchmark=True)`` (cuDNN picks its fastest kernels for each layout).

Data: a few synthetic float batches made once **on the GPU** and served by a map-style dataset with
``batch_size=None``, so neither collation nor host-to-device copies are measured; the ChannelsLast batch conversion
(an on-device copy per batch) is. Timing: ``torch.cuda.synchronize()`` then ``time.perf_counter()`` at the end of
batch ``skip - 1`` and of the last batch; images/s = batch * (batches - skip) / elapsed. Note ``32-true``
convolutions use TF32 on Ampere and later (``torch.backends.cudnn.allow_tf32``, PyTorch's default, printed).

    python benchmarks/channels_last_gpu.py                 # ~4-6 min on an H100/H200
    python benchmarks/channels_last_gpu.py --fp16          # adds 16-mixed (+50 % time)
    python benchmarks/channels_last_gpu.py --models resnet50 --rounds 5

Writes ``benchmarks/results/channels_last_gpu.md`` and ``.json`` (and, if ``$OUT`` is set, copies there too).
Exits with status 0 and a message where CUDA is absent. If ``import lightning_efficient`` fails only because
``kornia`` (used by GPUAugmentation, not by ChannelsLast) is missing, it says so and loads the ChannelsLast
modules without the package's ``__init__``: the same source files, nothing re-implemented.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
import types
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODEL_NAMES = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0")
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v3_large")


def import_channels_last():
    """``lightning_efficient.ChannelsLast``, or the same class loaded without the package ``__init__`` if only kornia
    is missing. Returns ``(ChannelsLast, how)``."""
    try:
        from lightning_efficient import ChannelsLast

        return ChannelsLast, "import lightning_efficient"
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] != "kornia":
            print(f"ERROR: `import lightning_efficient` failed: module {err.name!r} is not installed ({err}).")
            print("Install it (pip install pytorch-lightning torchvision lightning-utilities) and rerun.")
            sys.exit(2)
        print(
            "NOTE: `import lightning_efficient` failed because kornia is not installed (the package __init__ imports "
            "GPUAugmentation, which needs kornia; ChannelsLast does not). Loading "
            "lightning_efficient/callbacks/channels_last.py and its dependencies without the package __init__ files."
        )
    for name in [m for m in sys.modules if m == "lightning_efficient" or m.startswith("lightning_efficient.")]:
        del sys.modules[name]
    for pkg in ("lightning_efficient", "lightning_efficient.callbacks", "lightning_efficient.functional"):
        module = types.ModuleType(pkg)
        module.__path__ = [str(ROOT / pkg.replace(".", "/"))]
        sys.modules[pkg] = module
    from lightning_efficient.callbacks.channels_last import ChannelsLast

    return ChannelsLast, "loaded without the package __init__ (kornia missing)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODEL_NAMES, default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured fits of each variant first")
    parser.add_argument("--batches", type=int, default=40, help="batches per fit")
    parser.add_argument("--skip", type=int, default=10, help="batches at the start of each fit not timed "
                        "(cuDNN autotuning, allocator)")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--fp16", action="store_true", help="also measure 16-mixed")
    parser.add_argument("--dry-run-cpu", action="store_true", help="check this script without a GPU: the same code "
                        "on the CPU with tiny sizes (resnet18, 64 px, batch 8, 4 batches, 1 round); numbers meaningless")
    args = parser.parse_args(argv)
    if args.dry_run_cpu:
        args.models, args.size, args.batch_size, args.batches, args.skip, args.rounds, args.warmup = (
            ["resnet18"], 64, 8, 4, 1, 1, 0)
    if args.rounds < 1 or args.warmup < 0 or args.skip < 1 or args.batches < args.skip + 2:
        parser.error("need --rounds >= 1, --warmup >= 0, --skip >= 1 and --batches >= --skip + 2")

    try:
        import torch
    except ModuleNotFoundError:
        print("torch is not installed; nothing to measure.")
        return
    if not (torch.cuda.is_available() or args.dry_run_cpu):
        print("CUDA is not available on this machine: benchmarks/channels_last_gpu.py measures GPU training only; "
              "for the CPU numbers run `python -m benchmarks.channels_last`.")
        return
    try:
        import pytorch_lightning as pl
        import torchvision
    except ModuleNotFoundError as err:
        print(f"ERROR: {err.name!r} is not installed; this script needs pytorch_lightning and torchvision.")
        sys.exit(2)
    ChannelsLast, how = import_channels_last()
    from benchmarks.harness import Comparison, comparison_table, interleave, markdown_table, write_results

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*Tensor Cores.*")  # Lightning's float32_matmul_precision hint
    torch.backends.cudnn.benchmark = True
    device = torch.device("cpu" if args.dry_run_cpu else "cuda")
    accelerator = "cpu" if args.dry_run_cpu else "gpu"
    sync = (lambda: None) if args.dry_run_cpu else torch.cuda.synchronize
    gpu_name = "CPU dry run (no GPU)" if args.dry_run_cpu else torch.cuda.get_device_name()
    precisions = ["32-true", "bf16-mixed"] + (["16-mixed"] if args.fp16 else [])

    class Classifier(pl.LightningModule):
        def __init__(self, arch: str) -> None:
            super().__init__()
            self.model = getattr(torchvision.models, arch)(num_classes=10)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    class GpuBatches(torch.utils.data.Dataset):
        """``length`` batches cycling over a few pre-made NCHW ``(x [B, 3, S, S] float32, y [B] int64)`` on the GPU."""

        def __init__(self, length: int, distinct: int = 4) -> None:
            g = torch.Generator(device=device).manual_seed(0)
            b, s = args.batch_size, args.size
            self.batches = [
                (torch.randn(b, 3, s, s, device=device, generator=g),
                 torch.randint(0, 10, (b,), device=device, generator=g))
                for _ in range(distinct)
            ]
            self.length = length

        def __len__(self) -> int:
            return self.length

        def __getitem__(self, i: int):
            return self.batches[i % len(self.batches)]

    class SyncClock(pl.Callback):
        """Seconds between the ends of batch ``skip - 1`` and of the last batch, after ``torch.cuda.synchronize``."""

        def __init__(self) -> None:
            self.t0 = self.t1 = None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if batch_idx == args.skip - 1:
                sync()
                self.t0 = time.perf_counter()
            elif batch_idx == args.batches - 1:
                sync()
                self.t1 = time.perf_counter()

    data = GpuBatches(args.batches)
    reports: dict[str, str] = {}

    def measure(arch: str, precision: str, channels_last: bool) -> float:
        torch.manual_seed(0)
        clock = SyncClock()
        callbacks = [clock]
        layout = ChannelsLast() if channels_last else None
        if layout is not None:
            callbacks.append(layout)
        trainer = pl.Trainer(
            accelerator=accelerator, devices=1, precision=precision, max_epochs=1, limit_train_batches=args.batches,
            benchmark=True, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, callbacks=callbacks,
        )
        trainer.fit(Classifier(arch), torch.utils.data.DataLoader(data, batch_size=None, shuffle=False))
        if clock.t0 is None or clock.t1 is None:
            raise RuntimeError(f"{arch} {precision}: fit ran fewer than {args.batches} batches")
        if layout is not None:
            reports[f"{arch} {precision}"] = layout.report().summary()
        return args.batch_size * (args.batches - args.skip) / (clock.t1 - clock.t0)

    def name(precision: str, cl: bool) -> str:
        return f"{precision} {'ChannelsLast' if cl else 'NCHW'}"

    print(f"GPU: {gpu_name}, torch {torch.__version__}, pytorch_lightning {pl.__version__}, "
          f"torchvision {torchvision.__version__}; ChannelsLast: {how}; "
          f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}", flush=True)
    start = time.perf_counter()
    overview, sections, findings, data_out = [], [], [], {}
    for arch in args.models:
        variants = {name(p, cl): (lambda p=p, cl=cl: measure(arch, p, cl)) for p in precisions for cl in (False, True)}
        print(f"{arch}: {len(variants)} variants, {args.rounds} round(s) after {args.warmup} warm-up", flush=True)
        comp: Comparison = interleave(variants, rounds=args.rounds, warmup=args.warmup,
                                      log=lambda s: print(s, flush=True))
        layout_rows, layout = [], {}
        for p in precisions:
            r = [c / n for c, n in zip(comp.values[name(p, True)], comp.values[name(p, False)])]
            layout[p] = {"median": statistics.median(r), "min": min(r), "max": max(r), "per_round": r}
            verdict = "faster" if min(r) > 1 else "slower" if max(r) < 1 else "mixed across rounds"
            layout_rows.append((p, f"{statistics.median(r):.2f}x", f"{min(r):.2f} - {max(r):.2f}", verdict))
            if statistics.median(r) < 1:
                findings.append(f"**{arch}, {p}: NHWC is slower than NCHW** (median {statistics.median(r):.2f}x, "
                                f"rounds {min(r):.2f} - {max(r):.2f})")
        ref = comp.median(name("32-true", False))
        best = max(comp.names, key=comp.median)
        overview.append([arch] + [f"{comp.median(v):.0f}" for v in comp.names]
                        + [f"{layout[p]['median']:.2f}x" for p in precisions]
                        + [f"{best} ({comp.median(best) / ref:.2f}x)"])
        sections.append(
            f"### {arch}\n\n{comparison_table(comp, 'images/s')}\n\n"
            + markdown_table(("channels_last / NCHW within", "median", "per-round range", "verdict"), layout_rows)
            + "\n\n" + "\n".join(f"- `ChannelsLast` ({k}): {v}" for k, v in reports.items() if k.startswith(arch + " "))
        )
        data_out[arch] = {"values": comp.values, "summary": {v: comp.summary(v) for v in comp.names},
                          "channels_last_over_nchw": layout}
    header = ["model"] + [name(p, cl) for p in precisions for cl in (False, True)]
    header += [f"CL/NCHW {p}" for p in precisions] + ["fastest (vs 32-true NCHW)"]
    body = (
        f"Training images/s through `pl.Trainer(accelerator=\"{accelerator}\", devices=1, benchmark=True)` on "
        f"{gpu_name}, batch {args.batch_size}, {args.size} px, synthetic float batches resident "
        f"on the {device.type} device, SGD with momentum, 10 classes, random init; {args.batches} batches per `fit` (first "
        f"{args.skip} not timed), {args.rounds} interleaved round(s) after {args.warmup} warm-up round(s). "
        f"`32-true` convolutions use TF32: cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}. ChannelsLast: {how}. "
        "Ratios are medians of per-round ratios; ranges are min - max over the rounds.\n\n"
        f"## Overview (median images/s)\n\n{markdown_table(header, overview)}\n\n## Where NHWC is slower\n\n"
        + ("\n".join(f"- {f}" for f in findings) if findings else "- None (median ChannelsLast/NCHW >= 1 everywhere).")
        + "\n\n## Per model\n\n" + "\n\n".join(sections)
        + f"\n\nWall time of the whole run: {time.perf_counter() - start:.0f} s.\n"
    )
    path = write_results("channels_last_gpu_dryrun" if args.dry_run_cpu else "channels_last_gpu", "ChannelsLast on GPU: Trainer images/s, precision x layout", body,
                         {"args": vars(args), "channels_last_import": how, "models": data_out,
                          "channels_last_report": reports, "nhwc_slower": findings})
    print(body)
    print(f"wrote {path}")
    out = os.environ.get("OUT")
    if out and Path(out).is_dir():
        for suffix in (".md", ".json"):
            shutil.copy(path.with_suffix(suffix), Path(out) / path.with_suffix(suffix).name)
        print(f"copied to {out}")


if __name__ == "__main__":
    main()
