"""TrivialAugment on CPU workers (torchvision, per image on PIL) vs on the device (ours, per sample on batches).

Three comparisons on real images (Imagenette, a fixed class-balanced subset; skipped cleanly when absent), each
interleaved A B A B ... by ``benchmarks.harness``:

1. **Augmentation only** (in-memory images, one process): A = torchvision ``TrivialAugmentWide`` per PIL image +
   ``ToTensor`` + ``Normalize`` in a Python loop (one core); B = ``GPUAugmentation.process`` on uint8 batches
   already on the device (``to_float`` + per-sample ``trivial_augment`` + ``normalize``). images/s.
2. **Input pipeline** (decode + crop + augment, no model): A = ``ImageFolder`` with ``RandomResizedCrop +
   TrivialAugmentWide + ToTensor + Normalize`` per image in DataLoader workers, batches moved to the device;
   B = ``FastImageFolder(train=True)`` (decode + RandomResizedCrop to uint8) + ``uint8_collate`` in the same
   number of workers, then the same device-side augmentation as in 1 in the main process. images/s.
3. **End-to-end training**: ResNet-18 (10 classes) through ``pl.Trainer``, the same precision (``bf16-mixed``) and
   ``ChannelsLast`` on both sides, so only where augmentation runs differs: A = pipeline A; B = pipeline B's
   loader + ``GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD)``; C = the ceiling: no
   input pipeline, eight in-memory uint8 batches cycled + ``GPUAugmentation`` (what the model step and device-side
   augmentation alone allow; neither A nor B can exceed it). images/s.

Timing. Workers deliver batches in waves (every worker finishes its batch at about the same time), so rates are
taken from the end of the first wave (batch ``workers``) to the end of the last batch of a run whose batch count
is a multiple of ``workers``. In 3, every ``fit`` runs two epochs with persistent workers and only the second is
timed: its loader starts empty (no batches buffered while the first step warmed up) and one-time costs (worker
start, cuDNN autotuning, oneDNN kernel choice) fall in epoch 1. On CUDA the clock synchronises the device at the
timed points.

On a CPU-only machine the "device" of B is the same CPU: B moves augmentation out of the worker processes into the
main process, where it competes with the model for the same cores. The comparison the design is for is on a GPU:
part c of ``benchmarks/gpu_suite.py``.

    python -m benchmarks.augmentation          # full run, 4-6 minutes on 2 idle cores; writes results/augmentation.md
    python -m benchmarks.augmentation --quick  # smoke run, under a minute; prints only (unless --out is given)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from benchmarks.harness import RESULTS, Comparison, comparison_table, interleave, write_results

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenette"


@dataclass
class Settings:
    """One benchmark configuration (CPU defaults).

    Attributes:
        device: ``"cpu"`` or ``"cuda"``; where B augments and the model trains.
        size: side of the square training crops, pixels.
        batch_size: images per batch.
        workers: DataLoader worker processes, the same for A and B.
        micro_images: images in the augmentation-only comparison (1).
        pipeline_batches: batches per input-pipeline measurement (2); rounded up to a multiple of ``workers``.
        fit_batches: training batches per epoch in the end-to-end comparison (3); rounded up likewise.
        rounds: measured rounds of comparisons 1 and 2.
        fit_rounds: measured rounds of comparison 3 (each round is one ``fit`` per variant).
        warmup: unmeasured runs of each variant before the rounds (1 and 2; in 3, epoch 1 of each fit warms up).
        precision: Lightning precision of both sides in 3.
        seed: seed of subsets, shuffling, model initialisation and augmentation.
    """

    device: str = "cpu"
    size: int = 112
    batch_size: int = 32
    workers: int = 2
    micro_images: int = 256
    pipeline_batches: int = 16
    fit_batches: int = 12
    rounds: int = 5
    fit_rounds: int = 3
    warmup: int = 1
    precision: str = "bf16-mixed"
    seed: int = 0

    def round_up(self, batches: int) -> int:
        """``batches`` rounded up to a multiple of ``workers``, at least two waves."""
        w = max(1, self.workers)
        return max(2 * w, -(-batches // w) * w)


QUICK = dict(
    size=64, batch_size=16, micro_images=32, pipeline_batches=4, fit_batches=4, rounds=1, fit_rounds=1, warmup=0
)


# ------------------------------------------------------------------------------------------------- helpers
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def cycled_indices(targets: list[int], n: int, seed: int) -> list[int]:
    """``n`` indices: a class-balanced subset when ``n`` fits the data, else seeded permutations repeated."""
    from lightning_efficient.data import balanced_subset

    if n <= len(targets):
        return balanced_subset(targets, n, seed)
    g = torch.Generator().manual_seed(seed)
    out: list[int] = []
    while len(out) < n:
        out += torch.randperm(len(targets), generator=g).tolist()
    return out[:n]


def cpu_worker_dataset(root: Path, size: int):
    """Pipeline A: torchvision's usual per-image training transform, as in torchvision's reference scripts."""
    from torchvision import datasets, transforms

    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD

    return datasets.ImageFolder(
        root,
        transforms.Compose(
            [
                transforms.RandomResizedCrop(size),
                transforms.TrivialAugmentWide(),
                transforms.ToTensor(),
                transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            ]
        ),
    )


def device_augmentation(seed: int):
    """Pipeline B's device side: exactly what the callback does to a training batch."""
    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD, GPUAugmentation

    return GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD, seed=seed)


