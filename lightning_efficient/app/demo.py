"""The main job: train the same ResNet-18 twice, plain Lightning vs ``recipe()``, and compare.

*baseline*: ``32-true``, NCHW, LR schedule stepped per epoch, torchvision ``RandomResizedCrop`` +
``TrivialAugmentWide`` + ``ToTensor`` per image in CPU DataLoader workers.
*efficient*: :func:`~lightning_efficient.recipe` as :func:`~lightning_efficient.tune` chose it for this model,
data and machine (precision, ChannelsLast and ``num_workers`` measured, not assumed; StepwiseLR,
EfficiencyReport), :class:`~lightning_efficient.FastImageFolder` feeding ``uint8`` batches, TrivialAugment per
sample on the device (:class:`~lightning_efficient.GPUAugmentation`). Its wall time includes the tuning.

Same seed, same images (the same subset of the same ImageFolder order), same epochs, same model, optimizer and
schedule. Each run happens in its own process (so peak memory is its own); the parent prints one table.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from lightning_efficient.data import balanced_subset

#: ``--image-size`` when not given, with ``--data`` and for scikit-learn's digits (8x8 scans upsampled to it, so
#: that the demo's images are as large in pixels as real ones and the practices matter).
DEFAULT_IMAGE_SIZE = 112
DIGITS_IMAGE_SIZE = DEFAULT_IMAGE_SIZE

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class UsageError(Exception):
    """A user mistake on the command line (``demo`` or ``tune``: a bad ``--data``, an unreadable image, an unknown
    ``--model``...): printed as one line, exit status 2."""


@dataclass
class DemoConfig:
    """Settings of one demo run (both sides use the same).

    Attributes:
        data: ImageFolder root with ``train/`` and ``val/`` class folders.
        epochs: training epochs.
        train_images, val_images: images taken from each split (a seeded, class-balanced subset; 0 = all).
        image_size: side of the square training/validation crops, pixels; ``None``: :data:`DEFAULT_IMAGE_SIZE`
            (112), also for the scikit-learn digits fallback (written as PNGs of this size).
        batch_size: images per batch.
        workers: DataLoader worker processes per run, as ``DataLoader(num_workers=...)`` (0: load in the main
            process); ``None`` ("auto"): :func:`~lightning_efficient.suggest_loader_kwargs`'s choice (training on
            a GPU: one per CPU core, less one; on the CPU: a quarter of the cores, none up to 3).
        lr: peak learning rate of SGD (momentum 0.9, nesterov), reached after a 1-epoch linear warmup from
            0.1x, then cosine annealing to 0 at the end; stepped per epoch (baseline) or per step (efficient).
        seed: seed for the subset, the model initialisation, shuffling and augmentation.
        progress: show Lightning's progress bars.
        tune: the efficient side runs :func:`~lightning_efficient.tune` first (within its time budget, or reusing
            a stored decision) and trains with its choice (``False``: ``recipe()``'s defaults).
        efficient_first: train the efficient side first (default: the baseline first).
        val_every: validate every this share of an epoch (``Trainer(val_check_interval=...)``), both sides.
        progressive_resize: the efficient side trains with :class:`~lightning_efficient.ProgressiveResize`.
        ablate: the efficient side without one of its parts (an ablation): ``"lr schedule"`` (per-epoch LR, no
            StepwiseLR), ``"augmentation"`` (the baseline's per-image CPU augmentation instead of GPUAugmentation),
            ``"throughput"`` (``32-true``, NCHW, the loader as given: no tune()), ``"progressive resizing"``.
    """

    data: str
    epochs: int = 4
    train_images: int = 1600
    val_images: int = 500
    image_size: Optional[int] = None
    batch_size: int = 32
    workers: Optional[int] = None
    lr: float = 0.025
    seed: int = 0
    progress: bool = True
    tune: bool = True
    efficient_first: bool = False
    val_every: float = 1.0
    progressive_resize: bool = False
    ablate: str = ""


# --------------------------------------------------------------------------------------------- validation
def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMG_EXTENSIONS and p.is_file())


def check_data(root: str | os.PathLike) -> Path:
    """Check that ``root`` is an ImageFolder root with non-empty ``train/`` and ``val/``; returns it.

    Raises:
        UsageError: naming the path and what to do.
    """
    path = Path(root).expanduser()
    if not path.exists():
        raise UsageError(f"{path}: no such folder; pass --data with an ImageFolder root holding train/ and val/.")
    if not path.is_dir():
        raise UsageError(f"{path}: not a folder; pass --data with an ImageFolder root holding train/ and val/.")
    for split in ("train", "val"):
        s = path / split
        if not s.is_dir():
            raise UsageError(f"{s}: missing; --data needs train/ and val/ folders, each with one folder per class.")
        classes = sorted(d for d in s.iterdir() if d.is_dir())
        if not classes:
            raise UsageError(f"{s}: no class folders; put each class's images in {s}/<class name>/.")
        if not any(_image_files(c) for c in classes):
            raise UsageError(
                f"{s}: empty split, no image files ({', '.join(IMG_EXTENSIONS)}) in its class folders; add images."
            )
    train_classes = sorted(d.name for d in (path / "train").iterdir() if d.is_dir())
    val_classes = sorted(d.name for d in (path / "val").iterdir() if d.is_dir())
    if train_classes != val_classes:
        raise UsageError(
            f"{path}: train/ and val/ have different class folders ({len(train_classes)} vs {len(val_classes)});"
            " give both splits the same class folders."
        )
    return path


def check_images(paths: list[str]) -> None:
    """Open and decode every image (at 1/8 scale for JPEG: cheap); raise a one-line UsageError on the first bad one."""
    from PIL import Image

    for p in paths:
        try:
            with Image.open(p) as img:
                img.draft("RGB", (max(1, img.width // 8), max(1, img.height // 8)))
                img.load()
        except Exception as e:  # noqa: BLE001 - any failure to decode is the user's file
            raise UsageError(f"{p}: unreadable image ({type(e).__name__}: {e}); delete or replace the file.") from None


# --------------------------------------------------------------------------------------------- fallback data
def digits_imagefolder(root: str | os.PathLike, size: int = 32) -> Path:
    """:func:`lightning_efficient.data.digits_imagefolder`, with a missing scikit-learn as a one-line UsageError."""
    from lightning_efficient.data import digits_imagefolder as scanned_digits

    try:
        return scanned_digits(root, size)
    except ModuleNotFoundError as err:
        if err.name != "sklearn":
            raise
        raise UsageError(
            "no --data given, and the fallback data set (digits) needs scikit-learn, which is missing: "
            '`pip install "lightning_efficient[demo]"` (or scikit-learn), '
            "or pass --data with an ImageFolder root holding train/ and val/."
        ) from None


# --------------------------------------------------------------------------------------------- the runs
def make_classifier(num_classes: int, lr: float, epochs: int, arch: str = "resnet18") -> Any:
    """A LightningModule training ``torchvision.models.<arch>`` from scratch: SGD (momentum 0.9, nesterov, weight
    decay 5e-4 on weights), cross-entropy with label smoothing 0.1, a 1-epoch linear warmup from 0.1x then cosine
    over ``epochs``, stepped per epoch; ``val/top1`` logged.

    Raises:
        ValueError: ``arch`` is not a torchvision classification model (the message names close ones).
    """
    import difflib

    import pytorch_lightning as pl
    import torch
    import torchmetrics
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    if arch not in names:
        close = ", ".join(difflib.get_close_matches(arch, names, n=3)) or "e.g. resnet18, resnet50, mobilenet_v3_large"
        raise ValueError(f"{arch!r} is not a torchvision classification model (did you mean {close}?).")

    class ImageClassifier(pl.LightningModule):
        """A torchvision classifier, SGD, 1-epoch linear warmup then cosine, stepped per epoch (interval "epoch")."""

        def __init__(self) -> None:
            super().__init__()
            self.model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
            self.top1 = torchmetrics.classification.MulticlassAccuracy(num_classes=num_classes, average="micro")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y, label_smoothing=0.1)
            self.log("train/loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.top1.update(self(x).argmax(1), y)
            self.log("val/top1", self.top1, prog_bar=True, on_epoch=True)

        def configure_optimizers(self) -> Any:
            decay = [p for n, p in self.named_parameters() if p.dim() > 1]
            no_decay = [p for n, p in self.named_parameters() if p.dim() <= 1]
            opt = torch.optim.SGD(
                [{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                lr=lr,
                momentum=0.9,
                nesterov=True,
            )
            warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=1)
            cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs - 1))
            sched = torch.optim.lr_scheduler.SequentialLR(opt, [warmup, cosine], milestones=[1])
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    return ImageClassifier()


def top1_curve_callback(start: float) -> Any:
    """A callback recording ``(training seconds, val/top1)`` after every validation run, in ``.points``.

    Training seconds: wall-clock seconds since ``start`` (a ``time.perf_counter()`` value; tuning and set-up
    included) less the time spent in validation runs, so that the same validation cost on both sides does not
    dilute the comparison of training speed.
    """
    import pytorch_lightning as pl

    class Top1Curve(pl.Callback):
        def __init__(self) -> None:
            self.points: list[tuple[float, float]] = []
            self.validation_s = 0.0
            self._val_start = 0.0

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            self._val_start = time.perf_counter()

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            now = time.perf_counter()
            self.validation_s += now - self._val_start
            if not trainer.sanity_checking and "val/top1" in trainer.callback_metrics:
                self.points.append((now - start - self.validation_s, float(trainer.callback_metrics["val/top1"])))

    return Top1Curve()


def run_one(kind: str, cfg: DemoConfig, train_idx: list[int], val_idx: list[int]) -> dict[str, Any]:
    """Train one side (``"baseline"`` or ``"efficient"``) in this process; returns its figures."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, Subset
    from torchvision import datasets, transforms

    from lightning_efficient import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        EfficiencyReport,
        FastImageFolder,
        GPUAugmentation,
        recipe,
        tune,
        uint8_collate,
    )

    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    root = Path(cfg.data)
    size = cfg.image_size if cfg.image_size is not None else DEFAULT_IMAGE_SIZE
    resize = int(round(size * 256 / 224))
    if cfg.ablate not in ABLATIONS:
        raise UsageError(f"ablate={cfg.ablate!r}: expected one of {', '.join(map(repr, ABLATIONS))}.")
    if kind == "baseline" or cfg.ablate == "augmentation":
        normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
        train_set = datasets.ImageFolder(
            root / "train",
            transforms.Compose(
                [transforms.RandomResizedCrop(size), transforms.TrivialAugmentWide(), transforms.ToTensor(), normalize]
            ),
        )
        val_set = datasets.ImageFolder(
            root / "val",
            transforms.Compose(
                [transforms.Resize(resize), transforms.CenterCrop(size), transforms.ToTensor(), normalize]
            ),
        )
        collate = None
    else:
        train_set = FastImageFolder(root / "train", size=size, train=True)
        val_set = FastImageFolder(root / "val", size=size, train=False)
        collate = uint8_collate
    workers = resolve_workers(cfg.workers)
    loader_kw: dict[str, Any] = dict(
        batch_size=cfg.batch_size, num_workers=workers, persistent_workers=workers > 0, collate_fn=collate
    )
    train_loader = DataLoader(
        Subset(train_set, train_idx),
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(cfg.seed),
        **loader_kw,
    )
    val_loader = DataLoader(Subset(val_set, val_idx), shuffle=False, **loader_kw)

    report = EfficiencyReport(verbose=False, log_every_n_steps=0)
    common: dict[str, Any] = dict(
        max_epochs=cfg.epochs,
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=cfg.progress,
        num_sanity_val_steps=0,
        deterministic=False,
        val_check_interval=cfg.val_every,
    )
    model = make_classifier(len(train_set.classes), cfg.lr, cfg.epochs)
    start = time.perf_counter()
    curve = top1_curve_callback(start)
    tuned: dict[str, Any] = {}
    if kind == "baseline":
        trainer = pl.Trainer(precision="32-true", callbacks=[report, curve], **common)
    else:
        augment: Optional[GPUAugmentation] = GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD)
        augment = None if cfg.ablate == "augmentation" else augment
        resize = cfg.progressive_resize and cfg.ablate != "progressive resizing"
        result = None
        if cfg.tune and cfg.ablate != "throughput":
            if cfg.progress:
                print("\n== efficient: tune() decides precision, channels_last and num_workers first ...", flush=True)
            result = tune(model, train_loader, verbose=False, callbacks=[augment] if augment else [], **common)
            report.tuned = result  # the report quotes what tune() measured
            train_loader = result.dataloader(train_loader)
            model = result.prepare_model(model)
            tuned = {
                "tuning_s": result.tuning_s,
                "budget_s": result.budget_s,
                "chosen": result.chosen.label(),
                "measured": result.measured(),
                "by_rule": result.by_rule(),
                "reused_from": result.reused_from,
                "reasons": [f"{d.factor}={d.value!r}: {d.reason}" for d in result.decisions],
                "table": result.table(),
                "speedup": result.speedup,
            }
        plain: dict[str, Any] = {"precision": "32-true", "channels_last": False} if cfg.ablate == "throughput" else {}
        kw = recipe(
            augmentation=augment,
            efficiency_report=False,
            callbacks=[report, curve],
            tune=result,
            stepwise_lr=cfg.ablate != "lr schedule",
            progressive_resize=resize,
            **plain,
            **common,
        )
        trainer = pl.Trainer(**kw)
    if cfg.progress:
        callbacks = trainer.callbacks  # type: ignore[attr-defined]  # assigned by Lightning, not declared on Trainer
        ours = (type(c).__name__ for c in callbacks if type(c).__module__.startswith("lightning_efficient"))
        print(f"\n== {kind}: precision={trainer.precision}, callbacks: {', '.join(ours)}", flush=True)
    trainer.fit(model, train_loader, val_loader)
    wall = time.perf_counter() - start
    figures = report.summary()
    return {
        "tuning_s": tuned.get("tuning_s", 0.0),
        "wall_time_s": wall,
        "images_per_s": figures["images_per_s"],
        "data_wait_share": figures["data_wait_share"],
        "transform_share": figures["transform_share"],
        "val_top1": float(trainer.callback_metrics["val/top1"]),
        "peak_memory_mb": figures["peak_memory_mb"],
        "precision": str(trainer.precision),
        "report": report.report(),
        "tuned": tuned,
        "top1_curve": curve.points,
        "validation_s": curve.validation_s,
    }


