"""fastai's side of the peers benchmark (run in ``.venv-peers``): a ``Learner`` as fastai's documentation writes it.

``DataBlock`` (``ImageBlock``, ``CategoryBlock``) with ``RandomResizedCrop`` as the item transform (on the PIL
image, in fastai's DataLoader workers) and ``aug_transforms()`` (flip, rotation, zoom, warp, lighting: fastai's
batch augmentation, run on the batch in the training process; fastai has no TrivialAugment) +
``Normalize.from_stats(*imagenet_stats)`` as batch transforms; ``Learner(dls, model, opt_func=SGD,
cbs=ChannelsLast())``; ``learn.to_bf16()``; ``fit_one_cycle`` (per-batch schedule).

Settings made equal to the other sides: ``SGD(mom=0.9, decouple_wd=False)`` (L2 weight decay, as torch's SGD;
fastai's default is decoupled), ``moms=(0.9, 0.9, 0.9)`` (no momentum cycling), ``div=10`` (the warmup starts at
0.1x the peak), ``pct_start`` = the warmup's share of the run, ``div_final=1e5`` (down to ~0); weight decay not on
biases and norms (fastai's default). What differs: ``fit_one_cycle``'s warmup is a cosine ramp where the others'
is linear.

Precision: ``to_bf16()`` adds fastai's ``MixedPrecision``, which enters ``torch.autocast('cuda')``; on a CPU
PyTorch warns and disables that autocast, so fastai as documented trains in fp32 on a CPU. With
``spec.options["autocast"]`` a small callback enters ``torch.autocast('cpu', torch.bfloat16)`` around the forward
pass instead: what fastai gives with that one fix (worth it only where the CPU has native bf16).

    .venv-peers/bin/python -m benchmarks.peers.fastai_side --spec run.json
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.peers.spec import Curve, parse_spec


def main() -> None:
    spec = parse_spec()
    import fastai
    import torch
    import torchvision
    from fastai.callback.channelslast import ChannelsLast
    from fastai.callback.core import Callback, CancelValidException
    from fastai.optimizer import SGD
    from fastai.torch_core import set_seed
    from fastai.vision.all import (
        CategoryBlock,
        DataBlock,
        ImageBlock,
        Learner,
        Normalize,
        RandomResizedCrop,
        aug_transforms,
        imagenet_stats,
    )
    from fastcore.basics import partialler

    set_seed(spec.seed)
    subset = spec.train_samples()
    paths = [Path(path) for path, _ in subset["samples"]]
    labels = {Path(path): subset["classes"][label] for path, label in subset["samples"]}
    block = DataBlock(
        blocks=(ImageBlock, CategoryBlock(vocab=subset["classes"])),
        get_items=lambda _: paths,
        get_y=lambda path: labels[path],
        splitter=lambda items: (list(range(len(items))), [0]),  # validation: the shared evaluator (below)
        item_tfms=RandomResizedCrop(spec.size, min_scale=0.08),
        batch_tfms=[*aug_transforms(), Normalize.from_stats(*imagenet_stats)],
    )
    dls = block.dataloaders(spec.data, bs=spec.batch_size, num_workers=spec.workers, device=torch.device("cpu"))
    model = torchvision.models.resnet18(num_classes=len(subset["classes"]))
    curve = Curve(spec, len(dls.train))

    class Record(Callback):
        order = 100  # after every other callback's after_batch

        def before_batch(self) -> None:
            if self.training:
                curve.begin()

        def before_step(self) -> None:
            self.lr = self.opt.hypers[-1]["lr"]

        def after_batch(self) -> None:
            if self.training:
                curve.step(len(self.yb[0]), self.learn.model, self.lr)

        def before_validate(self) -> None:
            raise CancelValidException()  # the shared evaluator validates, outside the training seconds

    class CPUAutocast(Callback):
        """The one fix: bf16 autocast on the CPU around the forward pass and the loss."""

        order = 10

        def before_batch(self) -> None:
            self.autocast = torch.autocast("cpu", dtype=torch.bfloat16)
            self.autocast.__enter__()

        def after_pred(self) -> None:
            self.learn.pred = self.pred.float()

        def after_loss(self) -> None:
            self.autocast.__exit__(None, None, None)

    autocast = bool(spec.options.get("autocast", False))
    learn = Learner(
        dls,
        model,
        loss_func=torch.nn.CrossEntropyLoss(),
        opt_func=partialler(SGD, mom=0.9, decouple_wd=False),
        cbs=[ChannelsLast(), Record()] + [CPUAutocast()] * autocast,
    )
    if not autocast:
        learn.to_bf16()
    with learn.no_bar(), learn.no_logging():
        learn.fit_one_cycle(
            spec.epochs,
            lr_max=spec.lr,
            div=10.0,
            div_final=1e5,
            pct_start=spec.warmup_epochs / spec.epochs,
            wd=spec.weight_decay,
            moms=(0.9, 0.9, 0.9),
        )
    curve.write(
        precision="bf16 autocast (cpu)" if autocast else "fp32 (to_bf16's autocast is CUDA-only)",
        fastai=fastai.__version__,
        workers=spec.workers,
    )


if __name__ == "__main__":
    main()