def make_loader(dataset, indices: list[int], s: Settings, collate=None, persistent: bool = False):
    from torch.utils.data import DataLoader, Subset

    return DataLoader(
        Subset(dataset, indices),
        batch_size=s.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=s.workers,
        collate_fn=collate,
        pin_memory=s.device.startswith("cuda"),
        persistent_workers=persistent and s.workers > 0,
        generator=torch.Generator().manual_seed(s.seed),
    )


# ----------------------------------------------------------------------------------- 1. augmentation only
def micro_variants(root: Path, s: Settings) -> dict[str, Callable[[], float]]:
    from PIL import Image
    from torchvision import transforms
    from torchvision.datasets import ImageFolder
    from torchvision.transforms.v2 import functional as F

    from lightning_efficient import IMAGENET_MEAN, IMAGENET_STD
    from lightning_efficient.data import balanced_subset

    folder = ImageFolder(root)
    idx = balanced_subset(folder.targets, s.micro_images, s.seed)
    prep = transforms.Compose([transforms.Resize(s.size), transforms.CenterCrop(s.size)])
    pil = []
    for i in idx:
        with Image.open(folder.samples[i][0]) as im:
            pil.append(prep(im.convert("RGB")))
    per_image = transforms.Compose(
        [transforms.TrivialAugmentWide(), transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )
    batches = [
        torch.stack([F.pil_to_tensor(im) for im in pil[k : k + s.batch_size]]).to(s.device)
        for k in range(0, len(pil), s.batch_size)
    ]
    aug = device_augmentation(s.seed)

    def a() -> float:
        start = time.perf_counter()
        for im in pil:
            per_image(im)
        return len(pil) / (time.perf_counter() - start)

    def b() -> float:
        sync(s.device)
        start = time.perf_counter()
        for x in batches:
            aug.process(x, augment=True)
        sync(s.device)
        return len(pil) / (time.perf_counter() - start)

    return {"A: torchvision TrivialAugmentWide per PIL image": a, f"B: ours per batch on {s.device}": b}


# ------------------------------------------------------------------------------------- 2. input pipeline
def pipeline_rate(loader, consume: Callable[[Any], Any], s: Settings) -> float:
    """images/s from the end of the first wave of worker batches to the end of the last batch."""
    marks = []
    for i, batch in enumerate(loader):
        consume(batch)
        if i == max(1, s.workers) - 1 or i == len(loader) - 1:
            sync(s.device)
            marks.append((i, time.perf_counter()))
    (i0, t0), (i1, t1) = marks[0], marks[-1]
    return s.batch_size * (i1 - i0) / (t1 - t0)


def pipeline_variants(root: Path, s: Settings) -> dict[str, Callable[[], float]]:
    from lightning_efficient import FastImageFolder, uint8_collate

    a_set = cpu_worker_dataset(root, s.size)
    b_set = FastImageFolder(root, size=s.size, train=True)
    n = s.round_up(s.pipeline_batches) * s.batch_size
    idx = cycled_indices(a_set.targets, n, s.seed)
    aug = device_augmentation(s.seed)
    dev = torch.device(s.device)

    def to_device(batch):
        return batch[0].to(dev, non_blocking=True), batch[1].to(dev, non_blocking=True)

    def a() -> float:
        return pipeline_rate(make_loader(a_set, idx, s), to_device, s)

    def b() -> float:
        return pipeline_rate(make_loader(b_set, idx, s, uint8_collate), lambda bt: aug.process(to_device(bt)), s)

    return {
        "A: ImageFolder + TrivialAugmentWide in workers": a,
        f"B: FastImageFolder uint8 + ours on {s.device}": b,
    }


# ------------------------------------------------------------------------------------------ 3. end to end
def _classifier(num_classes: int):
    import pytorch_lightning as pl
    import torchvision

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = torchvision.models.resnet18(num_classes=num_classes)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)

    return Classifier()


