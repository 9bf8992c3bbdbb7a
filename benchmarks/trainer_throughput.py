"""Training images/s through the Lightning Trainer: plain ``32-true`` NCHW vs ``Trainer(**recipe())``, per model
(torchvision ResNet-18, ResNet-50, MobileNetV3-Large by default).

Batch 32, 128 px, in-memory data (a TensorDataset of float images, so no decoding or augmentation is measured),
SGD with a per-epoch cosine schedule. Each measurement is one ``fit`` of ``--batches`` batches; images/s counts the
batches after the first ``--skip`` (warm-up), timed from Lightning's batch hooks. Variants are interleaved.

    python -m benchmarks.trainer_throughput [--models resnet18 ...] [--rounds 5] [--batches 12] [--size 128]

Writes ``benchmarks/results/trainer_throughput.md`` and ``.json``; appends the ratios to ``history.csv``.
"""

from __future__ import annotations

import argparse
import warnings

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.harness import (
    Classifier,
    StepClock,
    append_history,
    comparison_table,
    interleave,
    random_images,
    write_results,
)
from lightning_efficient import recipe


def measure(kind: str, arch: str, data: TensorDataset, batches: int, skip: int, batch_size: int) -> float:
    torch.manual_seed(0)
    clock = StepClock()
    common = dict(
        max_epochs=1,
        limit_train_batches=batches,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    if kind == "baseline":
        trainer = pl.Trainer(precision="32-true", callbacks=[clock], **common)
    else:
        kw = recipe(callbacks=[clock], **common)
        for cb in kw["callbacks"]:
            if hasattr(cb, "verbose"):
                cb.verbose = False
        trainer = pl.Trainer(**kw)
    loader = DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=0)
    trainer.fit(Classifier(arch), loader)
    return clock.images_per_s(skip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenet_v3_large"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--skip", type=int, default=2)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    data = random_images(args.batches * args.batch_size, args.size)
    kw = recipe()
    body = [
        f"Training through `pl.Trainer`, batch {args.batch_size}, {args.size} px, in-memory float data, "
        f"{args.batches} batches per fit (first {args.skip} not timed), {args.rounds} interleaved rounds "
        f"after 1 warm-up round.\n\n`recipe()` here = precision `{kw['precision']}` + "
        f"{', '.join(type(c).__name__ for c in kw['callbacks'])}."
    ]
    values, summary = {}, {}
    for arch in args.models:
        variants = {
            name: (lambda k=k, a=arch: measure(k, a, data, args.batches, args.skip, args.batch_size))
            for name, k in (("baseline (32-true, NCHW)", "baseline"), ("recipe()", "recipe"))
        }
        comp = interleave(variants, rounds=args.rounds, warmup=1)
        values[arch], summary[arch] = comp.values, {n: comp.summary(n) for n in comp.names}
        body.append(f"### {arch}\n\n{comparison_table(comp, 'images/s')}")
        print(body[-1], flush=True)
        append_history("trainer_throughput", {f"{arch}: recipe() / plain": summary[arch]["recipe()"]["ratio_median"]})
    path = write_results(
        "trainer_throughput",
        "Trainer throughput: plain Lightning vs recipe()",
        "\n\n".join(body) + "\n",
        {"args": vars(args), "values": values, "summary": summary},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
