"""timm's side of the peers benchmark (run in ``.venv-peers``): the loop of timm's ``train.py``, from timm's parts.

``train.py`` ships in timm's repository, not in its wheel or sdist, so this is its training loop written from the
parts it wires (timm 1.0.x): ``timm.data.ImageDataset`` (its folder reader) and ``timm.data.create_loader`` (its
transforms: ``RandomResizedCrop`` + flip + the augmentation, ``uint8`` tensors, and its prefetcher normalising
in the main process), ``timm.optim.create_optimizer_v2`` (no weight decay on biases and norms),
``timm.scheduler.create_scheduler_v2`` stepped per update (``step_on_epochs=False``, ``lr_scheduler.step_update``
after every optimizer step), ``torch.autocast`` in bf16 only where the CPU has native bf16 (``--amp
--amp-dtype bfloat16``), channels_last for the model and every input (``--channels-last``).

What differs from ``train.py`` run with the same flags: torchvision's ResNet-18 instead of ``timm.create_model``
(the same model on every side); SGD without Nesterov (``--opt momentum``; train.py's default ``sgd`` is Nesterov,
which fastai's SGD does not have); cross-entropy without label smoothing (train.py's default smoothing is 0.1); the
augmentation ``rand-n1-m10-mstd101-inc1-p1.0`` (timm has no TrivialAugment; this is RandAugment with one operation per
image at a uniformly drawn magnitude, TrivialAugment's definition, in timm's operation set); the subset given by
the benchmark (timm's reader with its sample list cut to it); no validation loop, checkpoints, EMA or summary CSV
(top-1 comes from the benchmark's shared evaluator, outside the training seconds).

    .venv-peers/bin/python -m benchmarks.peers.timm_side --spec run.json
"""

from __future__ import annotations

import os
import random

from benchmarks.peers.spec import MEAN, STD, Curve, parse_spec

#: timm's RandAugment with TrivialAugment's sampling: 1 operation per image (n1), always applied (p1.0), magnitude
#: drawn uniformly in [0, 10) (mstd > 100), the operations whose severity grows with the magnitude (inc1, as
#: TrivialAugmentWide's; without it, Posterize at a magnitude below 2.5 keeps 0 bits, which Pillow 13 rejects).
AUGMENT = "rand-n1-m10-mstd101-inc1-p1.0"


def main() -> None:
    spec = parse_spec()
    import numpy as np
    import timm
    import torch
    import torchvision
    from timm.data import ImageDataset, create_loader
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2

    random.seed(spec.seed)
    np.random.seed(spec.seed)
    torch.manual_seed(spec.seed)
    subset = spec.train_samples()
    dataset = ImageDataset(os.path.join(spec.data, "train"))
    dataset.reader.samples = [(path, label) for path, label in subset["samples"]]
    device = torch.device("cpu")
    loader = create_loader(
        dataset,
        input_size=(3, spec.size, spec.size),
        batch_size=spec.batch_size,
        is_training=True,
        scale=(0.08, 1.0),
        hflip=0.5,
        auto_augment=AUGMENT,
        interpolation="bilinear",
        mean=MEAN,
        std=STD,
        num_workers=spec.workers,
        device=device,
        use_prefetcher=True,
        persistent_workers=spec.workers > 0,
    )
    model = torchvision.models.resnet18(num_classes=len(subset["classes"]))
    model = model.to(memory_format=torch.channels_last)
    optimizer = create_optimizer_v2(model, opt="momentum", lr=spec.lr, weight_decay=spec.weight_decay, momentum=0.9)
    steps_per_epoch = len(loader)
    warmup = spec.warmup_epochs
    scheduler, epochs = create_scheduler_v2(
        optimizer,
        sched="cosine",
        num_epochs=spec.epochs - warmup,
        warmup_epochs=warmup,
        warmup_lr=0.1 * spec.lr,
        warmup_prefix=True,
        min_lr=0.0,
        step_on_epochs=False,
        updates_per_epoch=steps_per_epoch,
    )
    bf16 = bool(spec.options.get("bf16", False))
    loss_fn = torch.nn.CrossEntropyLoss()
    curve = Curve(spec, steps_per_epoch)
    model.train()
    updates = 0
    for _epoch in range(epochs):
        for images, targets in loader:
            curve.begin()
            images = images.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(model(images), targets)
            optimizer.zero_grad()
            loss.backward()
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            updates += 1
            scheduler.step_update(num_updates=updates)
            curve.step(len(targets), model, lr)
        scheduler.step(_epoch + 1)
    curve.write(precision="bf16 autocast" if bf16 else "fp32", timm=timm.__version__, workers=spec.workers)


if __name__ == "__main__":
    main()