def _epoch_clock(s: Settings):
    import pytorch_lightning as pl

    class EpochClock(pl.Callback):
        """Times the second epoch from the end of its first wave of worker batches to its last batch."""

        def __init__(self) -> None:
            self.marks: list[tuple[int, float]] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.current_epoch != 1:
                return
            if batch_idx == max(1, s.workers) - 1 or batch_idx == trainer.num_training_batches - 1:
                sync(s.device)
                self.marks.append((batch_idx, time.perf_counter()))

        def rate(self) -> float:
            (i0, t0), (i1, t1) = self.marks[0], self.marks[-1]
            return s.batch_size * (i1 - i0) / (t1 - t0)

    return EpochClock()


class _Batches:
    """A sized iterable of ready batches (a bare list would be read by Lightning as a list of dataloaders)."""

    def __init__(self, batches: list) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


def fit_variants(root: Path, s: Settings) -> dict[str, Callable[[], float]]:
    import pytorch_lightning as pl

    from lightning_efficient import ChannelsLast, FastImageFolder, uint8_collate

    a_set = cpu_worker_dataset(root, s.size)
    b_set = FastImageFolder(root, size=s.size, train=True)
    batches = s.round_up(s.fit_batches)
    idx = cycled_indices(a_set.targets, batches * s.batch_size, s.seed)
    num_classes = len(a_set.classes)
    # C, the ceiling: no input pipeline at all. Eight uint8 batches of random pixels held in (pinned) memory, cycled;
    # the model step and GPUAugmentation are all that is left, so A and B cannot exceed it.
    g = torch.Generator().manual_seed(s.seed)
    distinct = []
    for _ in range(min(8, batches)):
        x = torch.randint(0, 256, (s.batch_size, 3, s.size, s.size), dtype=torch.uint8, generator=g)
        y = torch.randint(0, num_classes, (s.batch_size,), generator=g)
        distinct.append((x.pin_memory(), y.pin_memory()) if s.device.startswith("cuda") else (x, y))
    ceiling_batches = _Batches([distinct[k % len(distinct)] for k in range(batches)])

    def fit(kind: str) -> float:
        pl.seed_everything(s.seed, workers=True, verbose=False)
        clock = _epoch_clock(s)
        callbacks: list[pl.Callback] = [clock, ChannelsLast()]
        if kind == "B":
            callbacks.append(device_augmentation(s.seed))
            loader = make_loader(b_set, idx, s, uint8_collate, persistent=True)
        elif kind == "C":
            callbacks.append(device_augmentation(s.seed))
            loader = ceiling_batches
        else:
            loader = make_loader(a_set, idx, s, persistent=True)
        trainer = pl.Trainer(
            max_epochs=2,
            limit_train_batches=batches,
            accelerator="gpu" if s.device.startswith("cuda") else "cpu",
            devices=1,
            precision=s.precision,
            callbacks=callbacks,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            benchmark=True if s.device.startswith("cuda") else None,
        )
        trainer.fit(_classifier(num_classes), loader)
        rate = clock.rate()
        iterator = getattr(loader, "_iterator", None)  # persistent workers: stop them before the next variant
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        del trainer, loader
        gc.collect()
        return rate

    return {
        "A: TrivialAugmentWide in workers": lambda: fit("A"),
        "B: GPUAugmentation (uint8 loader)": lambda: fit("B"),
        "C: ceiling, no loader (in-memory uint8 + GPUAugmentation)": lambda: fit("C"),
    }


# ---------------------------------------------------------------------------------------------------- run
def find_data(arg: Optional[str]) -> Optional[Path]:
    """The Imagenette ``train`` folder: ``--data`` if given, else ``../shared/data/imagenette`` (or
    ``./shared/data/imagenette``); ``None`` when absent."""
    candidates = [Path(arg)] if arg else [DATA, Path.cwd() / "shared" / "data" / "imagenette"]
    for c in candidates:
        c = c.expanduser()
        if (c / "train").is_dir():
            return c / "train"
        if c.is_dir() and c.name == "train":
            return c
    return None


def describe(s: Settings) -> str:
    return (
        f"device {s.device}, {s.size} px, batch {s.batch_size}, {s.workers} DataLoader workers (both sides), "
        f"precision `{s.precision}` + ChannelsLast (both sides, end-to-end)"
    )


