"""What EfficiencyReport reports, below the callback: the facts of a run (:func:`collect_facts`), the figures of
its :class:`~lightning_efficient.functional.measurement.Measurement` gathered over all ranks (:func:`gather`), the
images of each training loader (:func:`images_per_loader`). The callback only wires Lightning's hooks to these."""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Optional

import pytorch_lightning
import torch
from pytorch_lightning.utilities.data import extract_batch_size
from torch.utils.data import DataLoader, Subset
from torchvision.datasets import DatasetFolder

from lightning_efficient.adapter import LIGHTNING_PACKAGES
from lightning_efficient.callbacks.roles import Role, role
from lightning_efficient.data.decode import is_pillow_simd
from lightning_efficient.data.loader import available_cpus, suggest_loader_kwargs
from lightning_efficient.functional.batch import map_tensors
from lightning_efficient.functional.layout import is_channels_last
from lightning_efficient.functional.measurement import Measurement
from lightning_efficient.functional.run_facts import RunFacts
from lightning_efficient.precision import recommended_precision

#: How EfficiencyReport finds tune()'s newest result for a model when it is not handed one: ``(module,
#: batch_size) -> TuneResult | None``. tune() (a layer above the callbacks) registers its store's
#: :func:`lightning_efficient.tuning.store.latest` here when imported (``import lightning_efficient`` does);
#: empty: no lookup.
STORED_RESULT: list[Callable[[torch.nn.Module, Optional[int]], Any]] = []


def use_stored_results(lookup: Callable[[torch.nn.Module, Optional[int]], Any]) -> None:
    """Make ``lookup`` the way EfficiencyReport finds tune()'s stored result for a model (see
    :data:`STORED_RESULT`)."""
    STORED_RESULT[:] = [lookup]


def stored_result(module: torch.nn.Module, batch_size: Optional[int]) -> Any:
    """tune()'s newest result for ``module`` through the registered lookup, else ``None``."""
    return STORED_RESULT[0](module, batch_size) if STORED_RESULT else None


#: torchvision transforms that augment per image on the CPU (found in the training dataset's transform).
CPU_AUGMENTATIONS = (
    "AutoAugment",
    "RandAugment",
    "TrivialAugmentWide",
    "AugMix",
    "ColorJitter",
    "RandomResizedCrop",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "RandomRotation",
    "RandomAffine",
    "RandomErasing",
    "GaussianBlur",
    "RandomGrayscale",
    "RandomPerspective",
)


def gather(
    trainer: Any, pl_module: Any, t: Measurement, per_loader_images: list[int], cuda_clock: bool
) -> dict[str, Any]:
    """The figures of measurement ``t`` (and the images of each training loader) over all ranks: images/s summed,
    shares pooled, peak memory per device; ``cuda_clock``: the steps were timed by CUDA events."""
    local = torch.tensor(
        [t.steps, t.samples, t.data_wait_s, t.transform_s, t.compute_s, t.other_s, t.peak_memory_bytes],
        dtype=torch.float64,
    )
    if trainer.world_size > 1:
        device = pl_module.device if pl_module.device.type == "cuda" else torch.device("cpu")
        rows = trainer.strategy.all_gather(local.to(device)).reshape(-1, local.numel()).cpu()
    else:
        rows = local.reshape(1, -1)
    steps, samples, wait, transform, compute, other, peak = rows.unbind(1)
    per_loader = torch.tensor(per_loader_images or [0], dtype=torch.float64)
    if trainer.world_size > 1:
        per_loader = trainer.strategy.all_gather(per_loader.to(device)).reshape(-1, per_loader.numel()).cpu()
    total = wait + transform + compute + other
    pooled = float(total.sum())
    per_rank_rate = torch.where(total > 0, samples / total.clamp_min(1e-12), torch.zeros_like(total))
    return {
        "clock": "cuda events" if cuda_clock else "host",
        "peak_memory_mb_per_device": [float(p) / 2**20 for p in peak],
        "steps": int(steps.sum()),
        "samples": int(samples.sum()),
        "images_per_s": float(per_rank_rate.sum()) if pooled > 0 else math.nan,
        "data_wait_share": float(wait.sum()) / pooled if pooled > 0 else math.nan,
        "transform_share": float(transform.sum()) / pooled if pooled > 0 else math.nan,
        "other_share": float(other.sum()) / pooled if pooled > 0 else math.nan,
        "step_time_s": pooled / float(steps.sum()) if float(steps.sum()) > 0 else math.nan,
        "peak_memory_mb": float(peak.max()) / 2**20,
        "world_size": int(rows.shape[0]),
        "samples_per_loader": [int(n) for n in per_loader.reshape(-1, per_loader.shape[-1]).sum(0)],
    }


