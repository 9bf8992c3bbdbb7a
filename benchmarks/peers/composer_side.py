"""Composer's side of the peers benchmark (run in ``.venv-composer``, whose pins need torch 2.7).

MosaicML Composer's ``Trainer`` as its documentation writes it for image classification: the torchvision model
wrapped in ``ComposerClassifier``, a PyTorch ``DataLoader`` over torchvision's ``ImageFolder`` (Composer has no
loader of its own for image folders) with ``RandomResizedCrop`` + ``RandomHorizontalFlip`` + ``TrivialAugmentWide``
per image in ``spec.workers`` worker(s), ``CosineAnnealingWithWarmupScheduler`` (stepped every batch), and the
speed-up algorithms that run on a CPU and leave the model as it is: ``ChannelsLast`` and ``ProgressiveResizing``
(its defaults: half the side for the first half of the run, a ramp, the full side for the last 20%). fp32:
Composer raises on bf16 or fp16 on a CPU.

What differs from the other sides: Composer's warmup starts at 0 (theirs at 0.1x the peak), its scheduler gives
batch k the value of step k-1; torch's ``SGD`` with L2 weight decay (Composer's docs suggest its
``DecoupledSGDW``; the same optimizer as every side instead); the recipes' other algorithms are left out (BlurPool
changes the model, label smoothing the loss).

    .venv-composer/bin/python -m benchmarks.peers.composer_side --spec run.json
"""

from __future__ import annotations

import os

from benchmarks.peers.spec import MEAN, STD, Curve, parse_spec


def main() -> None:
    spec = parse_spec()
    import composer
    import torch
    import torchvision
    from composer import Callback, Trainer
    from composer.algorithms import ChannelsLast, ProgressiveResizing
    from composer.models import ComposerClassifier
    from composer.optim import CosineAnnealingWithWarmupScheduler
    from torch.utils.data import DataLoader, Subset
    from torchvision import datasets, transforms

    torch.manual_seed(spec.seed)
    subset = spec.train_samples()
    train_set = datasets.ImageFolder(
        os.path.join(spec.data, "train"),
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
    loader = DataLoader(
        Subset(train_set, subset["indices"]),
        batch_size=spec.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=spec.workers,
        persistent_workers=spec.workers > 0,
        generator=torch.Generator().manual_seed(spec.seed),
    )
    module = torchvision.models.resnet18(num_classes=len(subset["classes"]))
    model = ComposerClassifier(module, num_classes=len(subset["classes"]))
    decay = [p for p in module.parameters() if p.dim() > 1]
    no_decay = [p for p in module.parameters() if p.dim() <= 1]
    optimizer = torch.optim.SGD(
        [{"params": decay, "weight_decay": spec.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=spec.lr,
        momentum=0.9,
    )
    curve = Curve(spec, len(loader))

    class Record(Callback):
        lr = 0.0

        def batch_start(self, state, logger):
            curve.begin()

        def after_backward(self, state, logger):
            self.lr = state.optimizers[0].param_groups[0]["lr"]

        def batch_end(self, state, logger):
            curve.step(len(state.batch[1]), module, self.lr)

    trainer = Trainer(
        model=model,
        train_dataloader=loader,
        max_duration=f"{spec.epochs}ep",
        optimizers=optimizer,
        schedulers=CosineAnnealingWithWarmupScheduler(t_warmup=f"{spec.warmup_epochs}ep", alpha_f=0.0),
        algorithms=[ChannelsLast(), ProgressiveResizing(**spec.options.get("progressive_resize", {}))],
        callbacks=[Record()],
        device="cpu",
        precision="fp32",
        seed=spec.seed,
        progress_bar=False,
        log_to_console=False,
        save_folder=None,
    )
    trainer.fit()
    curve.write(precision="fp32", composer=composer.__version__, workers=spec.workers)


if __name__ == "__main__":
    main()
