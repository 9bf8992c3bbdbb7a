"""``tune()`` against an independent referee, per model, on this machine.

For each model, with a 90-epoch plan of 100 batches per epoch (9,000 training batches):

1. ``tune()`` with its defaults, as a user calls it (``cache=False``: it measures); its wall-clock seconds are the
   tuning cost, checked against its budget for that plan (5% of 9,000 x the referee's step time of the current
   settings, at most 60 s);
2. the **referee**: plain, separate ``Trainer`` fits of every configuration tune() could choose (precision x
   channels_last x ``num_workers``; precisions this CPU emulates left out), alternating A B C D, D C B A, ...,
   one untimed round to warm caches and the allocator, then ``--rounds`` rounds; each fit ``--warmup`` untimed steps
   then ``--steps`` timed ones (images/s from the package's step timeline); a configuration's images/s is the median
   over rounds (robust to a round disturbed by the machine). It shares no code with tune()'s measurement (no probe,
   no in-place switching). 20 timed steps, because a fit's start-up leaks into its first steps unevenly: on an Intel
   Xeon with AMX (native bf16), the demo's model with bf16-mixed and channels_last, 3 rounds of all 8 configurations,
   0 against 1 worker measured 1.066x with 5 timed steps and 1.038x with 20 (tune()'s pairs inside one fit: 1.02-1.04x);
   a 90-epoch run sees the steady state;
3. the verdicts: the tuned configuration's images/s (referee) over the faster of plain ``32-true`` NCHW and
   ``recipe()``'s settings (target >= 0.97x), and over the referee's best (target: within 5% by the point
   estimate, or not distinguishable within the referee's spread: the one-sided 95% bound of the per-round
   ratios tuned / best reaches 1); the table also shows the best's images/s over the rounds, lowest to highest.

Also ResNet-18 with no planned length (budget: 60 s). Models (batch 32, SGD with momentum): torchvision ResNet-18,
ResNet-50 and MobileNetV3-Large at 128 px on in-memory random images, and the demo's model (ResNet-18 at 112 px on
scikit-learn's digits as PNGs, ``FastImageFolder`` uint8 batches in 1 worker, TrivialAugment on the device).

    python -m benchmarks.tune            # about 50 min on a quiet 2-core CPU with native bf16
    python -m benchmarks.tune --quick    # a smoke test: tiny sizes; writes outside the results folder

Writes ``benchmarks/results/tune.md`` and ``.json``, and appends its figures to ``benchmarks/results/history.csv``.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from benchmarks.harness import Classifier, StepClock, append_history, markdown_table, results_dir, write_results

MODELS = {
    "resnet18": ("resnet18", 128),
    "resnet50": ("resnet50", 128),
    "mobilenet_v3_large": ("mobilenet_v3_large", 128),
    "demo model (digits)": ("resnet18", 112),
}
EPOCHS, BATCHES = 90, 100  # the planned run


def setup(key: str, batch: int, quick: bool, tmp: Path) -> tuple[Any, DataLoader, list[Any], dict[str, Any]]:
    """(model, training loader, callbacks, the plan's Trainer arguments) for one row of :data:`MODELS`."""
    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD, FastImageFolder, GPUAugmentation, uint8_collate
    from lightning_efficient.data import digits_imagefolder
    from lightning_efficient.data.samples import repeated_batch

    arch, size = MODELS[key]
    size = 32 if quick else size
    model = Classifier(arch, num_classes=10, lr=0.01, cosine_epochs=None)
    if not key.startswith("demo"):
        return model, DataLoader(repeated_batch(batch, size, 10, BATCHES), batch_size=batch), [], {"max_epochs": EPOCHS}
    dataset = FastImageFolder(digits_imagefolder(tmp / f"digits{size}", size=size) / "train", size=size, train=True)
    loader = DataLoader(
        dataset,
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        num_workers=1,
        persistent_workers=True,
        collate_fn=uint8_collate,
    )
    augment = GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD)
    return model, loader, [augment], {"planned_steps": EPOCHS * BATCHES}


def referee_fit(model: Any, loader: DataLoader, callbacks: list[Any], config: Any, warmup: int, steps: int) -> float:
    """Images/s of one plain fit of ``config`` (a tune() Candidate): ``warmup`` untimed steps, ``steps`` timed."""
    from lightning_efficient import ChannelsLast
    from lightning_efficient.data.loader import with_num_workers

    clock = StepClock()
    extra = [ChannelsLast()] if config.channels_last else []
    if config.num_workers != loader.num_workers:
        loader = with_num_workers(loader, config.num_workers)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        precision=config.precision,
        max_steps=warmup + steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[*copy.deepcopy(callbacks), *extra, clock],
    )
    trainer.fit(copy.deepcopy(model), loader)
    return clock.images_per_s(warmup)


