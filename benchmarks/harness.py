"""A vs B, interleaved in one process: warm-up, then A B A B ..., medians and per-pair ratios.

Interleaving spreads slow drifts of the machine (thermal state, other load, caches) over both variants, and the
ratio of each adjacent pair cancels what the pair shares. Results go to ``benchmarks/results/<name>.md`` (and a
``.json`` beside it) together with the machine they ran on.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Subset, TensorDataset

RESULTS = Path(__file__).resolve().parent / "results"
#: The reference data beside the repository (``../shared/data``).
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@dataclass
class Comparison:
    """Measurements of variants in the same units (higher is better, e.g. images/s), in run order.

    Attributes:
        names: variant names; ``names[0]`` is the reference (A) that ratios divide by.
        values: ``values[name]`` = list of measurements, one per round.
    """

    names: list[str]
    values: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.values[name])

    def ratios(self, name: str) -> list[float]:
        """Per-round ratios ``name / reference`` (each pair measured back to back)."""
        ref = self.values[self.names[0]]
        return [v / r for v, r in zip(self.values[name], ref, strict=False)]

    def summary(self, name: str) -> dict[str, float]:
        r = self.ratios(name)
        return {
            "median": self.median(name),
            "min": min(self.values[name]),
            "max": max(self.values[name]),
            "ratio_median": statistics.median(r),
            "ratio_min": min(r),
            "ratio_max": max(r),
            "rounds": len(r),
        }


def interleave(
    variants: dict[str, Callable[[], float]], rounds: int = 5, warmup: int = 1, log: Callable[[str], None] = print
) -> Comparison:
    """Run each variant ``warmup`` times (discarded), then ``rounds`` rounds of A B C ... A B C ...

    Args:
        variants: name -> callable returning one measurement (higher is better, e.g. images/s). The first is
            the reference for ratios.
        rounds: measured rounds (>= 1); the order within a round alternates (A B, then B A) to cancel order
            effects.
        warmup: unmeasured runs of each variant before the first round.

    Raises:
        ValueError: no variants, or ``rounds < 1``.
    """
    if not variants or rounds < 1:
        raise ValueError("interleave() needs at least one variant and rounds >= 1")
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    comp = Comparison(names, {n: [] for n in names})
    for i in range(rounds):
        order = names if i % 2 == 0 else list(reversed(names))
        for name in order:
            value = variants[name]()
            comp.values[name].append(value)
            log(f"  round {i + 1}/{rounds} {name}: {value:.2f}")
    return comp


class StepClock(pl.Callback):
    """Per training step: seconds, data-wait seconds and samples, in the package's one measurement record
    (:class:`~lightning_efficient.functional.measurement.Measurement`) fed by its step timeline (the one
    EfficiencyReport and tune() use: data wait around the fetch in host time; the step by host time on the CPU,
    CUDA events on a GPU, read at the end of fit, so nothing synchronizes while training runs)."""

    def __init__(self) -> None:
        from lightning_efficient.functional.measurement import Measurement

        self.measurement = Measurement()

    @property
    def rows(self) -> list[tuple[float, float, int]]:
        """Per step: ``(seconds, data-wait seconds, images)``."""
        return list(self.measurement.rows())

    def on_fit_start(self, trainer, pl_module) -> None:
        from lightning_efficient.fetch_timing import watch_fetch
        from lightning_efficient.functional.measurement import Measurement
        from lightning_efficient.functional.timing import CudaEventClock, HostClock, StepTimeline

        self.measurement = Measurement()
        clock = CudaEventClock() if pl_module.device.type == "cuda" else HostClock()
        self.timeline = StepTimeline(clock, self.measurement)
        self._unwatch = watch_fetch(trainer, self.timeline)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.timeline.restart()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.timeline.batch_started()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        from pytorch_lightning.utilities.data import extract_batch_size

        self.timeline.batch_ended(extract_batch_size(batch))

    def on_fit_end(self, trainer, pl_module) -> None:
        self.timeline.drain(block=True)
        self._unwatch()

    def images_per_s(self, skip: int = 1, last: int | None = None) -> float:
        """Images/s over steps ``skip .. last`` (0-based, inclusive; default: to the end).

        Raises:
            RuntimeError: the fit ran fewer steps.
        """
        rows = self.rows[skip : None if last is None else last + 1]
        if not rows or (last is not None and len(self.rows) <= last):
            raise RuntimeError(f"the fit ran {len(self.rows)} training steps; steps {skip}..{last} were to be timed")
        return sum(r[2] for r in rows) / sum(r[0] for r in rows)


# ------------------------------------------------------------------ data loading (decoding benchmarks)
def dataset_roots(data: Path) -> dict[str, Path]:
    """Name -> ImageFolder root. hymenoptera: the whole folder (train + val; "train"/"val" act as the two classes,
    which is irrelevant for throughput and keeps all ~400 photos in one list). imagenette: the val split."""
    return {"hymenoptera": data / "hymenoptera", "imagenette": data / "imagenette" / "val"}


def pick_indices(n_total: int, n: int, seed: int) -> list[int]:
    """A fixed, seeded selection of ``min(n, n_total)`` indices in random order (the same for every variant)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_total, generator=g)[: min(n, n_total)].tolist()


