"""The Lightning sides of the peers benchmark (run in the repository's ``.venv``).

* ``lightning``: plain Lightning as a user writes it (as in ``benchmarks/time_to_accuracy.py``): ``32-true``, NCHW,
  the LightningModule's warmup + cosine scheduler stepped per epoch (``interval="epoch"``, what the module
  declares), torchvision ``ImageFolder`` with ``RandomResizedCrop`` + ``RandomHorizontalFlip`` +
  ``TrivialAugmentWide`` + ``ToTensor`` + ``Normalize`` per image in ``spec.workers`` DataLoader workers.
* ``ours``: the same LightningModule, unchanged, with ``recipe()`` as ``tune()`` chooses it (precision,
  channels_last, ``num_workers``; tuning inside the training seconds), ``StepwiseLR`` (the module's schedule per
  optimizer step), ``FastImageFolder`` ``uint8`` batches (its ``RandomResizedCrop``), ``GPUAugmentation("flip")``
  (:data:`AUGMENTATION`; ``spec.options["augmentation"]``: other arguments, e.g. ``{"augmentation":
  "trivial_augment", "flip_p": 0.5}``) and ``ProgressiveResize`` (its schedule from ``spec.options``; defaults: the
  package's).
* ``ours without progressive resizing``: the ablation.

    python -m benchmarks.peers.lightning_sides --spec run.json
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.peers.spec import MEAN, STD, Curve, Spec, parse_spec

#: GPUAugmentation's arguments on the ours sides (``spec.options["augmentation"]`` overrides them): flip only, with
#: FastImageFolder's RandomResizedCrop. Chosen on seeds 0-1 over ``{"augmentation": "trivial_augment", "flip_p":
#: 0.5}``, after fastai's milder augmentation (docs/practices/gpu-augmentation.md, "Short runs: flip only").
AUGMENTATION: dict[str, Any] = {"augmentation": "flip"}


def make_module(spec: Spec, num_classes: int) -> Any:
    """The user's LightningModule: torchvision ResNet-18 from scratch, SGD (momentum 0.9, weight decay on conv and
    linear weights), cross-entropy, a linear warmup from 0.1x then cosine, declared per epoch."""
    import pytorch_lightning as pl
    import torch
    import torchvision

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = torchvision.models.resnet18(num_classes=num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self) -> Any:
            decay = [p for p in self.parameters() if p.dim() > 1]
            no_decay = [p for p in self.parameters() if p.dim() <= 1]
            opt = torch.optim.SGD(
                [{"params": decay, "weight_decay": spec.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                lr=spec.lr,
                momentum=0.9,
            )
            warmup = spec.warmup_epochs
            sched = torch.optim.lr_scheduler.SequentialLR(
                opt,
                [
                    torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=warmup),
                    torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, spec.epochs - warmup)),
                ],
                milestones=[warmup],
            )
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    return Classifier()


def curve_callback(curve: Curve) -> Any:
    import pytorch_lightning as pl

    class Record(pl.Callback):
        lr = 0.0

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            curve.begin()

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            self.lr = optimizer.param_groups[0]["lr"]

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            curve.step(len(batch[1]), pl_module.model, self.lr)

    return Record()


def main() -> None:
    spec = parse_spec()
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, Subset
    from torchvision import datasets, transforms

    from lightning_efficient import (
        EfficiencyReport,
        FastImageFolder,
        GPUAugmentation,
        ProgressiveResize,
        recipe,
        tune,
        uint8_collate,
    )
    from lightning_efficient.quiet import quiet_lightning

    pl.seed_everything(spec.seed, workers=True, verbose=False)
    subset = spec.train_samples()
    root = os.path.join(spec.data, "train")
    plain = spec.side == "lightning"
    if plain:
        train_set: Any = datasets.ImageFolder(
            root,
            transforms.Compose(
                [
                    transforms.RandomResizedCrop(spec.size),
                    transforms.RandomHorizontalFlip(),
                    transforms.TrivialAugmentWide(),
                    transforms.ToTensor(),
                    transforms.Normalize(MEAN, STD),
                ]
            ),
        )
    else:
        train_set = FastImageFolder(root, size=spec.size, train=True)
    workers = spec.workers
    loader = DataLoader(
        Subset(train_set, subset["indices"]),
        batch_size=spec.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        collate_fn=None if plain else uint8_collate,
        generator=torch.Generator().manual_seed(spec.seed),
    )
    module = make_module(spec, len(subset["classes"]))
    curve = Curve(spec, len(loader))
    common: dict[str, Any] = dict(
        max_epochs=spec.epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    report = None
    with quiet_lightning():
        if plain:
            trainer = pl.Trainer(precision="32-true", callbacks=[curve_callback(curve)], **common)
            chosen = "32-true, NCHW, per-epoch LR"
        else:
            augmentation = {**AUGMENTATION, **spec.options.get("augmentation", {})}
            augment = GPUAugmentation(**augmentation, mean=MEAN, std=STD)
            resize: Any = False
            if spec.side == "ours":
                resize = ProgressiveResize(**spec.options.get("progressive_resize", {}))
            result = tune(module, loader, verbose=False, callbacks=[augment], **common, **spec.options.get("tune", {}))
            loader = result.dataloader(loader)
            module = result.prepare_model(module)
            chosen = f"{result.chosen.label()}, GPUAugmentation({augmentation['augmentation']!r})"
            curve.extra["tuned"] = {
                "chosen": chosen,
                "tuning_s": result.tuning_s,
                "measured": result.measured(),
                "by_rule": result.by_rule(),
                "reused": bool(result.reused_from),
                "reasons": [f"{d.factor}={d.value!r}: {d.reason}" for d in result.decisions],
            }
            report = EfficiencyReport(verbose=False, log_every_n_steps=0, tuned=result)
            kw = recipe(
                tune=result,
                augmentation=augment,
                progressive_resize=resize,
                callbacks=[curve_callback(curve), report],
                **common,
            )
            trainer = pl.Trainer(**kw)
        trainer.fit(module, loader)
    if report is not None:
        print(report.report())
        curve.extra["report"] = {k: v for k, v in report.summary().items() if k not in ("checklist", "tune_hints")}
    curve.write(precision=str(trainer.precision), settings=chosen, workers=loader.num_workers)


if __name__ == "__main__":
    main()
