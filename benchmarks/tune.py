"""``tune()`` against an exhaustive measurement of every candidate, per model, on this machine.

For each model:

1. ``tune()`` with its defaults, as a user would call it (its wall-clock cost is the "tuning cost");
2. ``tune(compile=True, planned_steps=--planned-steps)``, which also measures ``torch.compile``, its compile time
   amortised over a planned run of 3,000 optimizer steps (about 10 epochs of Imagenette at batch 32) by default;
3. the exhaustive measurement, in two forms:

   - **interleaved** (the verdicts): every configuration without compilation in one fit, window by window
     (``Trials.interleave``: ``--interleaved-rounds`` rounds of one ``--window``-step window per configuration,
     A B C D, D C B A, ...; each switch to another layout or loader followed by untimed steps), so that every
     window of one configuration ran next to a window of each other one. Separate short fits of the same settings
     differ by 10-15% on this VM (the first fit in a process often more), which is more than the 5% the targets
     resolve; windows of one round share the machine's state. A configuration's images/s is the geometric mean of
     its windows, so the ratio of two is the geometric mean of their per-round ratios (``paired_gain``, with
     one-sided 95% bounds);
   - **separate fits** (a cross-check, as before): each configuration in its own fit (``--window`` steps x
     ``--repeats`` windows after ``--warmup`` steps, the same windows as ``tune()``'s), in ``--rounds`` rounds
     (A B C D, then D C B A), the compiled ones once each (each fit recompiles: ~1 min on a 2-core CPU);
4. the verdicts of issue #13: the tuned configuration's images/s over the faster of plain ``32-true`` (NCHW) and
   ``recipe()``'s settings (``recommended_precision()`` + channels_last), target >= 0.97x, and over the best
   configuration found, target >= 0.95x; from the interleaved measurement, with the separate fits' ratios beside
   them. Compiled configurations (``tune(compile=True)``, not with ``--no-compile``) are judged on separate fits.

Models (batch 32, SGD with momentum): torchvision ResNet-18, ResNet-50 and MobileNetV3-Large at 128 px on
in-memory random images (the input pipeline costs nothing), and the demo's model: ResNet-18 at 112 px on
scikit-learn's digits written as 112 px PNGs, read by ``FastImageFolder`` (uint8) in DataLoader workers and
augmented on the device (``GPUAugmentation("trivial_augment")``), so ``num_workers`` is a candidate too.

``bf16-mixed`` is measured only with ``--bf16`` (1 warm-up + 1 timed step per configuration): on a CPU without
AVX512-BF16/AMX it is emulated and a single ResNet-18 step takes ~30 s.

    python -m benchmarks.tune --no-compile     # est. 25 min on a quiet 2-core CPU
    python -m benchmarks.tune --quick          # smoke test: tiny sizes, writes tune_quick.*
    python -m benchmarks.tune --models resnet18 --bf16
    python -m benchmarks.tune --models resnet18 --name tune_compile   # another results file

Writes ``benchmarks/results/tune.md`` and ``.json``. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from benchmarks.harness import Classifier, markdown_table, random_images, write_results

MODELS = {
    "resnet18": ("resnet18", 128, "synthetic"),
    "resnet50": ("resnet50", 128, "synthetic"),
    "mobilenet_v3_large": ("mobilenet_v3_large", 128, "synthetic"),
    "demo (digits)": ("resnet18", 112, "digits"),
}


def setup(key: str, batch: int, quick: bool, tmp: Path) -> tuple[Any, DataLoader, list[Any]]:
    """(model, training loader, callbacks) for one row of :data:`MODELS`."""
    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD, FastImageFolder, GPUAugmentation, uint8_collate
    from lightning_efficient.data import digits_imagefolder

    arch, size, data = MODELS[key]
    if quick:
        size = 32
    model = Classifier(arch, num_classes=10, lr=0.01, cosine_epochs=None)
    if data == "synthetic":
        return model, DataLoader(random_images(batch * 4, size), batch_size=batch, shuffle=True), []
    root = digits_imagefolder(tmp / f"digits{size}", size=size)
    dataset = FastImageFolder(root / "train", size=size, train=True)
    loader = DataLoader(
        dataset,
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        num_workers=1,
        persistent_workers=True,
        collate_fn=uint8_collate,
    )
    return model, loader, [GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD)]


def exhaustive(trials: Any, candidates: list[Any], rounds: int, log: Any) -> dict[Any, dict[str, Any]]:
    """Every candidate's windows (images/s) pooled over rounds; compiled candidates once."""
    plain = [c for c in candidates if not c.compile]
    compiled = [c for c in candidates if c.compile]
    pooled: dict[Any, dict[str, Any]] = {
        c: {"windows": [], "compile_s": [], "peak_mb": math.nan, "error": None} for c in candidates
    }
    for i in range(rounds):
        order = plain if i % 2 == 0 else list(reversed(plain))
        for c in order + (compiled if i == 0 else []):
            m = trials(c, "exhaustive")
            entry = pooled[c]
            if m.ok:
                entry["windows"] += list(m.window_images_per_s)
                entry["peak_mb"] = m.peak_memory_mb
                if c.compile:
                    entry["compile_s"].append(m.compile_s)
            else:
                entry["error"] = m.error
            log(f"    {c.label():45s} {m.images_per_s:8.2f} images/s" + (f"  ({m.error})" if m.error else ""))
    return pooled


