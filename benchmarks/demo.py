"""``make demo``, run as a user runs it: 3 runs per data source, each with an empty tune() cache, the
order of the sides alternated, then one more run that reuses the last run's stored decision.

Data sources: scikit-learn's digits (offline, what ``make demo`` uses without ``../shared``) and Imagenette from
``../shared/data`` where it lies beside the repository. Each run is ``lightning-efficient demo`` in a fresh
process (its defaults: ResNet-18, 112 px, 1,600 training images, 4 epochs) with ``LIGHTNING_EFFICIENT_CACHE``
pointed at a new folder; the efficient side's wall time includes tune(). Targets: the efficient side's wall time and
its time to the baseline's final top-1 at most 0.7x the baseline's on a CPU with native bf16, at most 1.0x on one
without, in every run.

    python -m benchmarks.demo               # 44 min with native bf16 on 2 cores (8 runs; rewrites demo.md after each)
    python -m benchmarks.demo --quick       # a smoke test (tiny sizes); writes outside the results folder

Writes ``benchmarks/results/demo.md``, ``demo.json`` and ``demo.png`` (the curves of the first digits run), and
appends its figures to ``benchmarks/results/history.csv``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import DATA, append_history, markdown_table, results_dir, write_results

QUICK = ["--train-images", "40", "--val-images", "20", "--image-size", "32", "--batch-size", "8", "--epochs", "1"]


def run(data: str | None, cache: Path, efficient_first: bool, out: Path, plot: Path | None, quick: bool) -> dict:
    """One ``lightning-efficient demo`` in a fresh process; returns its JSON payload."""
    cmd = [sys.executable, "-m", "lightning_efficient", "demo", "--no-progress", "--no-reports", "--out", str(out)]
    cmd += (["--data", data] if data else []) + (["--efficient-first"] if efficient_first else [])
    cmd += (["--plot", str(plot)] if plot else []) + (QUICK if quick else [])
    env = dict(os.environ, LIGHTNING_EFFICIENT_CACHE=str(cache))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    print(proc.stdout[-2500:], flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sources = {"digits": None} | ({"imagenette": str(DATA / "imagenette")} if (DATA / "imagenette").is_dir() else {})
    rows, data = [], {"runs": {}}
    out_dir = results_dir(args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in sources.items():
            for i in range(args.runs + 1):  # the last one reuses the decision of the one before
                reuse = i == args.runs
                cache = Path(tmp) / f"cache-{name}-{i - reuse}"
                plot = out_dir / "demo.png" if name == "digits" and i == 0 else None
                first = i % 2 == 1
                print(
                    f"== {name}, run {i + 1}{' (reusing)' if reuse else ''}, {'efficient' if first else 'baseline'} "
                    "first",
                    flush=True,
                )
                payload = run(source, cache, first, Path(tmp) / "demo.json", plot, args.quick)
                r, eff = payload["ratios"], payload["results"]["efficient"]
                tuned = eff.get("tuned") or {}
                budget_s = tuned.get("budget_s", float("nan"))
                label = "reuse" if reuse else str(i + 1)
                rows.append(
                    (
                        name,
                        label,
                        "efficient" if first else "baseline",
                        f"{r['images_per_s']:.2f}x",
                        f"{r['wall_time_s']:.2f}x",
                        f"{r.get('time_to_target_s', float('nan')):.2f}x",
                        f"{eff['tuning_s']:.1f} s (budget {budget_s:.0f} s) of {eff['wall_time_s']:.0f} s",
                        ", ".join(tuned.get("measured", [])) or "-",
                        ", ".join(tuned.get("by_rule", [])) or "-",
                        "reused" if tuned.get("reused_from") else "new",
                    )
                )
                data["runs"][f"{name} {label}"] = payload
                append_history(
                    "demo",
                    {
                        f"{name} run {label}: wall time ratio": r["wall_time_s"],
                        f"{name} run {label}: time to target ratio": r.get("time_to_target_s", float("nan")),
                        f"{name} run {label}: tuning s": eff["tuning_s"],
                    },
                    dry=args.quick,
                )
                write(rows, data, out_dir, len(sources) * (args.runs + 1))


def write(rows: list, data: dict, out_dir: Path, planned: int) -> None:
    """The results file, rewritten after every run (a stopped benchmark still leaves the runs it finished)."""
    header = (
        "data",
        "run",
        "first side",
        "throughput eff/base",
        "wall time eff/base",
        "time to base top-1 eff/base",
        "tuning (in the efficient wall time)",
        "measured",
        "by recipe() (over budget)",
        "stored decision",
    )
    body = (
        "`lightning-efficient demo` with its defaults, one process per run, an empty tune() cache per run "
        "(the last row of each data source reuses the run before it).\n\n"
        + markdown_table(header, rows)
        + "\n\n![top-1 against training seconds, first digits run](demo.png)\n"
    )
    done = f"\n\n{len(rows)} of {planned} runs finished." if len(rows) < planned else ""
    write_results("demo", "make demo, run by run", body + done, data, out_dir)


if __name__ == "__main__":
    main()
