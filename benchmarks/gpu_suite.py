"""The GPU suite: every claim of the package measured on one CUDA GPU in one command (~8 min on an H200).

Parts, run in this order; each writes ``<results>/<part>.md`` and ``.json`` (with ``nvidia-smi``, CUDA, cuDNN,
torch and Lightning versions) as soon as it is done, so a timeout never loses the parts before it, and copies them
to ``$OUT`` where that is set (the device tool brings ``$OUT`` back):

a. ``cuda_tests``: ``pytest -m cuda tests`` (tests/cuda: decode -> augment -> channels_last on CUDA equals the CPU
   result, bf16-mixed/16-mixed fits with StepwiseLR and GradScaler, seeded per-sample augmentation on the device,
   pinned memory + ``non_blocking`` with ``uint8_collate``, no host-device synchronisation in our batch hooks).
b. ``trainer_resnet50``: ResNet-50, 224 px, batch 128, through ``pl.Trainer``: 32-true NCHW, 32-true +
   ChannelsLast, bf16-mixed NCHW, bf16-mixed + ChannelsLast, 16-mixed + ChannelsLast, ``recipe()`` and
   ``recipe(efficiency_report=False)`` (their ratio is the EfficiencyReport overhead): images/s over a window of
   steady-state steps (``torch.cuda.synchronize`` at its two ends only), ratios to 32-true NCHW (medians of
   per-round ratios, variants interleaved), peak ``torch.cuda.max_memory_allocated``. Data: synthetic float
   batches resident on the GPU, so the input pipeline is not measured here.
c. ``input_pipeline``: end to end on Imagenette (``--data``; by default ``../shared/data/imagenette`` or
   ``.gpu_data/imagenette``, see ``benchmarks/gpu_prepare.sh``), ResNet-50 bf16-mixed + ChannelsLast in all three:
   ImageFolder + RandomResizedCrop + TrivialAugmentWide per image in DataLoader workers, vs FastImageFolder
   ``uint8`` + GPUAugmentation, vs ``FastImageFolder(backend="nvjpeg")`` + GPUDecode + GPUAugmentation; at
   ``num_workers`` = all CPUs less one and = 4, with the machine's CPU count and EfficiencyReport's data-wait
   share (measured with CUDA events) per variant.

Usage::

    python benchmarks/gpu_suite.py                  # everything (~8 min on one H200)
    python benchmarks/gpu_suite.py --quick          # smaller sizes, ~3 min: the second try after a timeout
    python benchmarks/gpu_suite.py --only b,c       # some parts
    python benchmarks/gpu_suite.py --dry-run        # CPU, tiny sizes, same code paths (run by `make test`)

On the device machine (no network there: kornia travels as wheels, Imagenette as a subset; see
``benchmarks/README.md``)::

    bash benchmarks/gpu_prepare.sh                  # here, once: .whl/ and .gpu_data/ (git-ignored)
    # device run, carry [".whl", ".gpu_data"]:
    bash benchmarks/gpu_run.sh [--quick]

Exit status: 0 when every part ran (and, in a dry run, every CUDA test skipped cleanly), 1 otherwise. Without CUDA
and without ``--dry-run`` it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    RESULTS,
    Classifier,
    StepClock,
    comparison_table,
    interleave,
    markdown_table,
    results_dir,
    write_results,
)

PARTS = ("a", "b", "c")
PART_NAMES = {"a": "cuda_tests", "b": "trainer_resnet50", "c": "input_pipeline"}


@dataclass(frozen=True)
class Sizes:
    """How big each part runs. ``steps``: training batches per fit, the first ``skip`` not timed."""

    arch: str
    image_size: int
    batch_size: int
    steps: int
    skip: int
    rounds: int
    warmup: int
    pipeline_steps: int
    pipeline_rounds: int
    pipeline_workers: tuple[str, ...]  # "all" (CPUs less one) and/or a number

    @staticmethod
    def for_mode(quick: bool, dry_run: bool) -> "Sizes":
        if dry_run:
            return Sizes("resnet50", 32, 2, 4, 1, 1, 0, 4, 1, ("0",))
        if quick:
            return Sizes("resnet50", 224, 64, 25, 8, 1, 1, 25, 1, ("all",))
        return Sizes("resnet50", 224, 128, 40, 10, 3, 1, 40, 2, ("all", "4"))


class Suite:
    """Runs the parts and writes their results; see the module docstring."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dry_run = args.dry_run
        self.sizes = Sizes.for_mode(args.quick, args.dry_run)
        self.results = Path(args.results)
        self.cuda = torch.cuda.is_available() and not self.dry_run
        self.accelerator = "gpu" if self.cuda else "cpu"
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.failures: list[str] = []
        self.written: list[Path] = []

    # ------------------------------------------------------------------ plumbing
    def log(self, text: str) -> None:
        print(text, flush=True)

    def write(self, part: str, title: str, body: str, data: dict) -> None:
        name = PART_NAMES[part] + ("_dryrun" if self.dry_run else "")
        mode = (
            "dry run (CPU, tiny sizes: numbers meaningless)"
            if self.dry_run
            else ("quick" if self.args.quick else "full")
        )
        path = write_results(
            name,
            title,
            f"Mode: {mode}. Sizes: `{asdict(self.sizes)}`.\n\n{body}",
            {"mode": mode, "sizes": asdict(self.sizes), **data},
            results_dir=self.results,
        )
        self.written += [path, path.with_suffix(".json")]
        out = os.environ.get("OUT")
        if out and Path(out).is_dir():
            for file in (path, path.with_suffix(".json")):
                shutil.copy(file, Path(out) / file.name)
        self.log(f"wrote {path}")

    def run(self, parts: list[str]) -> int:
        functions: dict[str, Callable[[], None]] = {
            "a": self.cuda_tests,
            "b": self.trainer_resnet50,
            "c": self.input_pipeline,
        }
        for part in parts:
            start = time.perf_counter()
            self.log(f"== part {part}: {PART_NAMES[part]}")
            try:
                functions[part]()
            except Exception as err:  # noqa: BLE001 - recorded, written, and the next part still runs
                self.failures.append(f"{part}: {type(err).__name__}: {err}")
                self.write(
                    part,
                    f"GPU suite part {part} ({PART_NAMES[part]}): FAILED",
                    f"```\n{traceback.format_exc()}\n```",
                    {"failed": True, "error": repr(err)},
                )
            self.log(f"== part {part} took {time.perf_counter() - start:.0f} s")
        if self.failures:
            self.log("FAILED parts:\n  " + "\n  ".join(self.failures))
            return 1
        return 0

    def fit(
        self, module: pl.LightningModule, loader: DataLoader, precision: str, callbacks: list, steps: int, skip: int
    ) -> tuple[float, float | None]:
        """Train ``steps`` batches; returns (images/s over batches skip..steps-1, peak CUDA MiB or None)."""
        window = StepClock()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        trainer = pl.Trainer(
            accelerator=self.accelerator,
            devices=1,
            precision=precision,
            max_steps=steps,
            max_epochs=-1,
            benchmark=self.cuda,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            callbacks=[window, *callbacks],
        )
        trainer.fit(module, loader)
        peak = torch.cuda.max_memory_allocated() / 2**20 if self.cuda else None
        return window.images_per_s(skip, steps - 1), peak

    @staticmethod
    def batch_size_of(loader: DataLoader) -> int:
        if loader.batch_size is not None:
            return loader.batch_size
        return len(loader.dataset[0][1])  # batch_size=None: the dataset yields whole batches

    # ------------------------------------------------------------------ part a
    def cuda_tests(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "cuda",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "cuda"),
        ]
        self.log(" ".join(cmd))
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        output = proc.stdout + proc.stderr
        self.log(output[-3000:])
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", output)}
        body = f"`{' '.join(cmd[1:])}` exit status {proc.returncode}: {counts}\n\n```\n{output[-6000:]}\n```"
        self.write("a", "GPU suite part a: CUDA tests", body, {"returncode": proc.returncode, "counts": counts})
        if self.dry_run:
            # Without CUDA every test must be collected and skip cleanly: nothing passes, fails or errors.
            if proc.returncode != 0 or counts.get("skipped", 0) == 0 or set(counts) - {"skipped", "deselected"}:
                raise RuntimeError(f"the CUDA tests did not all skip cleanly on the CPU: {counts}")
        elif proc.returncode != 0:
            raise RuntimeError(f"pytest -m cuda failed: {counts}")

    # ------------------------------------------------------------------ part b
    def trainer_resnet50(self) -> None:
        from lightning_efficient import ChannelsLast, recipe

        s = self.sizes
        data = DeviceBatches(s.batch_size, s.image_size, self.device, num_classes=1000)
        loader = DataLoader(data, batch_size=None, shuffle=False)
        peaks: dict[str, list[float]] = {}

        def variant(name: str, precision: str, callbacks: Callable[[], list]) -> Callable[[], float]:
            def measure() -> float:
                torch.manual_seed(0)
                module = Classifier(s.arch, num_classes=1000)
                rate, peak = self.fit(module, loader, precision, callbacks(), s.steps, s.skip)
                if peak is not None:
                    peaks.setdefault(name, []).append(peak)
                return rate

            return measure

        def recipe_callbacks(report: bool) -> Callable[[], list]:
            def make() -> list:
                return [c for c in recipe(efficiency_report=report)["callbacks"]]

            return make

        recommended = recipe()["precision"]
        variants: dict[str, Callable[[], float]] = {}
        for name, precision, callbacks in (
            ("32-true NCHW", "32-true", list),
            ("32-true + ChannelsLast", "32-true", lambda: [ChannelsLast()]),
            ("bf16-mixed NCHW", "bf16-mixed", list),
            ("bf16-mixed + ChannelsLast", "bf16-mixed", lambda: [ChannelsLast()]),
            ("16-mixed + ChannelsLast", "16-mixed", lambda: [ChannelsLast()]),
            ("recipe()", recommended, recipe_callbacks(True)),
            ("recipe(efficiency_report=False)", recommended, recipe_callbacks(False)),
        ):
            variants[name] = variant(name, precision, callbacks)
        self.log(f"{len(variants)} variants, {s.rounds} round(s) after {s.warmup} warm-up")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*16-mixed.*is not supported by the CPU.*")
            comp = interleave(variants, rounds=s.rounds, warmup=s.warmup, log=self.log)
        report_ratio = [
            a / b for a, b in zip(comp.values["recipe()"], comp.values["recipe(efficiency_report=False)"], strict=False)
        ]
        overhead = 1 - sorted(report_ratio)[len(report_ratio) // 2]
        peak_rows = [(n, f"{max(v):.0f}") for n, v in peaks.items()]
        body = (
            f"`{s.arch}`, {s.image_size} px, batch {s.batch_size}, 1000 classes, SGD momentum 0.9; "
            f"{s.steps} optimizer steps per fit, images/s over steps {s.skip}..{s.steps - 1} "
            f"(synchronised at both ends of the window only); synthetic float batches resident on the "
            f"{self.device.type} device; `Trainer(benchmark=True)` on CUDA; cudnn.allow_tf32="
            f"{torch.backends.cudnn.allow_tf32} (32-true convolutions use TF32 where True). "
            f"`recipe()` = precision {recommended!r} + ChannelsLast + StepwiseLR + EfficiencyReport.\n\n"
            f"{comparison_table(comp, 'images/s')}\n\n"
            f"EfficiencyReport overhead (1 - recipe() / recipe(efficiency_report=False), median of rounds): "
            f"{100 * overhead:.2f}%\n\n"
            + (
                markdown_table(("variant", "peak max_memory_allocated MiB"), peak_rows)
                if peak_rows
                else "Peak CUDA memory: n/a (no CUDA)"
            )
        )
        self.log(body)
        self.write(
            "b",
            f"GPU suite part b: {s.arch} through the Trainer, precision x layout",
            body,
            {
                "values": comp.values,
                "summary": {n: comp.summary(n) for n in comp.names},
                "peak_memory_mib": peaks,
                "report_overhead": overhead,
                "recipe_precision": recommended,
            },
        )

    # ------------------------------------------------------------------ part c
    def input_pipeline(self) -> None:
        from torchvision import transforms as T

        from lightning_efficient import (
            IMAGENET_MEAN,
            IMAGENET_STD,
            ChannelsLast,
            EfficiencyReport,
            FastImageFolder,
            GPUAugmentation,
            GPUDecode,
            recommended_precision,
            uint8_collate,
        )
        from lightning_efficient.data import available_cpus
        from lightning_efficient.functional.timing import CudaEventClock, HostEvent

        s = self.sizes
        root, made = self.imagenette()
        precision = recommended_precision("cuda" if self.cuda else "cpu")
        cpus = available_cpus()
        train = root / "train"
        reports: dict[str, list[dict]] = {}

        def loader(dataset: Dataset, workers: int, collate=None) -> DataLoader:
            return DataLoader(
                dataset,
                batch_size=s.batch_size,
                shuffle=True,
                drop_last=True,
                num_workers=workers,
                pin_memory=self.cuda,
                persistent_workers=workers > 0,
                collate_fn=collate,
            )

        def cpu_aug(workers: int) -> DataLoader:
            tf = T.Compose(
                [
                    T.RandomResizedCrop(s.image_size),
                    T.RandomHorizontalFlip(),
                    T.TrivialAugmentWide(),
                    T.ToTensor(),
                    T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                ]
            )
            return loader(torchvision.datasets.ImageFolder(str(train), transform=tf), workers)

        def gpu_aug() -> GPUAugmentation:
            return GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD)

        def variant(name: str, make_loader: Callable[[], DataLoader], callbacks: Callable[[], list]):
            def measure() -> float:
                torch.manual_seed(0)
                # A dry run takes the report's CUDA-event code path with host-time events (no CUDA here).
                clock = CudaEventClock(HostEvent) if self.dry_run else "auto"
                report = EfficiencyReport(verbose=False, log_every_n_steps=0, skip_first=s.skip, clock=clock)
                rate, _ = self.fit(
                    Classifier(s.arch, num_classes=10),
                    make_loader(),
                    precision,
                    [*callbacks(), ChannelsLast(), report],
                    s.pipeline_steps,
                    s.skip,
                )
                summary = report.summary()
                reports.setdefault(name, []).append(
                    {k: summary.get(k) for k in ("images_per_s", "data_wait_share", "transform_share", "verdict")}
                )
                return rate

            return measure

        sections, data = [], {}
        for setting in s.pipeline_workers:
            workers = max(0, cpus - 1) if setting == "all" else min(int(setting), max(0, cpus - 1))
            if setting != "all" and str(workers) != setting:
                continue  # fewer CPUs than that setting: the "all" row already covers it
            specs = (
                (f"ImageFolder + TrivialAugmentWide in {workers} workers", lambda w=workers: cpu_aug(w), list),
                (
                    f"FastImageFolder uint8 + GPUAugmentation, {workers} workers",
                    lambda w=workers: loader(FastImageFolder(train, s.image_size), w, uint8_collate),
                    lambda: [gpu_aug()],
                ),
                (
                    f"FastImageFolder(backend='nvjpeg') + GPUDecode + GPUAugmentation, {workers} workers",
                    lambda w=workers: loader(FastImageFolder(train, s.image_size, backend="nvjpeg"), w, uint8_collate),
                    lambda: [GPUDecode(), gpu_aug()],
                ),
            )
            variants = {name: variant(name, make, cbs) for name, make, cbs in specs}
            self.log(f"num_workers={workers}: {len(variants)} variants, {s.pipeline_rounds} round(s)")
            comp = interleave(variants, rounds=s.pipeline_rounds, warmup=0, log=self.log)
            rows = [(n, f"{reports[n][-1]['data_wait_share']:.2f}", reports[n][-1]["verdict"]) for n in comp.names]
            sections.append(
                f"### num_workers={workers} (machine: {cpus} CPUs)\n\n{comparison_table(comp, 'images/s')}"
                f"\n\n" + markdown_table(("variant", "data-wait share (EfficiencyReport, last round)", "verdict"), rows)
            )
            data[str(workers)] = {"values": comp.values, "summary": {n: comp.summary(n) for n in comp.names}}
        body = (
            f"Data: `{root if not made else 'tiny generated JPEGs + 1 PNG'}`, train split; {s.arch} (10 classes), "
            f"precision {precision!r}, ChannelsLast, batch {s.batch_size}, {s.image_size} px, {s.pipeline_steps} "
            f"steps per fit, images/s over steps {s.skip}..{s.pipeline_steps - 1}; pin_memory={self.cuda}. "
            f"Machine: {cpus} CPUs.\n\n" + "\n\n".join(sections)
        )
        self.log(body)
        self.write(
            "c",
            "GPU suite part c: the input pipeline end to end",
            body,
            {"cpus": cpus, "workers": data, "efficiency_reports": reports, "precision": precision},
        )

    def imagenette(self) -> tuple[Path, bool]:
        """The Imagenette root to read: ``--data``, else (except in a dry run) the shared copy or the carried
        subset; a dry run without ``--data`` uses a tiny generated class-folder set with one PNG (so the nvJPEG
        path's Pillow fallback runs too)."""
        candidates = [self.args.data]
        if not self.dry_run:
            candidates += [ROOT.parent / "shared" / "data" / "imagenette", ROOT / ".gpu_data" / "imagenette"]
        for candidate in filter(None, candidates):
            if (Path(candidate) / "train").is_dir():
                return Path(candidate), False
        if not self.dry_run:
            raise FileNotFoundError(
                "no Imagenette found: pass --data, or run benchmarks/gpu_prepare.sh and carry .gpu_data"
            )
        if self.args.data:
            raise FileNotFoundError(f"--data {self.args.data}: no train/ folder there")
        return make_tiny_jpeg_folder(Path(tempfile.mkdtemp(prefix="gpu_suite_"))), True


