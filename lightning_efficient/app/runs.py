"""The demo's two runs: one side (baseline or efficient) trained in a process of its own, and the callback that
records its top-1 against training seconds."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any, Optional

from lightning_efficient.app.classifier import make_classifier
from lightning_efficient.app.config import ABLATIONS, DEFAULT_IMAGE_SIZE, DemoConfig, UsageError, resolve_workers


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


def _child(kind: str, cfg: DemoConfig, train_idx: list[int], val_idx: list[int], queue: Any) -> None:
    from lightning_efficient import quiet_lightning

    # A spawned process inherits "spawn" as its start method (multiprocessing.spawn.prepare), so its DataLoader
    # workers would each start by importing torch and Lightning again (seconds per loader on a small CPU, inside the
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
