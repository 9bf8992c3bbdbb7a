"""Time to the same top-1 with the tools a practitioner would pick: plain Lightning, ours, timm, fastai, Composer.

Every side trains torchvision's ResNet-18 from scratch on the same class-balanced Imagenette subset (the JPEGs,
decoded by each tool's own loader), 128 px training crops (RandomResizedCrop + flip + TrivialAugment or the tool's
nearest), the same SGD (momentum 0.9, no Nesterov), peak LR, L2 weight decay (not on biases and norms), batch size,
epochs and schedule shape (linear warmup from 0.1x, then cosine to 0, per optimizer step where the tool can), each
in its own process and, where its pins differ from ours, its own virtual environment (``benchmarks/peers/envs.sh``):

* ``lightning``: plain Lightning (``lightning_sides.py``; its scheduler stepped per epoch, as the module declares);
* ``ours``: ``recipe()`` + ``tune()`` + ``FastImageFolder`` + ``GPUAugmentation`` + ``ProgressiveResize``
  (``lightning_sides.py``), and ``ours without progressive resizing``, the ablation;
* ``timm``: the loop of timm's ``train.py`` from timm's parts (``timm_side.py``: what differs is listed there);
* ``fastai``: a ``Learner`` with ``fit_one_cycle``, ``ChannelsLast``, batch augmentation and ``to_bf16()`` as
  documented (``fastai_side.py``), and ``fastai + cpu autocast`` (its one fix; only on a CPU with native bf16);
* ``composer``: Composer's ``Trainer`` with ChannelsLast + ProgressiveResizing, fp32 (``composer_side.py``).

Measured per run: top-1 on the whole validation split (each image resized to 128 px; one evaluator shared by every
side) every half epoch, against training seconds (wall clock from the process start: imports, tuning and
compilation included; validation excluded), and images/s. The runs alternate (seed order reversed on every other
seed), so the machine's drift falls on every side alike. The common target is the lowest mean final top-1 among the
peers (timm, fastai as documented, Composer), so that every side can reach it.

    bash benchmarks/peers/envs.sh                      # once: .venv-peers (timm, fastai), .venv-composer
    python -m benchmarks.peers                         # the benchmark (its settings are printed first)
    python -m benchmarks.peers --resume                # after an interruption: finished runs are kept
    python -m benchmarks.peers --quick                 # every side end to end on a few images (no figures)
    python -m benchmarks.peers --keep timm,fastai --keep-from benchmarks/results/peers.json   # rerun the others
    python -m benchmarks.peers --from-json benchmarks/results/peers.json   # re-render a finished run

Writes ``benchmarks/results/peers.md``, ``.json`` and ``.png`` (a quick run: the system's temporary folder) and
appends its ratios to ``history.csv``. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.peers.report import render, write_plot
from benchmarks.peers.spec import Spec

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Side:
    """One side: its process and environment.

    Attributes:
        name: as the results name it.
        module: the module run with ``python -m``.
        env: the virtual environment (a folder of the repository's root) whose Python runs it.
        peer: a peer tool (sets the common target, can be the fastest peer).
        options: passed in ``Spec.options``.
        native_bf16_only: run only on a CPU with native bf16 (skipped elsewhere, with the reason).
    """

    name: str
    module: str
    env: str
    peer: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    native_bf16_only: bool = False

    @property
    def python(self) -> Path:
        return ROOT / self.env / "bin" / "python"

    @property
    def slug(self) -> str:
        return self.name.replace(" + ", "-").replace(" ", "-")


SIDES = (
    Side("lightning", "benchmarks.peers.lightning_sides", ".venv"),
    Side("ours", "benchmarks.peers.lightning_sides", ".venv"),
    Side("timm", "benchmarks.peers.timm_side", ".venv-peers", peer=True),
    Side("fastai", "benchmarks.peers.fastai_side", ".venv-peers", peer=True),
    Side("composer", "benchmarks.peers.composer_side", ".venv-composer", peer=True),
    Side("ours without progressive resizing", "benchmarks.peers.lightning_sides", ".venv"),
    Side(
        "fastai + cpu autocast",
        "benchmarks.peers.fastai_side",
        ".venv-peers",
        options={"autocast": True},
        native_bf16_only=True,
    ),
)


#: Sides that set no figure of the headline (neither the target, the fastest peer, ours nor the ablation).
OPTIONAL = ("lightning", "fastai + cpu autocast")


def side_names(text: str) -> list[str]:
    """The side names of a comma-separated option (``--sides``, ``--skip``, ``--keep``), blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def native_bf16() -> bool:
    from lightning_efficient.precision import cpu_has_native_bf16

    return cpu_has_native_bf16()


def skip_reason(side: Side) -> str | None:
    """Why ``side`` cannot run here (None: it can)."""
    if not side.python.exists() or side.env != ".venv" and not (ROOT / side.env / ".installed").exists():
        return f"its environment {side.env} is not built (bash benchmarks/peers/envs.sh)"
    if side.native_bf16_only and not native_bf16():
        return "this CPU has no native bf16 (AVX512-BF16/AMX): bf16 autocast is emulated, far slower than fp32"
    return None


def prepare_data(
    data: Path, size: int, train_images: int, work: Path, val_images: int | None = None
) -> tuple[Path, Path]:
    """The training subset's list and the validation split decoded at ``size`` px (cached in ``work``); with
    ``val_images``, a class-balanced subset of that many validation images (``--quick``)."""
    import numpy as np
    from PIL import Image
    from torchvision.datasets import ImageFolder

    from lightning_efficient.data import balanced_subset

    work.mkdir(parents=True, exist_ok=True)
    train = ImageFolder(data / "train")
    indices = balanced_subset(train.targets, train_images, 0)
    train_list = work / f"train-{len(indices)}.json"
    train_list.write_text(
        json.dumps(
            {
                "classes": train.classes,
                "indices": indices,
                "samples": [[train.samples[i][0], train.samples[i][1]] for i in indices],
            }
        )
    )
    val_file = work / f"val-{size}px{'' if val_images is None else f'-{val_images}'}.npz"
    if not val_file.exists():
        val = ImageFolder(data / "val")
        keep = range(len(val.samples)) if val_images is None else balanced_subset(val.targets, val_images, 0)
        samples = [val.samples[i] for i in keep]
        print(f"decoding the validation split ({len(samples)} images) at {size} px ...", flush=True)
        images = np.empty((len(samples), size, size, 3), np.uint8)
        for i, (path, _) in enumerate(samples):
            with Image.open(path) as img:
                images[i] = np.asarray(img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
        np.savez(val_file, images=images, labels=np.asarray([label for _, label in samples], np.int64))
    return train_list, val_file


def run_side(side: Side, spec: Spec, work: Path, cache: str) -> dict[str, Any]:
    """Run one side in its own process; returns its result (also kept in ``work/runs``)."""
    runs = work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    stem = runs / f"{side.slug}-seed{spec.seed}"
    spec.out = str(stem.with_suffix(".json"))
    spec.launch = time.time()
    spec.to_json(stem.with_suffix(".spec.json"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LIGHTNING_EFFICIENT_CACHE": cache, "PYTHONUNBUFFERED": "1"}
    cmd = [str(side.python), "-m", side.module, "--spec", str(stem.with_suffix(".spec.json"))]
    with open(stem.with_suffix(".log"), "w") as log:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "".join(stem.with_suffix(".log").read_text().splitlines(keepends=True)[-25:])
        raise RuntimeError(f"{side.name} (seed {spec.seed}) failed with exit status {proc.returncode}:\n{tail}")
    return json.loads(Path(spec.out).read_text())


def same_settings(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keep = lambda s: {k: v for k, v in s.items() if k not in ("launch", "out")}  # noqa: E731
    return keep(a) == keep(b)


def env_versions() -> dict[str, str]:
    out = {}
    for env in sorted({s.env for s in SIDES}):
        path = ROOT / env / "versions.txt"
        if path.exists():
            out[env] = path.read_text().strip()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "imagenette",
        help="an ImageFolder root with train/ and val/ (default: the reference Imagenette beside the repository; "
        "--quick without it trains on scikit-learn's digits)",
    )
    parser.add_argument("--train-images", type=int, default=2000, help="class-balanced training subset")
    parser.add_argument("--size", type=int, default=128, help="training crop and validation side, px")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05, help="peak LR at --batch-size")
    parser.add_argument("--warmup-epochs", type=int, default=1, help="linear warmup, whole epochs")
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers of every side but ours")
    parser.add_argument("--val-every", type=float, default=0.5, help="validate every this share of an epoch")
    parser.add_argument("--seeds", default="2,3", help="comma-separated seeds (default 2,3; 0-1 chose the settings)")
    parser.add_argument(
        "--sides", default="", help="comma-separated side names (default: all; a subset writes to the temporary folder)"
    )
    parser.add_argument(
        "--ours",
        default="",
        help="options of both ours sides as JSON: ProgressiveResize's and tune()'s keyword arguments, e.g. "
        '\'{"progressive_resize": {"start_scale": 0.5}, "tune": {"num_workers": false}}\'',
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated sides left out to save time, among those that set no figure of the headline "
        f"({', '.join(OPTIONAL)}); the report lists them as not run",
    )
    parser.add_argument("--work", type=Path, default=ROOT / ".peers-work", help="data lists, runs, logs")
    parser.add_argument("--resume", action="store_true", help="keep finished runs with the same settings")
    parser.add_argument(
        "--keep-from",
        type=Path,
        default=None,
        help="a finished results JSON (e.g. benchmarks/results/peers.json): the runs of the --keep sides are taken "
        "from it (same settings and seeds required), not run again; the report names where they came from",
    )
    parser.add_argument("--keep", default="", help="comma-separated sides whose runs --keep-from gives")
    parser.add_argument("--quick", action="store_true", help="every side end to end on a few images; no figures")
    parser.add_argument("--from-json", type=Path, default=None, help="re-render .md/.png from a finished run")
    args = parser.parse_args()

    from benchmarks.harness import append_history, results_dir, write_results

    partial = bool(args.sides.strip())  # a subset of the sides is a try, not the benchmark: written outside results/
    name = "peers_quick" if args.quick else "peers_partial" if partial else "peers"
    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
        body, summary = render(data["runs"], data["settings"], data["skipped"], data["versions"], args.from_json.stem)
        write_plot(data["runs"], summary, results_dir(False) / f"{args.from_json.stem}.png")
        write_results(
            args.from_json.stem,
            TITLE,
            body,
            {
                k: v
                for k, v in {**data, "summary": json_safe(summary), "ratios": json_safe(summary["ratios"])}.items()
                if k != "machine"
            },
            info=data.get("machine"),
        )
        print(body)
        return
    data = args.data
    if args.quick:
        args.size, args.epochs, args.train_images, args.batch_size, args.warmup_epochs = 32, 2, 32, 8, 1
        args.seeds = args.seeds if "--seeds" in sys.argv else "0"
        args.work = Path(tempfile.mkdtemp(prefix="peers-quick-"))
        if not (data / "train").is_dir():  # no reference data here: scikit-learn's digits as an ImageFolder
            from lightning_efficient.data.samples import digits_imagefolder

            data = digits_imagefolder(args.work / "digits", size=args.size)
    if not (data / "train").is_dir() or not (data / "val").is_dir():
        sys.exit(f"{data}: expected an ImageFolder root with train/ and val/ (Imagenette); pass --data.")
    wanted = side_names(args.sides)
    unknown = set(wanted) - {s.name for s in SIDES}
    if unknown:
        sys.exit(f"--sides: unknown {sorted(unknown)}; choose among {[s.name for s in SIDES]}.")
    sides = [s for s in SIDES if not wanted or s.name in wanted]
    left_out = side_names(args.skip)
    if set(left_out) - set(OPTIONAL):
        sys.exit(f"--skip: {sorted(set(left_out) - set(OPTIONAL))} cannot be left out; choose among {list(OPTIONAL)}.")
    skipped = {s.name: "left out with --skip" for s in sides if s.name in left_out}
    skipped |= {s.name: reason for s in sides if s.name not in skipped and (reason := skip_reason(s))}
    sides = [s for s in sides if s.name not in skipped]
    seeds = [int(s) for s in args.seeds.split(",")]
    train_list, val_file = prepare_data(
        data, args.size, args.train_images, args.work, val_images=100 if args.quick else None
    )
    ours = json.loads(args.ours) if args.ours else {}
    settings = {
        "data": str(data),
        "quick": args.quick,
        "train_images": len(json.loads(train_list.read_text())["indices"]),
        "val_images": int(__import__("numpy").load(val_file)["labels"].shape[0]),
        **{k: getattr(args, k) for k in ("size", "epochs", "batch_size", "lr", "warmup_epochs", "weight_decay")},
        **{k: getattr(args, k) for k in ("workers", "val_every")},
        "seeds": seeds,
        "ours": ours,
    }
    kept = kept_runs(args.keep_from, side_names(args.keep), settings)
    print(f"peers benchmark: {json.dumps(settings)}", flush=True)
    for side, reason in skipped.items():
        print(f"  skipped {side}: {reason}", flush=True)
    # ours measures once per benchmark, then reuses its decision, as a user does (--resume: the interrupted run's)
    cache = args.work / "tune-cache"
    if not args.resume:
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    for i, seed in enumerate(seeds):
        for side in sides if i % 2 == 0 else sides[::-1]:
            options = {**side.options, **(ours if side.name.startswith("ours") else {})}
            spec = Spec(
                side=side.name,
                seed=seed,
                data=str(data),
                train_list=str(train_list),
                val_file=str(val_file),
                out="",
                size=args.size,
                epochs=args.epochs,
                batch_size=args.batch_size,
                lr=args.lr,
                warmup_epochs=args.warmup_epochs,
                weight_decay=args.weight_decay,
                workers=args.workers,
                val_every=args.val_every,
                options=options,
            )
            if (side.name, seed) in kept:
                runs.append(kept[side.name, seed])
                print(f"  {side.name} seed {seed}: kept from {args.keep_from}", flush=True)
                continue
            done = args.work / "runs" / f"{side.slug}-seed{seed}.json"
            old_spec = done.with_suffix(".spec.json")
            if args.resume and done.exists() and old_spec.exists():
                if same_settings(json.loads(old_spec.read_text()), asdict(spec)):
                    runs.append(json.loads(done.read_text()))
                    print(f"  {side.name} seed {seed}: kept from {done}", flush=True)
                    continue
            print(f"  {side.name} seed {seed} ...", flush=True)
            result = run_side(side, spec, args.work, str(cache))
            runs.append(result)
            print(
                f"  {side.name} seed {seed}: final top-1 {100 * result['final_top1']:.1f}%, "
                f"{result['train_s']:.0f} training s, {result['images_per_s']:.1f} images/s",
                flush=True,
            )
    total = time.perf_counter() - started
    versions = env_versions()
    body, summary = render(runs, settings, skipped, versions, name)
    write_plot(runs, summary, results_dir(args.quick or partial) / f"{name}.png")
    if not (args.quick or partial):
        append_history("peers", {k: v for k, v in summary["ratios"].items() if v == v}, dry=False)
    path = write_results(
        name,
        TITLE,
        body,
        {
            "settings": settings,
            "summary": json_safe(summary),
            "ratios": json_safe(summary["ratios"]),
            "runs": runs,
            "skipped": skipped,
            "versions": versions,
            "total_s": total,
        },
        results_dir(args.quick or partial),
    )
    print(body)
    print(f"wrote {path}")


#: Settings a kept run must share with this benchmark (the seeds are matched run by run; ``ours`` concerns ours).
SHARED_SETTINGS = (
    "data", "train_images", "val_images", "size", "epochs", "batch_size", "lr", "warmup_epochs", "weight_decay",
    "workers", "val_every",
)  # fmt: skip


def kept_runs(path: Path | None, sides: list[str], settings: dict[str, Any]) -> dict[tuple[str, int], Any]:
    """The runs of ``sides`` in the finished results file ``path``, by ``(side, seed)``, each marked with where it
    came from (``kept_from``: the file's date and commit). Exits with a message where the file's settings differ
    from ``settings``, it ran on another CPU (model, cores or native bf16), a side is unknown, or a seed of
    ``settings`` has no run there."""
    if not sides:
        return {}
    if path is None:
        sys.exit("--keep needs --keep-from (the finished results JSON whose runs are kept).")
    unknown = set(sides) - {s.name for s in SIDES}
    if unknown:
        sys.exit(f"--keep: unknown {sorted(unknown)}; choose among {[s.name for s in SIDES]}.")
    data = json.loads(path.read_text())
    differ = {
        k: (data["settings"].get(k), settings[k]) for k in SHARED_SETTINGS if data["settings"].get(k) != settings[k]
    }
    if differ:
        sys.exit(f"--keep-from {path}: other settings than this run's (kept, now): {differ}; run every side instead.")
    machine = data.get("machine", {})
    from benchmarks.harness import machine as this_machine

    here = this_machine()
    other = {k: (machine.get(k), here[k]) for k in ("cpu", "cpu bf16") if machine.get(k) != here[k]}
    if other:
        sys.exit(f"--keep-from {path}: ran on another CPU (kept, here): {other}; run every side instead.")
    origin = f"{machine.get('date', '?')}, commit {machine.get('commit', '?')}, {machine.get('cpu', '?')}"
    found = {(r["side"], r["seed"]): {**r, "kept_from": origin} for r in data["runs"] if r["side"] in sides}
    missing = [(side, seed) for side in sides for seed in settings["seeds"] if (side, seed) not in found]
    if missing:
        sys.exit(f"--keep-from {path}: no run for {missing}; run those sides instead.")
    return {k: v for k, v in found.items() if k[1] in settings["seeds"]}


def json_safe(value: Any) -> Any:
    """``value`` with every NaN as ``None``: ``NaN`` is not JSON, and a ratio never reached has no value."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


TITLE = "Time to accuracy beside timm, fastai and Composer"

if __name__ == "__main__":
    main()