def resolve_workers(workers: Optional[int]) -> int:
    """``workers`` (0 included: no worker processes), or for ``None`` ("auto") the DataLoader workers
    :func:`suggest_loader_kwargs` recommends here (training on a GPU: one per CPU core, less one; on the CPU: a
    quarter of the cores, none up to 3)."""
    from lightning_efficient import suggest_loader_kwargs

    if workers is None:
        return suggest_loader_kwargs().kwargs["num_workers"]
    return workers


def _child(kind: str, cfg: DemoConfig, train_idx: list[int], val_idx: list[int], queue: Any) -> None:
    from lightning_efficient import quiet_lightning

    # A spawned process inherits "spawn" as its start method (multiprocessing.spawn.prepare), so its DataLoader
    # workers would each start by importing torch and Lightning again (5-7 s per loader on a 2-core CPU, inside the
    # measured time). The run starts them as a user's script does: with the platform's default method.
    mp.set_start_method(None, force=True)
    try:
        with quiet_lightning():  # Lightning's tips and known-harmless warnings: not for the demo's table
            result = run_one(kind, cfg, train_idx, val_idx)
        queue.put(("ok", result))
    except BaseException as e:  # noqa: BLE001 - sent to the parent, which decides
        import traceback

        queue.put(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))


def run_in_subprocess(kind: str, cfg: DemoConfig, train_idx: list[int], val_idx: list[int]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(kind, cfg, train_idx, val_idx, queue), daemon=False)
    proc.start()
    result = None
    try:
        while result is None:
            try:
                result = queue.get(timeout=1.0)
            except Exception:  # noqa: BLE001 - queue.Empty: check the child is alive
                if not proc.is_alive():
                    break
        proc.join()
    finally:  # interrupted (Ctrl-C): the training process and its DataLoader workers do not outlive the demo
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=30)
    if result is None:
        raise RuntimeError(f"the {kind} run died (exit code {proc.exitcode}) without a result")
    if result[0] == "error":
        raise RuntimeError(f"the {kind} run failed: {result[1]}\n{result[2]}")
    return result[1]


