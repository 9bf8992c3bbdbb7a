"""ChannelsLast on CPU: training images/s through the Lightning Trainer, {32-true, bf16-mixed} x {NCHW, ChannelsLast}.

For each model (torchvision ResNet-18, ResNet-50 and the depthwise-conv MobileNetV3-Large by default; 10 classes,
random init), 4 variants are measured, interleaved in one process:

* ``32-true NCHW`` (the reference the ratios divide by), ``32-true ChannelsLast``,
* ``bf16-mixed NCHW``, ``bf16-mixed ChannelsLast``

where "ChannelsLast" means ``callbacks=[ChannelsLast()]`` (model weights converted in ``setup``, every batch
converted on the device) and nothing else changes. Batch 32, 64 and 128 px (``--size``: where the layout pays depends
on the feature maps' size), SGD with momentum, in-memory float data (a
``TensorDataset``, so no decoding or augmentation is measured). Each measurement is one ``fit`` of ``--batches``
batches; images/s counts the batches after the first ``--skip`` (warm-up: oneDNN primitive creation, allocator),
timed from ``on_train_batch_end``, so the batch layout conversion is inside the timed interval.

``--plain`` adds two plain-PyTorch variants per model (no Trainer: ``32-true`` NCHW and ``model.to(memory_format=
torch.channels_last)`` + channels_last inputs, same model, optimizer and data) to check the Trainer path against a
measurement taken without it.

    python -m benchmarks.channels_last                     # default matrix, est. 10-14 min on a quiet 2-core CPU
    python -m benchmarks.channels_last --quick             # smoke test: 1 round, 3 batches, 64 px
    python -m benchmarks.channels_last --models resnet50 --rounds 5 --batches 10 --plain

Run it on a quiet machine: with other busy processes on a 2-core CPU, oneDNN's threads are oversubscribed and
throughput collapses unevenly across variants (seen here: several times slower, ratios meaningless).

Writes ``benchmarks/results/channels_last.md`` and ``.json`` (``--quick`` writes ``channels_last_quick.*`` so a smoke
test never overwrites real numbers).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Callable

import pytorch_lightning as pl
import torch
import torchvision
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.harness import (
    Comparison,
    StepClock,
    comparison_table,
    interleave,
    markdown_table,
    random_images,
    write_results,
)
from lightning_efficient import ChannelsLast

#: name -> constructor; mobilenet_v3_large and efficientnet_b0 are the depthwise-convolution networks.
MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "resnet18": lambda: torchvision.models.resnet18(num_classes=10),
    "resnet50": lambda: torchvision.models.resnet50(num_classes=10),
    "mobilenet_v3_large": lambda: torchvision.models.mobilenet_v3_large(num_classes=10),
    "efficientnet_b0": lambda: torchvision.models.efficientnet_b0(num_classes=10),
}
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v3_large")
PRECISIONS = ("32-true", "bf16-mixed")
REFERENCE = "32-true NCHW"


def variant_name(precision: str, channels_last: bool) -> str:
    return f"{precision} {'ChannelsLast' if channels_last else 'NCHW'}"


class Classifier(pl.LightningModule):
    def __init__(self, arch: str) -> None:
        super().__init__()
        self.model = MODELS[arch]()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def measure_trainer(
    arch: str,
    precision: str,
    channels_last: bool,
    data: TensorDataset,
    batches: int,
    skip: int,
    batch_size: int,
    reports: dict[str, str],
) -> float:
    """One ``fit`` of ``batches`` batches; returns images/s. Stores ``ChannelsLast.report().summary()`` in reports."""
    torch.manual_seed(0)
    clock = StepClock()
    callbacks: list[pl.Callback] = [clock]
    layout = ChannelsLast() if channels_last else None
    if layout is not None:
        callbacks.append(layout)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_epochs=1,
        limit_train_batches=batches,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    loader = DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=0)
    trainer.fit(Classifier(arch), loader)
    if layout is not None:
        reports[f"{arch} {precision}"] = layout.report().summary()
    return clock.images_per_s(skip)


def measure_plain(
    arch: str, channels_last: bool, data: TensorDataset, batches: int, skip: int, batch_size: int
) -> float:
    """The same training steps (``32-true``) in a plain PyTorch loop, no Trainer; returns images/s."""
    torch.manual_seed(0)
    model = MODELS[arch]()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=0)
    steps = []  # (seconds, images) per training step, the layout conversion of the batch included
    for i, (x, y) in enumerate(loader):
        if i == batches:
            break
        started = time.perf_counter()
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        steps.append((time.perf_counter() - started, len(x)))
    timed = steps[skip:]
    return sum(n for _, n in timed) / sum(s for s, _ in timed)


def layout_ratios(comp: Comparison, precision: str) -> list[float]:
    """Per-round ChannelsLast / NCHW images/s within ``precision`` (both measured in the same round)."""
    nchw = comp.values[variant_name(precision, False)]
    nhwc = comp.values[variant_name(precision, True)]
    return [c / n for c, n in zip(nhwc, nchw, strict=False)]


def run_model(arch: str, args: argparse.Namespace, data: TensorDataset) -> dict:
    reports: dict[str, str] = {}
    variants: dict[str, Callable[[], float]] = {}
    for precision in PRECISIONS:
        for cl in (False, True):
            variants[variant_name(precision, cl)] = lambda p=precision, c=cl: measure_trainer(
                arch, p, c, data, args.batches, args.skip, args.batch_size, reports
            )
    if args.plain:
        for cl in (False, True):
            name = f"plain PyTorch 32-true {'channels_last' if cl else 'NCHW'}"
            variants[name] = lambda c=cl: measure_plain(arch, c, data, args.batches, args.skip, args.batch_size)
    print(f"{arch}: {len(variants)} variants, {args.rounds} round(s) after {args.warmup} warm-up round(s)")
    comp = interleave(variants, rounds=args.rounds, warmup=args.warmup, log=lambda s: print(s, flush=True))
    layout = {}
    for precision in PRECISIONS:
        r = layout_ratios(comp, precision)
        layout[precision] = {"median": statistics.median(r), "min": min(r), "max": max(r), "per_round": r}
    if args.plain:
        ref, cl = comp.values["plain PyTorch 32-true NCHW"], comp.values["plain PyTorch 32-true channels_last"]
        r = [c / n for c, n in zip(cl, ref, strict=False)]
        layout["plain PyTorch 32-true"] = {"median": statistics.median(r), "min": min(r), "max": max(r), "per_round": r}
    return {
        "comparison": comp,
        "layout": layout,
        "reports": reports,
    }


def render(results: dict[str, dict], args: argparse.Namespace) -> tuple[str, list[str]]:
    """Markdown body and the list of "NHWC slower" findings."""
    findings: list[str] = []
    overview_rows = []
    sections = []
    for arch, res in results.items():
        comp: Comparison = res["comparison"]
        ref = comp.median(REFERENCE)
        best = max(comp.names, key=comp.median)
        row = [arch] + [f"{comp.median(variant_name(p, c)):.1f}" for p in PRECISIONS for c in (False, True)]
        row += [
            f"{res['layout'][p]['median']:.2f}x ({res['layout'][p]['min']:.2f} - {res['layout'][p]['max']:.2f})"
            for p in PRECISIONS
        ]
        row += [f"{best} ({comp.median(best) / ref:.2f}x)"]
        overview_rows.append(row)
        layout_rows = []
        for key, s in res["layout"].items():
            verdict = "faster" if s["min"] > 1 else "slower" if s["max"] < 1 else "mixed across rounds"
            layout_rows.append((key, f"{s['median']:.2f}x", f"{s['min']:.2f} - {s['max']:.2f}", verdict))
            if s["median"] < 1:
                findings.append(
                    f"**{arch}, {key}: NHWC is slower than NCHW** (median {s['median']:.2f}x, rounds "
                    f"{s['min']:.2f} - {s['max']:.2f}"
                    + (", i.e. within the round-to-round spread)" if s["max"] >= 1 else ", in every round)")
                )
        sections.append(
            f"### {arch}\n\n{comparison_table(comp, 'images/s')}\n\n"
            + markdown_table(("channels_last / NCHW within", "median", "per-round range", "verdict"), layout_rows)
            + (
                "\n\n" + "\n".join(f"- `ChannelsLast` ({k}): {v}" for k, v in res["reports"].items())
                if res["reports"]
                else ""
            )
        )
    header = ["model"] + [variant_name(p, c) for p in PRECISIONS for c in (False, True)]
    header += [f"CL/NCHW {p}" for p in PRECISIONS] + ["fastest (vs 32-true NCHW)"]
    overview = markdown_table(header, overview_rows)
    findings_text = (
        "\n".join(f"- {f}" for f in findings)
        if findings
        else "- None: ChannelsLast was at least as fast as NCHW "
        "(median ratio >= 1) for every model and precision measured."
    )
    body = (
        f'Training images/s through `pl.Trainer(accelerator="cpu", devices=1)`, batch {args.batch_size}, '
        f"{' and '.join(map(str, args.size))} px, in-memory float data, SGD with momentum, 10 classes, random init; "
        f"{args.batches} batches per "
        f"`fit` (first {args.skip} not timed), {args.rounds} interleaved round(s) after {args.warmup} warm-up "
        f'round(s); torch threads: {torch.get_num_threads()}. "ChannelsLast" = `callbacks=[ChannelsLast()]` '
        "(model and batches NHWC), nothing else changed. Ratios are medians of per-round ratios (variants of one "
        "round run back to back), ranges are min - max over the rounds.\n\n"
        f"## Overview (median images/s)\n\n{overview}\n\n"
        f"## Where NHWC is slower\n\n{findings_text}\n\n"
        "## Per model\n\n" + "\n\n".join(sections) + "\n"
    )
    if args.quick:
        body = "**Smoke test (`--quick`): too few batches and rounds for the numbers to mean anything.**\n\n" + body
    return body, findings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="unmeasured fits of each variant first (default 0: the first --skip batches of every fit are the warm-up)",
    )
    parser.add_argument("--batches", type=int, default=7, help="batches per fit (default 7)")
    parser.add_argument("--skip", type=int, default=2, help="batches at the start of each fit not timed")
    parser.add_argument("--size", type=int, nargs="+", default=[64, 128], help="image sides in pixels, each measured")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--plain", action="store_true", help="also measure plain-PyTorch fp32 NCHW vs channels_last")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 round, 3 batches, 64 px, skip 1")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batches, args.size, args.skip, args.warmup = 1, 3, [64], 1, 0
    if args.rounds < 1 or args.warmup < 0 or args.batches < args.skip + 2:
        parser.error("need --rounds >= 1, --warmup >= 0 and --batches >= --skip + 2")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*bf16.*")  # Lightning's notes about bf16 on CPU
    start = time.perf_counter()
    results = {}
    for size in args.size:
        data = random_images(args.batches * args.batch_size, size)
        results.update({f"{arch}, {size} px": run_model(arch, args, data) for arch in args.models})
    body, findings = render(results, args)
    body += f"\nWall time of the whole run: {time.perf_counter() - start:.0f} s.\n"
    name = "channels_last_quick" if args.quick else "channels_last"
    path = write_results(
        name,
        "ChannelsLast on CPU: Trainer images/s, {32-true, bf16-mixed} x {NCHW, ChannelsLast}",
        body,
        {
            "args": vars(args),
            "models": {
                arch: {
                    "values": res["comparison"].values,
                    "summary": {v: res["comparison"].summary(v) for v in res["comparison"].names},
                    "channels_last_over_nchw": res["layout"],
                    "channels_last_report": res["reports"],
                }
                for arch, res in results.items()
            },
            "nhwc_slower": findings,
        },
    )
    print(body)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
