"""Time to a target top-1: plain Lightning vs the efficient side, ResNet-18 on Imagenette, several seeds.

The two sides are exactly the demo's (``lightning_efficient.app.runs``), each run in its own process:

* *baseline*: plain Lightning, ``32-true``, NCHW, LR schedule stepped per epoch, torchvision
  ``RandomResizedCrop`` + ``TrivialAugmentWide`` + ``ToTensor`` per image in a DataLoader worker (``--workers``,
  default 1, both sides; tune() may change the efficient side's);
* *efficient*: ``recipe()`` as ``tune()`` chooses it on this machine (tuning time counted; an empty cache per
  benchmark, so the first efficient run measures and the later ones reuse its decision), ``StepwiseLR``,
  ``FastImageFolder`` uint8 batches, TrivialAugment per sample on the device, and ``ProgressiveResize`` with its
  defaults (half the side for the first half of the run, a ramp, full size for the last 20%, never below 64 px: so
  at the 64 px run below it keeps the size; off with ``--no-progressive-resize``).

Same schedule in epochs (1-epoch linear warmup from 0.1x, then cosine to 0), same images, same seed per pair;
the runs alternate (seed 0: baseline, efficient; seed 1: efficient, baseline; ...). Every epoch ends with top-1 on
the full validation split; the curves are top-1 against training seconds (wall clock from the start of the run,
tuning included, validation runs excluded). Validation runs every ``--val-every`` of an epoch (default half), so
that a time to target is not decided by the epoch's resolution. Reported: mean and spread of the final top-1 per
side, each run's time to reach the baseline's mean final top-1, and efficient / baseline as the ratio of the sides'
mean times (only when every run reaches the target) and of the times at which each side's mean curve (mean top-1
and mean training seconds per validation over the seeds) reaches it. Targets: <= 0.5x on any CPU, <= 0.4x on one
with native bf16, with the efficient side's mean final top-1 at least the baseline's minus 1 point.

The ablation (``--ablation-seeds``, default 2): the efficient side without one part at a time (the LR schedule,
the augmentation implementation, the throughput settings, progressive resizing), with its spread; its runs go
among the same seed's baseline and efficient runs (seed 0: baseline, efficient, each ablation; seed 1 the reverse),
so that the machine's drift over the hour falls on every kind alike, and its images/s are also given over the full
side's run of the same seed.

    python -m benchmarks.time_to_accuracy                    # defaults below; prints its settings first
    python -m benchmarks.time_to_accuracy --quick            # smoke test: tiny subset, writes *_quick.*
    python -m benchmarks.time_to_accuracy --size 64 --epochs 5 --train-images 6000   # as run: ~90 min with native bf16
    python -m benchmarks.time_to_accuracy --from-json benchmarks/results/time_to_accuracy.json
                                            # re-render .md/.png from a finished run (text added by hand is lost)

Run it once, quietly, with nothing else on the machine. Writes ``benchmarks/results/time_to_accuracy.md``,
``.json`` and ``.png`` (a quick run: outside the results folder) and appends its figures to ``history.csv``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import DATA, append_history, markdown_table, results_dir, write_results

ABLATIONS = ("lr schedule", "augmentation", "throughput", "progressive resizing")


def curves_png(runs: list[dict[str, Any]], target: float, path: Path, title: str) -> None:
    """All runs' top-1 against training seconds, one colour per side, the target as a dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours = {"baseline": "tab:blue", "efficient": "tab:orange"}
    seen = set()
    for run in runs:
        pts = run["top1_curve"]
        label = None if run["kind"] in seen else run["kind"]
        seen.add(run["kind"])
        ax.plot(
            [t for t, _ in pts],
            [100 * a for _, a in pts],
            "o-",
            ms=3,
            color=colours[run["kind"]],
            alpha=0.8,
            label=label,
        )
    ax.axhline(100 * target, color="grey", ls=":", lw=1, label="baseline's mean final top-1")
    ax.set_xlabel("training seconds (wall clock, tuning included, validation excluded)")
    ax.set_ylabel("val top-1 (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mean_curve(runs: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The side's mean curve: for each validation, the mean training seconds and the mean top-1 over its runs
    (every run of a side validates at the same points)."""
    n = min(len(r["top1_curve"]) for r in runs)
    return [
        (statistics.mean(r["top1_curve"][i][0] for r in runs), statistics.mean(r["top1_curve"][i][1] for r in runs))
        for i in range(n)
    ]


def first_time(curve: list[tuple[float, float]], target: float) -> float:
    """Training seconds of the first validation with top-1 >= ``target`` (NaN if none)."""
    return next((t for t, a in curve if a >= target), math.nan)


def render(
    runs: list[dict[str, Any]], args: dict[str, Any], total_s: float, train_n: int, val_n: int, workers: Any, name: str
) -> tuple[str, dict[str, Any]]:
    """The Markdown body (linking ``<name>.png``) and the summary figures of a finished run (also used by
    ``--from-json``)."""

    def side(kind: str) -> list[dict[str, Any]]:
        return [r for r in runs if r["kind"] == kind]

    target = statistics.mean(r["val_top1"] for r in side("baseline"))
    rows, summary = [], {}
    for kind in ("baseline", "efficient"):
        finals = [r["val_top1"] for r in side(kind)]
        times = [first_time(r["top1_curve"], target) for r in side(kind)]
        reached = [t for t in times if not math.isnan(t)]
        curve = mean_curve(side(kind))
        summary[kind] = {
            "final_top1_mean": statistics.mean(finals),
            "final_top1_sd": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "time_to_target_s": times,
            "time_to_target_mean_s": statistics.mean(reached) if len(reached) == len(times) else math.nan,
            "mean_curve": curve,
            "mean_curve_time_to_target_s": first_time(curve, target),
            "images_per_s_mean": statistics.mean(r["images_per_s"] for r in side(kind)),
            "wall_time_mean_s": statistics.mean(r["wall_time_s"] for r in side(kind)),
            "precision": side(kind)[0]["precision"],
            "tuned": [r.get("tuned", {}).get("chosen") for r in side(kind)],
        }
        s = summary[kind]
        rows.append(
            (
                kind,
                s["precision"],
                f"{100 * s['final_top1_mean']:.1f}% +- {100 * s['final_top1_sd']:.1f}",
                ", ".join("not reached" if math.isnan(t) else f"{t:.0f} s" for t in times),
                "-" if math.isnan(s["time_to_target_mean_s"]) else f"{s['time_to_target_mean_s']:.0f} s",
                "not reached"
                if math.isnan(s["mean_curve_time_to_target_s"])
                else f"{s['mean_curve_time_to_target_s']:.0f} s",
                f"{s['images_per_s_mean']:.1f}",
                f"{s['wall_time_mean_s']:.0f} s",
            )
        )
    ratio = summary["efficient"]["time_to_target_mean_s"] / summary["baseline"]["time_to_target_mean_s"]
    curve_ratio = (
        summary["efficient"]["mean_curve_time_to_target_s"] / summary["baseline"]["mean_curve_time_to_target_s"]
    )
    summary["ratio_mean_time"], summary["ratio_mean_curve"], summary["target"] = ratio, curve_ratio, target
    throughput = summary["efficient"]["images_per_s_mean"] / summary["baseline"]["images_per_s_mean"]
    ablation = []
    for part in ("", *ABLATIONS):
        kind = f"efficient without {part}" if part else "efficient"
        sel = side(kind) if part else side("efficient")
        if not sel:
            continue
        finals, curve = [r["val_top1"] for r in sel], mean_curve(sel)
        t = first_time(curve, target) / summary["baseline"]["mean_curve_time_to_target_s"]
        summary.setdefault("ablation", {})[part or "none"] = {
            "ratio_mean_curve": t,
            "final_top1_mean": statistics.mean(finals),
        }
        full = {r["seed"]: r["images_per_s"] for r in side("efficient")}
        same_seed = [r["images_per_s"] / full[r["seed"]] for r in sel if r["seed"] in full]
        speed = math.exp(statistics.fmean(map(math.log, same_seed))) if same_seed else math.nan
        summary["ablation"][part or "none"]["images_per_s_vs_full_same_seed"] = speed
        ablation.append(
            (
                part or "(the full efficient side)",
                len(sel),
                f"{100 * statistics.mean(finals):.1f}% +- "
                f"{100 * (statistics.stdev(finals) if len(finals) > 1 else 0):.1f}",
                "not reached" if math.isnan(t) else f"{t:.2f}x",
                f"{statistics.mean(r['images_per_s'] for r in sel):.1f}",
                "-" if math.isnan(speed) else f"{speed:.2f}x",
            )
        )
    body = "\n".join(
        [
            f"ResNet-18 from scratch on Imagenette ({train_n} train / {val_n} val images), {args['size']} px, "
            f"batch {args['batch_size']}, {args['epochs']} epochs, peak LR {args['lr']} (1-epoch warmup, cosine), "
            f"{args['seeds']} seeds per side, alternating; {workers} DataLoader worker{'s' * (workers != 1)} given to "
            "both sides (tune() may change the efficient side's: below). "
            f"Total {total_s:.0f} s.",
            "",
            f"Target: the baseline's mean final top-1, {100 * target:.1f}%. Efficient / baseline time to it:",
            "",
            "- mean over runs: " + ("not reached by every run" if math.isnan(ratio) else f"**{ratio:.2f}x**") + ";",
            "- on each side's mean curve (mean top-1 and mean training seconds per epoch over the seeds): "
            + ("not reached" if math.isnan(curve_ratio) else f"**{curve_ratio:.2f}x**")
            + ".",
            "",
            markdown_table(
                (
                    "side",
                    "precision",
                    "final top-1 (mean +- sd)",
                    "time to target, per seed",
                    "mean time to target",
                    "mean curve reaches it",
                    "images/s",
                    "wall time",
                ),
                rows,
            ),
            "",
            f"Training throughput, efficient / baseline: {throughput:.2f}x.",
            "Training seconds: wall clock from the start of the run (tuning included), validation runs excluded; one "
            f"validation every {args.get('val_every', '1')} of an epoch.",
            f"Efficient side's tuned settings: {summary['efficient']['tuned']}.",
            "",
            f"![curves]({name}.png)",
        ]
        + (
            [
                "",
                "Ablation: the efficient side without one part (time on the mean curve to the baseline's target, "
                "over the baseline's; images/s also over the full side's run of the same seed, next to it in time):",
                "",
                markdown_table(
                    (
                        "without",
                        "runs",
                        "final top-1 (mean +- sd)",
                        "time to target / baseline's",
                        "images/s",
                        "images/s / the full side's, same seed",
                    ),
                    ablation,
                ),
            ]
            if len(ablation) > 1
            else []
        )
    )
    return body, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA / "imagenette")
    parser.add_argument("--size", type=int, default=96, help="training/validation crop side, px (default 96)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--train-images", type=int, default=0, help="class-balanced subset, 0 = all (default)")
    parser.add_argument("--val-images", type=int, default=0, help="0 = the full validation split (default)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05, help="peak SGD LR at --batch-size (default 0.05)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="DataLoader workers, both sides (default 1: the baseline augments per image on the CPU, in a worker as "
        "plain Lightning advises; -1: suggest_loader_kwargs's choice)",
    )
    parser.add_argument("--val-every", type=float, default=0.5, help="validate every this share of an epoch")
    parser.add_argument("--no-progressive-resize", action="store_true", help="efficient side without it")
    parser.add_argument("--ablation-seeds", type=int, default=2, help="seeds per ablated part (0: no ablation)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="re-render the .md/.png of a finished run from its .json (no training; keeps its machine)",
    )
    args = parser.parse_args()
    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
        runs, view = data["runs"], data["args"]
        name = args.from_json.stem
        body, summary = render(
            runs,
            view,
            data.get("total_s", math.nan),
            data["train_images_n"],
            data["val_images_n"],
            data["workers"],
            name,
        )
        curves_png(
            [r for r in runs if r["kind"] in ("baseline", "efficient")],
            summary["target"],
            results_dir(args.quick) / f"{name}.png",
            f"ResNet-18, Imagenette, {view['size']} px, {view['epochs']} epochs",
        )
        path = write_results(
            name,
            "Time to accuracy: plain Lightning vs lightning_efficient",
            body,
            {**{k: v for k, v in data.items() if k != "machine"}, "summary": summary},
            info=data.get("machine"),
        )
        print(body)
        print(f"wrote {path}")
        return
    if args.quick:
        args.size, args.epochs, args.train_images, args.val_images, args.seeds = 32, 2, 64, 32, 1
        args.ablation_seeds = min(args.ablation_seeds, 1)

    # tune()'s decisions go to a new, empty folder: the first efficient run measures, the later ones reuse its
    # decision (as a user's repeated runs do), and no decision stored by an earlier benchmark or user is reused.
    os.environ["LIGHTNING_EFFICIENT_CACHE"] = tempfile.mkdtemp(prefix="tune-cache-")

    from torchvision.datasets import ImageFolder

    from lightning_efficient.app.config import DemoConfig, resolve_workers
    from lightning_efficient.app.data import check_data
    from lightning_efficient.app.runs import run_in_subprocess
    from lightning_efficient.data import balanced_subset

    root = check_data(args.data)
    train_samples, val_samples = ImageFolder(root / "train").samples, ImageFolder(root / "val").samples
    train_idx = balanced_subset([t for _, t in train_samples], args.train_images, 0)
    val_idx = balanced_subset([t for _, t in val_samples], args.val_images, 1)
    cfg = DemoConfig(
        data=str(root),
        epochs=args.epochs,
        train_images=args.train_images,
        val_images=args.val_images,
        image_size=args.size,
        batch_size=args.batch_size,
        workers=resolve_workers(None if args.workers < 0 else args.workers),
        lr=args.lr,
        progress=False,
        val_every=args.val_every,
        progressive_resize=not args.no_progressive_resize,
    )
    print(
        f"ResNet-18, {len(train_idx)} train / {len(val_idx)} val images, {args.size} px, {args.epochs} epochs, "
        f"{args.seeds} seeds per side, {cfg.workers} workers",
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    # The order the module docstring gives (the ablation among the seeds, odd seeds reversed).
    for seed in range(max(args.seeds, args.ablation_seeds)):
        order = [("baseline", ""), ("efficient", "")] * (seed < args.seeds)
        order += [("efficient", part) for part in ABLATIONS] * (seed < args.ablation_seeds)
        for kind, part in order[:: 1 if seed % 2 == 0 else -1]:
            cfg.seed, cfg.ablate = seed, part
            r = {k: v for k, v in run_in_subprocess(kind, cfg, train_idx, val_idx).items() if k != "report"}
            runs.append({"kind": f"efficient without {part}" if part else kind, "seed": seed, **r})
            print(
                f"  seed {seed} {runs[-1]['kind']}: final top-1 {r['val_top1']:.1%}, {r['wall_time_s']:.0f} s wall, "
                f"{r['images_per_s']:.1f} images/s; "
                f"curve {[(round(t), round(100 * a, 1)) for t, a in r['top1_curve']]}",
                flush=True,
            )
    cfg.ablate = ""
    total = time.perf_counter() - started
    view = {k: str(v) for k, v in vars(args).items()}
    name = "time_to_accuracy_quick" if args.quick else "time_to_accuracy"
    body, summary = render(runs, view, total, len(train_idx), len(val_idx), cfg.workers, name)
    curves_png(
        [r for r in runs if r["kind"] in ("baseline", "efficient")],
        summary["target"],
        results_dir(args.quick) / f"{name}.png",
        f"ResNet-18, Imagenette, {args.size} px, {args.epochs} epochs",
    )
    append_history(
        "time_to_accuracy",
        {
            "ratio on the mean curves": summary["ratio_mean_curve"],
            "final top-1 efficient - baseline": summary["efficient"]["final_top1_mean"]
            - summary["baseline"]["final_top1_mean"],
        },
        dry=args.quick,
    )
    path = write_results(
        name,
        "Time to accuracy: plain Lightning vs lightning_efficient",
        body,
        {
            "args": view,
            "summary": summary,
            "runs": runs,
            "ratio": summary["ratio_mean_time"],
            "target": summary["target"],
            "total_s": total,
            "train_images_n": len(train_idx),
            "val_images_n": len(val_idx),
            "workers": cfg.workers,
        },
        results_dir(args.quick),
    )
    print(body)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