class DeviceBatches(Dataset):
    """Endless ``(x [B, 3, S, S] float32 NCHW, y [B] int64)`` batches, 4 distinct ones made once on ``device``."""

    def __init__(self, batch_size: int, size: int, device: torch.device, num_classes: int) -> None:
        g = torch.Generator(device=device).manual_seed(0)
        self.batches = [
            (
                torch.randn(batch_size, 3, size, size, device=device, generator=g),
                torch.randint(0, num_classes, (batch_size,), device=device, generator=g),
            )
            for _ in range(4)
        ]

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int):
        return self.batches[i % len(self.batches)]


def make_tiny_jpeg_folder(root: Path, per_class: int = 12, size: int = 48) -> Path:
    """``root/train/<class>/<i>.jpg``: 2 classes of small random JPEGs (plus one PNG, which the nvJPEG path decodes
    on the CPU); returns ``root``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        folder = root / "train" / c
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (size, size + 8 * (i % 3), 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(root / "train" / "a" / "x.png")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (~3 min on an H200)")
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts to run, e.g. b,c")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU at tiny sizes: checks the code paths")
    parser.add_argument(
        "--results",
        default=None,
        help="folder for the .md/.json results (default results/gpu; a dry run: outside the tracked results folder)",
    )
    parser.add_argument("--data", default=None, help="Imagenette root (with train/) for part c")
    args = parser.parse_args(argv)
    args.results = args.results or str(results_dir(True) / "gpu" if args.dry_run else RESULTS / "gpu")
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--only: unknown part(s) {unknown}; choose from {list(PARTS)}")
    if not torch.cuda.is_available() and not args.dry_run:
        print("CUDA is not available: the GPU suite needs a CUDA GPU (use --dry-run to check it on the CPU).")
        return 2
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*Tensor Cores.*")
    if torch.cuda.is_available() and not args.dry_run:
        print(
            f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}, pytorch_lightning {pl.__version__}",
            flush=True,
        )
    from lightning_efficient.quiet import quiet_lightning

    start = time.perf_counter()
    with quiet_lightning():  # Lightning's tips and known-harmless warnings, not once per fit
        status = Suite(args).run(parts)
    print(f"GPU suite: {'OK' if status == 0 else 'FAILED'} in {time.perf_counter() - start:.0f} s", flush=True)
    print(json.dumps({"status": status}))
    return status


if __name__ == "__main__":
    sys.exit(main())