def pil_description() -> str:
    """``"Pillow 13.0.0 (libjpeg-turbo 3.1.2)"``: the PIL flavour and the JPEG library it decodes with (stock Pillow
    wheels bundle their own libjpeg-turbo; a Pillow-SIMD built from source links the system one)."""
    from PIL import features

    from lightning_efficient import pil_flavour

    try:
        jpeg = (
            f"libjpeg-turbo {features.version_feature('libjpeg_turbo')}"
            if features.check_feature("libjpeg_turbo")
            else f"libjpeg {features.version_codec('jpg')}"
        )
    except Exception:  # noqa: BLE001  (old Pillow without these queries)
        jpeg = "JPEG library unknown"
    return f"{pil_flavour()} ({jpeg})"


def make_loader(
    dataset, indices: list[int], collate_fn, workers: int, batch_size: int, seed: int, pin_memory: bool = False
) -> DataLoader:
    """A DataLoader over ``Subset(dataset, indices)`` in that order; persistent workers when ``workers > 0``."""
    kw = {"persistent_workers": True} if workers > 0 else {}
    return DataLoader(
        Subset(dataset, indices),
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        collate_fn=collate_fn,
        pin_memory=pin_memory,
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )


def one_pass(loader: DataLoader, seed: int, device: torch.device | None = None) -> float:
    """Images/s of one full pass over ``loader``; with ``device``, each batch is also copied there (non-blocking)
    and the pass ends with a CUDA synchronize, so the host-to-device transfer is counted."""
    torch.manual_seed(seed)
    n = 0
    start = time.perf_counter()
    for images, _ in loader:
        if device is not None:
            images = images.to(device, non_blocking=True)
        n += images.shape[0]
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return n / (time.perf_counter() - start)


class Classifier(pl.LightningModule):
    """A torchvision model (random init) trained with cross-entropy, SGD (momentum 0.9) and, unless
    ``cosine_epochs`` is None, ``CosineAnnealingLR(T_max=cosine_epochs)`` stepped per epoch."""

    def __init__(
        self, arch: str = "resnet18", num_classes: int = 10, lr: float = 0.1, cosine_epochs: int | None = 10
    ) -> None:
        super().__init__()
        import torchvision

        self.model = getattr(torchvision.models, arch)(num_classes=num_classes)
        self.lr, self.cosine_epochs = lr, cosine_epochs

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        if self.cosine_epochs is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, self.cosine_epochs)}


def random_images(n: int, size: int, num_classes: int = 10, seed: int = 0) -> TensorDataset:
    """In-memory data: ``n`` float32 images ``[3, size, size]`` (standard normal) and int64 labels, seeded."""
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, size, size, generator=g), torch.randint(0, num_classes, (n,), generator=g))