# --------------------------------------------------------------------------------------------- the table
#: The parts of the efficient side an ablation can leave out (``DemoConfig.ablate``; ``""``: none).
ABLATIONS = ("", "lr schedule", "augmentation", "throughput", "progressive resizing")

ROWS = (
    ("tuning (inside the wall time)", "tuning_s", "{:.1f} s", "lower"),
    ("wall time", "wall_time_s", "{:.1f} s", "lower"),
    ("time to baseline's final top-1", "time_to_target_s", "{:.1f} s", "lower"),
    ("training throughput", "images_per_s", "{:.1f} images/s", "higher"),
    ("waiting for data", "data_wait_share", "{:.1%} of step", "lower"),
    ("val top-1", "val_top1", "{:.1%}", "higher"),
    ("peak memory (RSS/CUDA)", "peak_memory_mb", "{:.0f} MiB", "lower"),
)


def time_to_top1(curve: list[tuple[float, float]], target: float) -> float:
    """Training seconds until the first validation with top-1 >= ``target`` (NaN if never); the resolution is
    one validation interval (an epoch)."""
    return next((t for t, top1 in curve if top1 >= target), math.nan)


def add_time_to_target(results: dict[str, dict[str, Any]]) -> None:
    """Set ``time_to_target_s`` on both sides: seconds to reach the baseline's final top-1 (its last validation)."""
    target = results["baseline"]["val_top1"]
    for side in results.values():
        side["time_to_target_s"] = time_to_top1(side.get("top1_curve", []), target)