def referee(model: Any, loader: DataLoader, callbacks: list[Any], configs: list[Any], args: Any) -> dict[Any, list]:
    """Every configuration's images/s per round, in the order A B C D, D C B A, ..., after one untimed round."""
    rates: dict[Any, list[float]] = {c: [] for c in configs}
    for r in range(-1, args.rounds):
        for c in configs if r % 2 == 0 else reversed(configs):
            rate = referee_fit(model, loader, callbacks, c, args.warmup, args.steps)
            print(f"    round {r + 1}: {c.label():40s} {rate:8.2f} images/s{' (warm-up)' * (r < 0)}", flush=True)
            if r >= 0:
                rates[c].append(rate)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.batch_size, args.rounds, args.warmup, args.steps = 4, 2, 1, 2

    from lightning_efficient import recommended_precision, tune
    from lightning_efficient.quiet import no_lightning_info, quiet_lightning
    from lightning_efficient.tuning.policy import bounds
    from lightning_efficient.tuning.records import Candidate

    rows, data = [], {"args": vars(args), "models": {}}
    with tempfile.TemporaryDirectory() as tmp, quiet_lightning(), no_lightning_info():
        for key in args.models:
            print(f"== {key}", flush=True)
            model, loader, callbacks, plan = setup(key, args.batch_size, args.quick, Path(tmp))
            kw = dict(accelerator="cpu", devices=1, callbacks=callbacks, cache=False, verbose=False)
            start = time.perf_counter()
            result = tune(model, loader, **kw, **plan)
            cost = time.perf_counter() - start
            print(result, flush=True)
            precisions = [p for p in ("32-true", "bf16-mixed") if p == "32-true" or recommended_precision("cpu") == p]
            workers = sorted({0, 1, loader.num_workers})
            configs = [
                Candidate(p, cl, num_workers=w) for p, cl, w in itertools.product(precisions, (False, True), workers)
            ]
            rates = referee(model, loader, callbacks, configs, args)
            gm = {c: statistics.median(v) for c, v in rates.items()}
            plain = Candidate("32-true", False, num_workers=loader.num_workers)
            recipe_c = Candidate(recommended_precision("cpu"), True, num_workers=loader.num_workers)
            chosen_w = loader.num_workers if result.num_workers is None else result.num_workers  # 0 is a choice
            tuned = Candidate(result.precision, result.channels_last, num_workers=chosen_w)
            best = max(gm, key=gm.get)
            vs_floor, vs_best = gm[tuned] / max(gm[plain], gm[recipe_c]), gm[tuned] / gm[best]
            _, lo, hi = bounds([a / b for a, b in zip(rates[tuned], rates[best], strict=True)], looks=1)
            close = "point estimate" if vs_best >= 0.95 else "within the spread" if hi >= 1 else "no"
            span = "tuned is the best" if tuned == best else f"{lo:.2f}-{hi:.2f}x"
            step_s = args.batch_size / gm[plain]  # the referee's step time of the current settings
            budget_s = min(60.0, 0.05 * EPOCHS * BATCHES * step_s)
            spread = {c.label(): [min(v) / gm[c], max(v) / gm[c]] for c, v in rates.items()}
            rows.append(
                (
                    key,
                    result.chosen.label(),
                    f"{cost:.0f} s / {budget_s:.0f} s",
                    f"{gm[tuned]:.1f}",
                    f"{vs_floor:.2f}x",
                    best.label(),
                    f"{min(rates[best]):.1f}-{max(rates[best]):.1f}",
                    f"{vs_best:.2f}x ({span})",
                    close,
                )
            )
            data["models"][key] = {
                "tune": result.to_dict(),
                "tuning_s": cost,
                "budget_s": budget_s,
                "referee_step_s": step_s,
                "referee": {c.label(): v for c, v in rates.items()},
                "referee_median": {c.label(): v for c, v in gm.items()},
                "referee_spread": spread,
                "tuned": tuned.label(),
                "best": best.label(),
                "vs_faster_of_plain_and_recipe": vs_floor,
                "vs_best": vs_best,
                "vs_best_bounds": [lo, hi],
                "close_to_best": close,
            }
            append_history(
                "tune",
                {
                    f"{key}: vs faster of plain/recipe()": vs_floor,
                    f"{key}: vs best": vs_best,
                    f"{key}: tuning s": cost,
                    f"{key}: budget s": budget_s,
                },
                dry=args.quick,
            )
        if "resnet18" in args.models:  # no planned length: the budget is max_seconds (60 s)
            model, loader, callbacks, _ = setup("resnet18", args.batch_size, args.quick, Path(tmp))
            start = time.perf_counter()
            tune(model, loader, accelerator="cpu", devices=1, cache=False, verbose=False)
            data["resnet18_no_plan_s"] = time.perf_counter() - start
            append_history("tune", {"resnet18 no plan: tuning s": data["resnet18_no_plan_s"]}, dry=args.quick)
    header = (
        "model",
        "tune() chose",
        "tuning / budget",
        "tuned images/s (referee)",
        "vs faster of plain / recipe()",
        "referee's best",
        "best's images/s over the rounds",
        "tuned vs best (95% bounds)",
        "within 5% of best",
    )
    body = (
        f"Plan: {EPOCHS} epochs x {BATCHES} batches of {args.batch_size}. Referee: separate plain fits, "
        f"{args.rounds} rounds alternating A B C D / D C B A, {args.warmup} warm-up + {args.steps} timed steps each; "
        f"one untimed round first; images/s = median over rounds.\n\n"
        + markdown_table(header, rows)
        + (
            f"\n\nResNet-18 at 128 px with no planned length: tune() took {data['resnet18_no_plan_s']:.0f} s "
            "(budget 60 s)."
            if "resnet18_no_plan_s" in data
            else ""
        )
    )
    write_results("tune", "tune() against an independent referee", body, data, results_dir(args.quick))


if __name__ == "__main__":
    main()