def machine() -> dict[str, str]:
    """CPU model and cores, GPU, and versions of Python, torch, torchvision, Lightning, kornia, Pillow."""
    info = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "platform": platform.platform()}
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from lightning_efficient.data.loader import available_cpus

    info["cpu"] = f"{cpu}, {available_cpus()} cores"
    from lightning_efficient.precision import cpu_flags

    info["cpu bf16"] = ", ".join(sorted(f for f in ("amx_bf16", "avx512_bf16") if f in cpu_flags())) or "none"
    info["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    if torch.cuda.is_available():
        info["cuda"] = str(torch.version.cuda)
        info["cudnn"] = str(torch.backends.cudnn.version())
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            )
            info["nvidia-smi"] = smi.stdout.strip()
        except Exception as err:  # noqa: BLE001 - recorded, not fatal
            info["nvidia-smi"] = f"unavailable ({type(err).__name__})"
    info["python"] = platform.python_version()
    for mod in ("torch", "torchvision", "pytorch_lightning", "kornia", "PIL"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            info[mod] = "absent"
    try:
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=RESULTS.parent, check=True
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        info["commit"] = "unknown"
    return info


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def comparison_table(comp: Comparison, unit: str) -> str:
    """Markdown: one row per variant with median, range, and median ratio to the reference (with its range)."""
    rows = []
    for name in comp.names:
        s = comp.summary(name)
        rows.append(
            (
                name,
                f"{s['median']:.1f}",
                f"{s['min']:.1f} - {s['max']:.1f}",
                f"{s['ratio_median']:.2f}x",
                f"{s['ratio_min']:.2f} - {s['ratio_max']:.2f}",
            )
        )
    return markdown_table(("variant", f"median {unit}", "range", f"ratio to {comp.names[0]}", "ratio range"), rows)


def write_results(
    name: str, title: str, body: str, data: dict, results_dir: Path = RESULTS, info: dict | None = None
) -> Path:
    """Write ``<results_dir>/<name>.md`` (title, machine, body) and ``<name>.json`` (data + machine).
    ``info``: the machine a stored run ran on (re-rendering it elsewhere); default: this one (:func:`machine`)."""
    if results_dir == RESULTS and name.endswith(("_quick", "_dryrun")):  # a smoke run never lands in git
        results_dir = _dry_dir()
    results_dir.mkdir(parents=True, exist_ok=True)
    info = info or machine()
    md = [f"# {title}", "", body.rstrip(), "", "## Machine", ""]
    md += [f"- {k}: {v}" for k, v in info.items()]
    path = results_dir / f"{name}.md"
    path.write_text("\n".join(md) + "\n")
    (results_dir / f"{name}.json").write_text(json.dumps({"machine": info, **data}, indent=2, default=str))
    return path


def results_dir(dry: bool = False) -> Path:
    """``benchmarks/results``; for a dry or quick run a folder outside the tracked one (the system's temporary
    folder), so that a smoke test never overwrites a measured result."""
    return _dry_dir() if dry else RESULTS


def _dry_dir() -> Path:
    import tempfile

    out = Path(tempfile.gettempdir()) / "lightning_efficient_benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    return out


def machine_kind() -> str:
    """The kind of machine a figure holds for, e.g. ``"cpu: AMD EPYC, 2 cores, no native bf16"``."""
    from lightning_efficient.doctor import machine_info

    info = machine_info()
    if info["gpu"]:
        return f"gpu: {info['gpu']} x{info['gpus']}"
    return f"cpu: {info['cpu']}, {info['cpus']} cores, {'native' if info['native_bf16'] else 'no native'} bf16"


def append_history(benchmark: str, figures: dict[str, float], dry: bool = False) -> None:
    """Append one row per figure to ``history.csv`` (date, commit, machine kind, benchmark, figure, value): the
    run-by-run record, beside the results file each benchmark rewrites."""
    import csv

    path = results_dir(dry) / "history.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    info = machine()
    with path.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(["date", "commit", "machine", "benchmark", "figure", "value"])
        for name, value in figures.items():
            out.writerow([info["date"], info["commit"], machine_kind(), benchmark, name, f"{value:.4g}"])