def plot_curves(results: dict[str, dict[str, Any]], path: str, title: str) -> None:
    """Top-1 against wall-clock seconds for both sides, with the baseline's final top-1 as a line, to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kind, style in (("baseline", "o-"), ("efficient", "s-")):
        pts = results[kind].get("top1_curve", [])
        if pts:
            ax.plot(
                [t for t, _ in pts], [100 * a for _, a in pts], style, label=f"{kind} ({results[kind]['precision']})"
            )
    ax.axhline(100 * results["baseline"]["val_top1"], color="grey", ls=":", lw=1, label="baseline's final top-1")
    ax.set_xlabel("training seconds (wall clock from the start, tuning included, validation excluded)")
    ax.set_ylabel("val top-1 (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """The side-by-side table: one row per figure, baseline | efficient | efficient/baseline (a ratio; for shares
    and top-1, the difference in percentage points)."""
    b, e = results["baseline"], results["efficient"]
    header = ("", f"baseline ({b['precision']})", f"efficient ({e['precision']})", "efficient/baseline")
    rows = [header]
    for label, key, fmt, _ in ROWS:
        vb, ve = b[key], e[key]
        known = vb is not None and ve is not None and not math.isnan(vb) and not math.isnan(ve)
        if "%" in fmt:  # a ratio of two percentages says little: the difference in points
            change = f"{100 * (ve - vb):+.1f} pt" if known else "n/a"
        else:
            change = f"{ve / vb:.2f}x" if known and vb else "n/a"
        text = lambda v, fmt=fmt: "not reached" if isinstance(v, float) and math.isnan(v) else fmt.format(v)  # noqa: E731
        rows.append((label, text(vb), text(ve), change))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    line = lambda r: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False))
    )
    sep = "-" * (sum(widths) + 6)
    return "\n".join([line(rows[0]), sep] + [line(r) for r in rows[1:]])


def run_demo(
    cfg: DemoConfig, out: Optional[str] = None, reports: bool = True, plot: Optional[str] = None
) -> dict[str, Any]:
    """Validate the data, train baseline then efficient (each in a fresh process), print the table.

    Returns the JSON-able results (also written to ``out`` when given); with ``plot``, writes the top-1 against
    wall-clock curves of both sides to that PNG file.

    Raises:
        UsageError: bad data (missing folder, no class folders, empty split, unreadable image).
    """
    from torchvision.datasets import ImageFolder

    root = check_data(cfg.data)
    cfg.data = str(root)
    if cfg.image_size is None:
        cfg.image_size = DEFAULT_IMAGE_SIZE
    train_samples = ImageFolder(root / "train").samples
    val_samples = ImageFolder(root / "val").samples
    train_idx = balanced_subset([t for _, t in train_samples], cfg.train_images, cfg.seed)
    val_idx = balanced_subset([t for _, t in val_samples], cfg.val_images, cfg.seed + 1)
    if len(train_idx) < cfg.batch_size:
        raise UsageError(
            f"{root / 'train'}: {len(train_idx)} training images is less than one batch of {cfg.batch_size};"
            " add images or pass a smaller --batch-size."
        )
    check_images([train_samples[i][0] for i in train_idx] + [val_samples[i][0] for i in val_idx])

    cfg.workers = resolve_workers(cfg.workers)
    results: dict[str, Any] = {}
    for kind in ("efficient", "baseline") if cfg.efficient_first else ("baseline", "efficient"):
        results[kind] = run_in_subprocess(kind, cfg, train_idx, val_idx)
    if reports:
        for kind in ("baseline", "efficient"):
            print(f"\n[{kind}] {results[kind]['report']}")
    from lightning_efficient import cpu_has_native_bf16

    kind = "native bf16" if cpu_has_native_bf16() else "no native bf16"
    print(
        f"\nResNet-18 on {root} ({len(train_idx)} train / {len(val_idx)} val images, {cfg.image_size} px, "
        f"batch {cfg.batch_size}, {cfg.epochs} epoch{'s' * (cfg.epochs != 1)}, "
        f"{cfg.workers} DataLoader worker{'s' * (cfg.workers != 1)}, seed {cfg.seed}; "
        f"CPU: {os.cpu_count()} cores, {kind}):\n"
    )
    add_time_to_target(results)
    print(format_table(results), flush=True)
    tuned = results["efficient"].get("tuned") or {}
    if tuned:
        how = (
            f"reused the decision stored in {tuned['reused_from']}"
            if tuned["reused_from"]
            else f"measured {', '.join(tuned['measured']) or 'only the settings in use, no change'}; decided by "
            f"recipe()'s defaults (not measured within its {tuned['budget_s']:.0f} s budget): "
            f"{', '.join(tuned['by_rule']) or 'nothing'}"
        )
        print(
            f"\nefficient side: tune() took {tuned['tuning_s']:.1f} s (inside its wall time), {how}; chose "
            f"{tuned['chosen']}:"
        )
        for reason in tuned["reasons"]:
            print(f"  - {reason}")
    if plot:
        name = "scikit-learn digits" if root.name.startswith("lightning_efficient_digits_") else root.name
        plot_curves(results, plot, f"ResNet-18, {name}, {len(train_idx)} train images, {cfg.image_size} px")
        print(f"\nwrote {plot}")
    payload = {
        "config": asdict(cfg),
        "train_images": len(train_idx),
        "val_images": len(val_idx),
        "machine": {
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "native_bf16": cpu_has_native_bf16(),
        },
        "results": {k: {kk: vv for kk, vv in v.items() if kk != "report"} for k, v in results.items()},
        "ratios": {
            key: results["efficient"][key] / results["baseline"][key]
            for _, key, _, _ in ROWS
            if results["baseline"][key]
        },
        "reports": {k: v["report"] for k, v in results.items()},
    }
    if out:
        Path(out).write_text(json.dumps(payload, indent=2))
        print(f"\nwrote {out}")
    return payload


def run_demo_with_fallback(
    cfg: DemoConfig, out: Optional[str], reports: bool, plot: Optional[str] = None
) -> dict[str, Any]:
    """Like :func:`run_demo`; with ``cfg.data`` empty, first writes scikit-learn's digits to a temporary folder
    as ``cfg.image_size`` px PNGs (default :data:`DIGITS_IMAGE_SIZE`), and says so once they are written.

    Raises:
        UsageError: as :func:`run_demo`, or (before anything is printed) scikit-learn is missing.
    """
    import importlib.util

    if plot and importlib.util.find_spec("matplotlib") is None:  # say so before training, not after
        raise UsageError('--plot needs matplotlib: pip install "lightning_efficient[plot]" (or matplotlib).')
    if cfg.data:
        return run_demo(cfg, out, reports, plot)
    if cfg.image_size is None:
        cfg.image_size = DIGITS_IMAGE_SIZE
    tmp = tempfile.mkdtemp(prefix="lightning_efficient_digits_")
    try:
        cfg.data = str(digits_imagefolder(tmp, size=cfg.image_size))
        print(
            f"no --data given: using scikit-learn's digits (offline), written as {cfg.image_size} px PNGs to an "
            f"ImageFolder in {tmp}"
        )
        return run_demo(cfg, out, reports, plot)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