def interleaved(trials: Any, candidates: list[Any], rounds: int, log: Any) -> dict[Any, Any]:
    """Every candidate without compilation measured in one fit, window by window (``Trials.interleave``);
    ``{candidate: Measurement}``, empty where they cannot be interleaved."""
    plain = [c for c in candidates if not c.compile]
    found = trials.interleave(plain, ["exhaustive, interleaved"] * len(plain), rounds=rounds)
    if found is None:
        log("    (cannot be interleaved in one fit)")
        return {}
    for m in found:
        log(
            f"    {m.candidate.label():45s} {geomean(m.window_images_per_s):8.2f} images/s (interleaved)"
            + (f"  ({m.error or m.skipped})" if not m.ok else "")
        )
    return {m.candidate: m for m in found}


def geomean(values: Any) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return statistics.geometric_mean(values) if values else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of separate fits (the cross-check)")
    parser.add_argument(
        "--interleaved-rounds",
        type=int,
        default=6,
        help="rounds of the interleaved measurement (one window per configuration each)",
    )
    parser.add_argument(
        "--planned-steps",
        type=int,
        default=3000,
        help="optimizer steps of the run tune(compile=True) amortises compilation over",
    )
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the exhaustive set")
    parser.add_argument("--bf16", action="store_true", help="also measure bf16-mixed (slow where emulated)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--name", default=None, help="results file name under benchmarks/results/ (default: tune, or tune_quick)"
    )
    args = parser.parse_args()
    if args.quick:
        args.batch_size, args.warmup, args.window, args.repeats, args.rounds = 4, 1, 1, 2, 1
        args.interleaved_rounds = 2

    from lightning_efficient import recommended_precision, tune
    from lightning_efficient.functional.tuning import Candidate, paired_gain
    from lightning_efficient.quiet import quiet_lightning
    from lightning_efficient.data.loader import available_cpus
    from lightning_efficient.tuner import Trials

    log = lambda text: print(text, flush=True)  # noqa: E731
    recipe_precision = recommended_precision("cpu")
    rows, data = [], {"args": vars(args), "models": {}}
    with tempfile.TemporaryDirectory() as tmp, quiet_lightning():
        # A fresh inductor cache: the first compilation of each model is as cold as a user's first one.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")
        for key in args.models:
            log(f"== {key}")
            model, loader, callbacks = setup(key, args.batch_size, args.quick, Path(tmp))
            kw = dict(accelerator="cpu", devices=1, callbacks=callbacks, max_epochs=10)
            tune_kw = dict(warmup_steps=1, window_steps=1, repeats=2) if args.quick else {}
            start = time.perf_counter()
            result = tune(model, loader, verbose=False, **tune_kw, **kw)
            cost = time.perf_counter() - start
            log(f"  tune(): {result.chosen.label()} in {cost:.0f} s")
            with_compile = None
            if not args.no_compile:  # what tune(compile=True) finds, and what measuring compilation costs
                start = time.perf_counter()
                with_compile = tune(
                    model, loader, verbose=False, compile=True, planned_steps=args.planned_steps, **tune_kw, **kw
                )
                compile_cost = time.perf_counter() - start
                log(f"  tune(compile=True): {with_compile.chosen.label()} in {compile_cost:.0f} s")
            trials = Trials(
                model, loader, warmup_steps=args.warmup, window_steps=args.window, repeats=args.repeats, **kw
            )
            cpus = available_cpus()  # the same worker counts tune() tries by default, and the loader's own
            workers = sorted({trials.current.num_workers, 0, cpus // 4, cpus // 2, max(cpus - 1, 0)})
            compiles = [False] if args.no_compile else [False, True]
            candidates = [
                Candidate("32-true", cl, comp, w) for cl, comp, w in itertools.product([False, True], compiles, workers)
            ]
            pooled = exhaustive(trials, candidates, args.rounds, log)
            if args.bf16:
                brief = Trials(model, loader, warmup_steps=1, window_steps=1, repeats=1, **kw)
                for cl in (False, True):
                    c = Candidate("bf16-mixed", cl, False, workers[-1])
                    m = brief(c, "exhaustive")
                    pooled[c] = {
                        "windows": list(m.window_images_per_s),
                        "compile_s": [],
                        "peak_mb": m.peak_memory_mb,
                        "error": m.error,
                    }
                    log(f"    {c.label():45s} {m.images_per_s:8.2f} images/s")
            inter = interleaved(trials, candidates, args.interleaved_rounds, log)
            trials.restore()

            def rate(c: Any) -> float:  # separate fits: the median window
                w = pooled.get(c, {}).get("windows")
                return statistics.median(w) if w else math.nan

            def irate(c: Any) -> float:  # interleaved: the geometric mean of the windows
                m = inter.get(c)
                return geomean(m.window_images_per_s) if m is not None and m.ok else math.nan

            current_w = trials.current.num_workers
            plain = Candidate("32-true", False, False, current_w)
            recipe_c = Candidate(recipe_precision, True, False, current_w)

            def verdict(chosen: Any, rate_of: Any) -> dict[str, Any]:
                """The targets' ratios for ``chosen`` under one way of measuring (NaN where it was not)."""
                tuned = chosen if chosen.num_workers is not None else replace(chosen, num_workers=current_w)
                ok = {c: rate_of(c) for c in candidates + list(pooled) if math.isfinite(rate_of(c))}
                if not ok or tuned not in ok:
                    return {"tuned": tuned, "rate": math.nan, "vs_floor": math.nan, "best": None, "vs_best": math.nan}
                best = max(ok, key=ok.get)
                floor = max(ok.get(plain, math.nan), ok.get(recipe_c, ok.get(plain, math.nan)))
                out = {
                    "tuned": tuned,
                    "rate": ok[tuned],
                    "vs_floor": ok[tuned] / floor,
                    "best": best,
                    "vs_best": ok[tuned] / ok[best],
                }
                if rate_of is irate and best != tuned:
                    g = paired_gain(inter[tuned], inter[best])
                    out["vs_best_bounds"] = (g.lower, g.upper)
                return out

            def row(label: str, chosen: Any, cost_s: float) -> tuple[str, ...]:
                v, s = verdict(chosen, irate), verdict(chosen, rate)
                if chosen.compile or not math.isfinite(v["rate"]):  # judged on separate fits
                    v = s
                return (
                    label,
                    chosen.label(),
                    f"{cost_s:.0f} s",
                    f"{v['rate']:.1f}",
                    f"{v['vs_floor']:.2f}x",
                    v["best"].label() if v["best"] else "-",
                    f"{v['vs_best']:.2f}x",
                    f"{s['vs_floor']:.2f}x / {s['vs_best']:.2f}x",
                )

            rows.append(row(key, result.chosen, cost))
            if with_compile is not None:
                rows.append(row(f"{key}, `compile=True`", with_compile.chosen, compile_cost))
            main_v, sep_v = verdict(result.chosen, irate), verdict(result.chosen, rate)
            data["models"][key] = {
                "tune_cost_s": cost,
                "tuned": result.chosen.label(),
                "tune_table": result.rows(),
                "tune_measurements": result.to_dict()["measurements"],
                "tune_reasons": result.reasons,
                "exhaustive": [
                    {
                        "settings": c.label(),
                        "images_per_s": rate(c),
                        "windows": v["windows"],
                        "spread": (max(v["windows"]) - min(v["windows"])) / rate(c) if v["windows"] else None,
                        "compile_s": statistics.median(v["compile_s"]) if v["compile_s"] else None,
                        "peak_memory_mb": v["peak_mb"],
                        "error": v["error"],
                    }
                    for c, v in pooled.items()
                ],
                "interleaved": [
                    {
                        "settings": c.label(),
                        "images_per_s": irate(c),
                        "windows": list(m.window_images_per_s),
                        "vs_plain": paired_gain(m, inter[plain]).gain if plain in inter and m.ok else None,
                        "vs_plain_bounds": (paired_gain(m, inter[plain]).lower, paired_gain(m, inter[plain]).upper)
                        if plain in inter and m.ok and c != plain
                        else None,
                        "data_wait": m.data_wait,
                        "peak_memory_mb": m.peak_memory_mb,
                        "error": m.error or m.skipped,
                    }
                    for c, m in inter.items()
                ],
                "tuned_vs_faster_of_plain_and_recipe": main_v["vs_floor"],
                "tuned_vs_best": main_v["vs_best"],
                "tuned_vs_best_bounds": main_v.get("vs_best_bounds"),
                "best": main_v["best"].label() if main_v["best"] else None,
                "separate_fits": {
                    "tuned_vs_faster_of_plain_and_recipe": sep_v["vs_floor"],
                    "tuned_vs_best": sep_v["vs_best"],
                    "best": sep_v["best"].label() if sep_v["best"] else None,
                },
                "tune_compile": None
                if with_compile is None
                else {
                    "cost_s": compile_cost,
                    "chosen": with_compile.chosen.label(),
                    "table": with_compile.rows(),
                    "reasons": with_compile.reasons,
                },
            }
            log(
                f"  interleaved: tuned {irate(main_v['tuned']):.1f} images/s; plain {irate(plain):.1f}; recipe "
                f"{irate(recipe_c):.1f}; best {main_v['best'].label() if main_v['best'] else '-'}; separate fits: "
                f"tuned {rate(sep_v['tuned']):.1f}, plain {rate(plain):.1f}, recipe {rate(recipe_c):.1f}"
            )

    body = [
        "`tune()` (defaults) vs an exhaustive measurement of every candidate, batch "
        f"{args.batch_size}: **interleaved** in one fit ({args.interleaved_rounds} rounds of one {args.window}-step "
        "window per configuration, A B C D then D C B A ..., untimed steps after each switch; images/s = geometric "
        "mean of the windows; the verdicts), and in **separate fits** as a cross-check "
        f"({args.warmup} warm-up steps, then {args.repeats} windows of {args.window} steps, {args.rounds} "
        "round(s); images/s = median window; compiled candidates are judged on these).",
        "Targets (issue #13): tuned >= 0.97x the faster of plain `32-true` and `recipe()`; within 5% of the best.",
        "Models: torchvision ResNet-18, ResNet-50 and MobileNetV3-Large at 128 px on in-memory random images "
        "(10 classes); the demo's model, ResNet-18 at 112 px on scikit-learn's digits as PNGs (`FastImageFolder`, "
        "1 DataLoader worker, TrivialAugment on the device)" + (" (--quick: 32 px)." if args.quick else "."),
        "",
        markdown_table(
            (
                "model",
                "tune() chose",
                "tuning cost",
                "tuned images/s (interleaved)",
                "vs faster of plain / recipe()",
                "best (interleaved)",
                "tuned vs best",
                "separate fits: vs faster / vs best",
            ),
            rows,
        ),
    ]
    for key, m in data["models"].items():
        bounds = m["tuned_vs_best_bounds"]
        body += [
            "",
            f"## {key}: every candidate",
            "",
            "Interleaved in one fit:",
            "",
            markdown_table(
                ("settings", "images/s", "vs plain (one-sided 95% bounds)", "data wait", "peak MiB", "error"),
                [
                    (
                        e["settings"],
                        f"{e['images_per_s']:.1f}",
                        "-"
                        if e["vs_plain"] is None
                        else f"{e['vs_plain']:.3f}x"
                        + (
                            f" ({e['vs_plain_bounds'][0]:.3f}-{e['vs_plain_bounds'][1]:.3f})"
                            if e["vs_plain_bounds"]
                            else ""
                        ),
                        f"{e['data_wait']:.1%}" if math.isfinite(e["data_wait"]) else "-",
                        f"{e['peak_memory_mb']:.0f}",
                        e["error"] or "",
                    )
                    for e in m["interleaved"]
                ],
            ),
            "",
            f"Tuned vs best: {m['tuned_vs_best']:.3f}x"
            + (f" (one-sided 95% bounds {bounds[0]:.3f}-{bounds[1]:.3f})" if bounds else "")
            + ".",
            "",
            "Separate fits:",
            "",
            markdown_table(
                ("settings", "images/s", "spread", "compile s", "peak MiB", "error"),
                [
                    (
                        e["settings"],
                        f"{e['images_per_s']:.1f}",
                        "-" if e["spread"] is None else f"{e['spread']:.0%}",
                        "-" if e["compile_s"] is None else f"{e['compile_s']:.0f}",
                        f"{e['peak_memory_mb']:.0f}",
                        e["error"] or "",
                    )
                    for e in m["exhaustive"]
                ],
            ),
            "",
            "tune() decisions:",
            "",
        ] + [f"- {r}" for r in m["tune_reasons"]]
        if m["tune_compile"]:
            body += ["", "tune(compile=True) decisions:", ""] + [f"- {r}" for r in m["tune_compile"]["reasons"]]
    name = args.name or ("tune_quick" if args.quick else "tune")
    path = write_results(name, "tune(): measured choice vs exhaustive measurement", "\n".join(body), data)
    print("\n".join(body))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