def run(
    s: Settings,
    root: Path,
    name: str,
    title: str,
    out: Optional[Path],
    note: str = "",
    target: Optional[float] = None,
    data_note: str = "",
) -> dict:
    """Run the three comparisons, print their tables, and write ``<out>/<name>.md/.json`` when ``out`` is set."""
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*(GPU available but not used|TPU available|HPU available).*")
    torch.manual_seed(s.seed)
    print(f"[augmentation] {describe(s)}; data {root}", flush=True)
    sections: dict[str, tuple[str, Comparison]] = {}
    t0 = time.perf_counter()
    print("1. augmentation only (in-memory images)", flush=True)
    sections["micro"] = ("images/s", interleave(micro_variants(root, s), rounds=s.rounds, warmup=s.warmup))
    print("2. input pipeline (decode + crop + augment, no model)", flush=True)
    sections["pipeline"] = ("images/s", interleave(pipeline_variants(root, s), rounds=s.rounds, warmup=s.warmup))
    print("3. end-to-end ResNet-18 training through pl.Trainer", flush=True)
    sections["fit"] = ("images/s", interleave(fit_variants(root, s), rounds=s.fit_rounds, warmup=0))
    wall = time.perf_counter() - t0

    headings = {
        "micro": f"1. Augmentation only: {s.micro_images} in-memory images",
        "pipeline": f"2. Input pipeline: {s.round_up(s.pipeline_batches)} batches per measurement",
        "fit": f"3. End-to-end ResNet-18 training: {s.round_up(s.fit_batches)} batches per epoch, epoch 2 timed",
    }
    parts, summary = [], {}
    for key, (unit, comp) in sections.items():
        table = comparison_table(comp, unit)
        parts.append(f"### {headings[key]}\n\n{table}\n")
        summary[key] = {n: comp.summary(n) for n in comp.names}
        print(f"\n{headings[key]}\n{table}")
    fit_comp = sections["fit"][1]
    e2e = statistics.median(fit_comp.ratios(fit_comp.names[1]))
    a_name, b_name, c_name = fit_comp.names
    ceiling = fit_comp.median(c_name)
    verdict = (
        f"End-to-end B/A = {e2e:.2f}x (median of per-round ratios). Share of the no-loader ceiling C "
        f"({ceiling:.0f} images/s): A {fit_comp.median(a_name) / ceiling:.0%}, "
        f"B {fit_comp.median(b_name) / ceiling:.0%}."
    )
    if target is not None:
        verdict += f" Target B/A >= {target:.1f}x: {'met' if e2e >= target else 'NOT met'}."
    print("\n" + verdict)
    print(f"\n[augmentation] total {wall:.0f} s")
    body = (
        f"Settings: {describe(s)}; {s.rounds} interleaved rounds (1, 2) after {s.warmup} warm-up, "
        f"{s.fit_rounds} rounds (3). Data: {data_note or root}.\n\n"
        + "\n".join(parts)
        + f"\n{verdict}\n"
        + (f"\n{note}\n" if note else "")
        + f"\nTotal benchmark wall time {wall:.0f} s. Method: see the docstring of `benchmarks/augmentation.py`.\n"
    )
    data = {
        "settings": asdict(s),
        "data": str(data_note or root),
        "values": {k: c.values for k, (_, c) in sections.items()},
        "summary": summary,
        "end_to_end_ratio_median": e2e,
        "target": target,
        "wall_s": wall,
    }
    if out is not None:
        path = write_results(name, title, body, data, results_dir=out)
        print(f"wrote {path}")
    return data


CPU_NOTE = (
    'How to read this on a CPU-only machine: B\'s "device" is the same CPU. B takes the augmentation out of the '
    "worker processes and runs it in the main process, where it competes with ResNet-18's forward and backward "
    "pass for the same cores, while A overlaps it with training in separate processes. So (3) shows what the "
    "placement costs or saves when there is no accelerator; it says nothing about a GPU, where B's work runs on "
    "otherwise idle silicon. That comparison is part c of `benchmarks/gpu_suite.py`. In (1) A is one "
    "single-threaded Python loop and B uses torch's intra-op threads (all cores), so per-core cost is A's rate vs "
    "B's rate divided by the core count. C (no loader, no workers) is the most the model step allows here. Run it "
    "on an otherwise idle machine: under CPU contention B's multi-threaded tensor operations slow down far more "
    "than A's single-threaded PIL work (OpenMP threads wait for each other)."
)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run, under a minute (tiny sizes, 1 round)")
    parser.add_argument("--data", help="Imagenette root (with train/); default ../shared/data/imagenette")
    parser.add_argument("--out", help=f"results folder (default {RESULTS}; --quick writes only when given)")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--size", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--fit-rounds", type=int)
    parser.add_argument("--precision")
    args = parser.parse_args(argv)
    root = find_data(args.data)
    if root is None:
        print(
            "[augmentation] skipped: Imagenette not found (expected ../shared/data/imagenette/train; pass --data DIR)."
        )
        return 0
    s = Settings(**(QUICK if args.quick else {}))
    for field in ("workers", "size", "batch_size", "rounds", "fit_rounds", "precision"):
        if getattr(args, field) is not None:
            setattr(s, field, getattr(args, field))
    out = Path(args.out) if args.out else (None if args.quick else RESULTS)
    run(
        s,
        root,
        "augmentation",
        "TrivialAugment: CPU workers vs on the device (CPU-only machine)",
        out,
        note=CPU_NOTE,
        data_note=f"Imagenette train ({root}), fixed class-balanced subset",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