def collect_facts(
    trainer: Any, pl_module: Any, inputs_channels_last: Optional[bool], tuned: Any, measurement: Measurement
) -> RunFacts:
    """What the run did (:class:`~lightning_efficient.functional.run_facts.RunFacts`): observed on the Trainer,
    the module and the training loader, then what each callback reports itself (``efficiency_facts()``);
    ``tuned``: the TuneResult the run's settings come from, else the store's latest for this model. Under
    ProgressiveResize the images/s per side are ``measurement``'s, its steps labelled by side
    (:func:`step_label`): the same clock as every other figure of the report."""
    accelerator = pl_module.device.type
    convs = [
        p
        for m in pl_module.modules()
        if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d))
        for p in m.parameters(recurse=False)
        if p.dim() == 4
    ]
    model_cl = sum(is_channels_last(p) for p in convs) / len(convs) if convs else None
    configs = trainer.lr_scheduler_configs
    loader = train_loader(trainer)
    dataset = unwrap_dataset(loader.dataset) if loader is not None else None
    cores = available_cpus()
    processes = max(1, trainer.num_devices)
    suggested = suggest_loader_kwargs(
        processes_per_node=processes, cpus=cores, cuda=accelerator == "cuda", cpu_training=accelerator == "cpu"
    ).kwargs["num_workers"]
    observed: dict[str, Any] = dict(
        precision=str(trainer.precision),
        recommended_precision=recommended_precision(
            "cuda" if accelerator == "cuda" else ("mps" if accelerator == "mps" else "cpu")
        ),
        accelerator=accelerator,
        model_channels_last=model_cl,
        inputs_channels_last=inputs_channels_last,
        lr_per_step=all(c.interval == "step" for c in configs) if configs else None,
        cpu_augmentation=cpu_augmentations(dataset),
        num_workers=loader.num_workers if loader is not None else None,
        cpu_cores=max(1, cores // processes),
        suggested_workers=suggested,
        pin_memory=loader.pin_memory if loader is not None else None,
        persistent_workers=loader.persistent_workers if loader is not None else None,
        pillow_simd=is_pillow_simd(),
        decodes_images=isinstance(dataset, DatasetFolder),
        epochs=max(1, trainer.current_epoch),
        tuned=tuned if tuned is not None else stored_result(pl_module, getattr(loader, "batch_size", None)),
    )
    # the ReportsEfficiencyFacts protocol; Trainer.callbacks is assigned by Lightning, not declared on the class
    for callback in trainer.callbacks:
        facts = getattr(callback, "efficiency_facts", None)
        if callable(facts):
            observed.update(facts())
    if observed.get("image_side") is not None:  # ProgressiveResize: its steps labelled by side
        rates = [(side, m.images_per_s) for side, m in measurement.by_label().items() if isinstance(side, int)]
        observed["images_per_s_by_side"] = tuple(sorted((s, r) for s, r in rates if math.isfinite(r)))
    return RunFacts(**observed)


def step_label(trainer: Any) -> Optional[Hashable]:
    """The label of a training step in EfficiencyReport's measurement: the first ``efficiency_label()`` a
    callback gives (ProgressiveResize: the step's image side), else ``None``."""
    for callback in trainer.callbacks:
        label = getattr(callback, "efficiency_label", None)
        if callable(label):
            return label()
    return None


def working_between_steps(trainer: Any) -> list[str]:
    """The names of the run's callbacks that work between steps (they write, log or stop: :class:`Role`), the
    report's "other" share."""
    package = next((p for p in LIGHTNING_PACKAGES if isinstance(trainer, p.Trainer)), pytorch_lightning)
    busy = (Role.WRITES, Role.LOGS, Role.STOPS)
    return [type(c).__name__ for c in trainer.callbacks if role(c, package) in busy]


def memory_text(figures: dict[str, Any], cuda: bool) -> str:
    per_device = figures.get("peak_memory_mb_per_device") or [figures["peak_memory_mb"]]
    kind = "CUDA max_memory_allocated" if cuda else "process RSS"
    if len(per_device) == 1:
        return f"{per_device[0]:.0f} MiB ({kind})"
    return f"{max(per_device):.0f} MiB max ({kind}; per device: {', '.join(f'{m:.0f}' for m in per_device)} MiB)"


def first_image_channels_last(batch: Any) -> Optional[bool]:
    """Whether the first 4-D floating-point tensor in ``batch`` is channels_last (None: there is none)."""
    found: list[torch.Tensor] = []
    map_tensors(batch, torch.Tensor, lambda t: found.append(t) if t.dim() == 4 and t.is_floating_point() else None)
    if not found:
        return None
    return is_channels_last(found[0])


def train_loader(trainer: Any) -> Optional[DataLoader]:
    loaders = trainer.train_dataloader
    if isinstance(loaders, DataLoader):
        return loaders
    if isinstance(loaders, (list, tuple)) and loaders and isinstance(loaders[0], DataLoader):
        return loaders[0]
    if isinstance(loaders, dict):
        for value in loaders.values():
            if isinstance(value, DataLoader):
                return value
    return None


def unwrap_dataset(dataset: Any) -> Any:
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return dataset


def cpu_augmentations(dataset: Any) -> tuple[str, ...]:
    transform = getattr(dataset, "transform", None)
    found = []
    stack = [transform]
    while stack:
        t = stack.pop()
        if t is None:
            continue
        inner = getattr(t, "transforms", None)
        if isinstance(inner, (list, tuple)):
            stack.extend(reversed(inner))
        if type(t).__name__ in CPU_AUGMENTATIONS:
            found.append(type(t).__name__)
    return tuple(found)


def images_per_loader(batch: Any, iterables: Any) -> list[int]:
    """Images in a training ``batch``, per training loader: with several loaders (``trainer.fit(model, [a, b])``,
    a dict, or a ``CombinedLoader``) Lightning yields their batches in the structure the loaders were given in
    (``iterables``, ``trainer.train_dataloader.iterables``); each is counted with Lightning's
    ``extract_batch_size`` (one loader's batch: one count; a loader with nothing this step, or an exotic batch: 0)."""
    several = isinstance(iterables, (list, tuple, dict)) and len(iterables) > 1
    if several and isinstance(iterables, dict) and isinstance(batch, dict):
        parts = [batch.get(key) for key in iterables]
    elif several and isinstance(batch, (list, tuple)) and len(batch) == len(iterables):
        parts = list(batch)
    else:
        parts = [batch]
    counts = []
    for part in parts:
        try:
            counts.append(int(extract_batch_size(part)) if part is not None else 0)
        except Exception:  # noqa: BLE001 - an exotic batch: count steps, not samples
            counts.append(0)
    return counts
