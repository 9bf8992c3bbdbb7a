"""The demo's classifier: a torchvision model by name in a LightningModule, with the baseline's training
schedule (also the model of ``lightning-efficient tune`` and of the schedule benchmark)."""

from __future__ import annotations

from typing import Any


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
