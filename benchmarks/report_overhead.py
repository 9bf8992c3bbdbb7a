"""EfficiencyReport's own overhead: the time spent inside its hooks as a share of step time, and A/B images/s.

Two measurements on ResNet-18 (bf16-mixed where supported, channels_last), in-memory data:

1. *hook time*: a subclass of EfficiencyReport times each of its own hook calls (perf_counter around the call);
   overhead = time in its hooks / time of the training loop (first batch start to last batch end). This is precise
   even where (2) is noise.
2. *A/B*: training images/s without vs with EfficiencyReport, interleaved (the difference is expected to be
   within noise).

    python -m benchmarks.report_overhead [--rounds 5] [--batches 20] [--size 64]
"""

from __future__ import annotations

import argparse
import time
import warnings

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.harness import (
    Classifier,
    StepClock,
    comparison_table,
    interleave,
    markdown_table,
    random_images,
    write_results,
)
from lightning_efficient import ChannelsLast, EfficiencyReport, recommended_precision

HOOKS = ("on_train_epoch_start", "on_train_batch_start", "on_train_batch_end", "on_validation_end", "on_fit_start")


class TimedReport(EfficiencyReport):
    """EfficiencyReport that sums the seconds spent in its own per-step hooks."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.hook_seconds = 0.0
        for name in HOOKS:
            original = getattr(super(), name)

            def timed(*args, _original=original, **kwargs):
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.hook_seconds += time.perf_counter() - start

            setattr(self, name, timed)


def fit(with_report: bool, data: TensorDataset, args: argparse.Namespace) -> tuple[float, float]:
    """Returns (images/s over the steady-state batches, hook seconds / step seconds)."""
    torch.manual_seed(0)
    clock = StepClock()
    callbacks = [ChannelsLast(), clock]
    report = TimedReport(verbose=False, log_every_n_steps=10) if with_report else None
    if report is not None:
        callbacks.append(report)
    trainer = pl.Trainer(
        max_epochs=1,
        limit_train_batches=args.batches,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        precision=recommended_precision("cpu"),
        callbacks=callbacks,
    )
    trainer.fit(Classifier(), DataLoader(data, batch_size=args.batch_size))
    total = sum(row[0] for row in clock.rows)
    rate = clock.images_per_s(2)
    share = report.hook_seconds / total if report is not None else 0.0
    return rate, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    data = random_images(args.batches * args.batch_size, args.size)
    shares: list[float] = []

    def with_report() -> float:
        rate, share = fit(True, data, args)
        shares.append(share)
        return rate

    comp = interleave(
        {"without EfficiencyReport": lambda: fit(False, data, args)[0], "with EfficiencyReport": with_report},
        rounds=args.rounds,
        warmup=1,
    )
    shares = shares[1:]  # drop the warm-up round
    share_rows = [
        (f"{100 * min(shares):.3f}%", f"{100 * sorted(shares)[len(shares) // 2]:.3f}%", f"{100 * max(shares):.3f}%")
    ]
    body = (
        f"ResNet-18, {args.size} px, batch {args.batch_size}, {args.batches} batches per fit, precision "
        f"`{recommended_precision('cpu')}`, ChannelsLast, in-memory data.\n\n"
        "Time inside EfficiencyReport's hooks as a share of the training loop (target: under 1%):\n\n"
        + markdown_table(("min", "median", "max"), share_rows)
        + "\n\nTraining images/s without vs with the report (interleaved):\n\n"
        + comparison_table(comp, "images/s")
        + "\n"
    )
    path = write_results(
        "report_overhead",
        "EfficiencyReport overhead",
        body,
        {"args": vars(args), "hook_share": shares, "values": comp.values},
    )
    print(body)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
