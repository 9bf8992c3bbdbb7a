"""EfficiencyReport: where the step time goes, and what to change."""

from __future__ import annotations

import json
import math
from typing import Any, Optional, Union

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.data import extract_batch_size
from torch.utils.data import DataLoader, Subset
from torchvision.datasets import DatasetFolder

from lightning_efficient.callbacks.base import LIGHTNING_PACKAGES, Callback
from lightning_efficient.callbacks.roles import role
from lightning_efficient.data.decode import is_pillow_simd
from lightning_efficient.data.loader import available_cpus, suggest_loader_kwargs
from lightning_efficient.doctor import machine_info
from lightning_efficient.functional.efficiency import (
    Check,
    RunFacts,
    StepTimer,
    checklist,
    process_rss_bytes,
    tune_hints,
    verdict,
)
from lightning_efficient.functional.layout import is_channels_last
from lightning_efficient.functional.timing import Clock, CudaEventClock, HostClock, StepTimeline
from lightning_efficient.pipeline import get_pipeline, watch_fetch
from lightning_efficient.precision import recommended_precision
from lightning_efficient.tune_result import RECENT, TuneResult, arch_key, cache_dir

_CPU_AUGMENTATIONS = (
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


class EfficiencyReport(Callback):
    """Measure data wait, compute time, images/s and peak memory per training step; report what to change.

    Per training batch it measures (see :mod:`lightning_efficient.functional.timing` for the exact intervals):
    the time waiting for data (around the fetch from the DataLoader, host time), the time in this package's
    on-device batch transforms (the :class:`~lightning_efficient.pipeline.BatchPipeline` stages of GPUDecode,
    GPUAugmentation, ChannelsLast), the compute time (``on_train_batch_start`` to ``on_train_batch_end``), and the
    rest of the step (batch transfer, hooks, other callbacks' work between steps, e.g. checkpoints; shown when at
    least 5% of the step). On the CPU these are host seconds. On CUDA the step, transforms and compute are read
    from CUDA events recorded on the current stream, i.e. device time, and nothing synchronizes while training
    runs (the events are read a step or two later). Every ``log_every_n_steps`` batches it logs
    ``efficiency/images_per_s``, ``efficiency/data_wait_share`` and ``efficiency/step_time_s`` to the Trainer's
    loggers; at the end of fit it prints one table (rank zero only; under DDP the figures of all ranks are
    gathered: images/s summed, shares pooled, peak memory per device) and a checklist of the practices with
    concrete advice. Its overhead is measured in ``benchmarks/results/report_overhead.md`` (CPU) and
    ``benchmarks/results/gpu/`` (CUDA).

    Callbacks tell the report what they do through
    :class:`~lightning_efficient.functional.efficiency.ReportsEfficiencyFacts` (an ``efficiency_facts()`` method).
    It works the same under a ``pytorch_lightning`` and a ``lightning.pytorch`` Trainer: it reads the Trainer only
    through attributes both have (``callbacks``, ``loggers``, ``lr_scheduler_configs``, ``train_dataloader``,
    ``strategy``), and ``extract_batch_size`` is a function of the batch alone.

    Args:
        log_every_n_steps: how often (in training batches) to log ``efficiency/*`` metrics; 0 disables it.
        skip_first: training batches at the start of fit left out of the figures (warm-up).
        verbose: print the report at the end of fit.
        clock: ``"auto"`` (CUDA events on a CUDA device, host seconds otherwise), ``"host"``, ``"cuda"``, or a
            :class:`~lightning_efficient.functional.timing.Clock` object (e.g. ``CudaEventClock(HostEvent)`` to run
            the CUDA code path on a CPU).
        tuned: the :class:`~lightning_efficient.TuneResult` the run's settings come from (``recipe(tune=...)``
            sets it). Without it the report looks for tune()'s newest decision for this model's architecture on
            this machine (this process's, else the cache's: ``tune_cache.decisions_for``). Where tune() decided a
            setting, the checklist quotes the measured ratio and never advises against it; without any, the
            report points to ``tune()`` where a setting's effect depends on the model and hardware.

    Raises:
        ValueError: a negative ``log_every_n_steps`` or ``skip_first``, or an unknown ``clock``.

    Example::

        report = EfficiencyReport()
        trainer = pl.Trainer(callbacks=[report])
        trainer.fit(model, datamodule=dm)
        report.summary()["images_per_s"]
    """

    def __init__(
        self,
        log_every_n_steps: int = 50,
        skip_first: int = 2,
        verbose: bool = True,
        clock: Union[str, Clock] = "auto",
        tuned: Any = None,
    ) -> None:
        if not isinstance(log_every_n_steps, int) or log_every_n_steps < 0:
            raise ValueError(f"EfficiencyReport(log_every_n_steps={log_every_n_steps!r}): expected an int >= 0.")
        if not isinstance(skip_first, int) or skip_first < 0:
            raise ValueError(f"EfficiencyReport(skip_first={skip_first!r}): expected an int >= 0.")
        if isinstance(clock, str) and clock not in ("auto", "host", "cuda"):
            raise ValueError(f"EfficiencyReport(clock={clock!r}): expected 'auto', 'host', 'cuda' or a Clock object.")
        if not isinstance(clock, str) and not all(
            callable(getattr(clock, m, None)) for m in ("mark", "ready", "wait", "seconds")
        ):
            raise ValueError(f"EfficiencyReport(clock={clock!r}): a Clock needs mark(), ready(), wait(), seconds().")
        self.log_every_n_steps = log_every_n_steps
        self.skip_first = skip_first
        self.verbose = verbose
        self.clock = clock
        self.tuned = tuned
        self.timer = StepTimer(skip_first=skip_first)
        self._timeline = StepTimeline(HostClock(), self.timer)
        self._figures: dict[str, Any] = {}
        self._checks: list[Check] = []
        self._hints: list[str] = []
        self._pipeline: Any = None
        self._inputs_channels_last: Optional[bool] = None
        self._cuda = False
        self._unwatch: Any = None
        self._between = ""
        self._per_loader: list[int] = []  # images of every training batch, per training loader

    # ---------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self.timer = StepTimer(skip_first=self.skip_first)
        self._per_loader = []
        self._inputs_channels_last = None
        self._cuda = pl_module.device.type == "cuda"
        self._timeline = StepTimeline(self._make_clock(), self.timer)
        self._unwatch = watch_fetch(trainer, self._timeline)
        if self._cuda:
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_epoch_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._follow_pipeline(trainer)
        self._timeline.restart()

    def on_validation_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        # Validation inside an epoch (val_check_interval < 1) is neither data wait nor training compute.
        self._timeline.restart()

    def on_train_batch_start(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", batch: Any, batch_idx: int
    ) -> None:
        self._timeline.batch_started()
        self._follow_pipeline(trainer)
        if self._inputs_channels_last is None:
            self._inputs_channels_last = _first_image_channels_last(batch)

    def on_train_batch_end(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loaders = trainer.train_dataloader  # the loaders as given: one, a list or dict, or a CombinedLoader
        counts = images_per_loader(batch, getattr(loaders, "iterables", loaders))
        if len(self._per_loader) != len(counts):
            self._per_loader = [0] * len(counts)
        self._per_loader = [a + b for a, b in zip(self._per_loader, counts, strict=True)]
        self._timeline.batch_ended(sum(counts))
        if self._cuda:  # the caching allocator's statistics: a host-side read, no synchronisation
            self.timer.peak_memory_bytes = torch.cuda.max_memory_allocated(pl_module.device)
        else:
            self.timer.peak_memory_bytes = max(self.timer.peak_memory_bytes, process_rss_bytes())
        if self.log_every_n_steps and self.timer.steps and self.timer.steps % self.log_every_n_steps == 0:
            figures = self.timer.as_dict()
            metrics = {f"efficiency/{k}": figures[k] for k in ("images_per_s", "data_wait_share", "step_time_s")}
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    def on_fit_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._timeline.drain(block=True)
        self._detach()
        self._figures = self._gather(trainer, pl_module)
        package = next((p for p in LIGHTNING_PACKAGES if isinstance(trainer, p.Trainer)), pl)
        # Trainer.callbacks: assigned by Lightning's _CallbackConnector, not declared on the class
        callbacks = trainer.callbacks  # type: ignore[attr-defined]
        busy = [type(c).__name__ for c in callbacks if role(c, package) in ("writes", "logs", "stops")]
        self._between = f" (callbacks that work between steps: {', '.join(busy)})" if busy else ""
        facts = self._facts(trainer, pl_module)
        self._checks = checklist(facts, self._figures["data_wait_share"])
        self._hints = tune_hints(facts, self._figures["data_wait_share"])
        if self.verbose and trainer.is_global_zero:
            print(self.report())

    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        self._detach()

    # ---------------------------------------------------------------- results
    def summary(self) -> dict[str, Any]:
        """The figures of the last fit: ``images_per_s``, ``data_wait_share``, ``transform_share``, ``other_share``,
        ``step_time_s`` (seconds per batch), ``peak_memory_mb`` (the largest over devices; CUDA
        ``max_memory_allocated`` or process RSS on CPU), ``peak_memory_mb_per_device`` (one per rank), ``clock``
        (``"cuda events"`` or ``"host"``), ``steps``, ``samples``, ``world_size``, ``verdict`` and ``checklist``
        (list of dicts). Empty before a fit has ended."""
        if not self._figures:
            return {}
        return {
            **self._figures,
            "verdict": verdict(self._figures["data_wait_share"]),
            "checklist": [c.__dict__.copy() for c in self._checks],
            "tune_hints": list(self._hints),
        }

    @property
    def checks(self) -> list[Check]:
        """The checklist of the last fit."""
        return list(self._checks)

    def report(self) -> str:
        """The report of the last fit as text: figures, verdict, then the checklist."""
        if not self._figures:
            return "EfficiencyReport: no fit has ended yet."
        f = self._figures
        rows = [
            ("training throughput", f"{f['images_per_s']:.1f} images/s"),
            ("step time", f"{1000 * f['step_time_s']:.1f} ms per batch"),
            ("waiting for data", f"{100 * f['data_wait_share']:.1f}% of step time"),
            ("on-device transforms", f"{100 * f['transform_share']:.1f}% of step time"),
            *[("other (transfer, hooks, callbacks)", f"{100 * f['other_share']:.1f}% of step time{self._between}")]
            * (f["other_share"] >= 0.05),
            ("peak memory", _memory_text(f, self._cuda)),
            ("measured", f"{f['steps']} batches, {f['samples']} samples (first {self.skip_first} skipped)"),
            *[("images per training loader", ", ".join(map(str, f["samples_per_loader"])) + " (every batch)")]
            * (len(f.get("samples_per_loader", ())) > 1),
        ]
        width = max(len(r[0]) for r in rows)
        lines = ["Efficiency report: " + verdict(f["data_wait_share"])]
        lines += [f"  {name:<{width}}  {value}" for name, value in rows]
        lines.append("  checklist:")
        lines += [f"    {c.line()}" for c in self._checks]
        if self._hints:
            lines.append("  worth measuring: " + "; ".join(self._hints[:-1]) + ".")
            lines.append(f"    {self._hints[-1]}.")
        return "\n".join(lines)

    # ---------------------------------------------------------------- helpers
    def _make_clock(self) -> Clock:
        if not isinstance(self.clock, str):
            return self.clock
        if self.clock == "cuda" or (self.clock == "auto" and self._cuda):
            if not self._cuda:
                raise ValueError(
                    "EfficiencyReport(clock='cuda') on a model that is not on a CUDA device; "
                    "use clock='auto' or 'host'."
                )
            return CudaEventClock()
        return HostClock()

    def _follow_pipeline(self, trainer: "pl.Trainer") -> None:
        """Time the stages of the batch pipeline of this fit (found once our callbacks have installed it)."""
        pipeline = get_pipeline(trainer)
        if pipeline is not self._pipeline:
            self._detach()
            if pipeline is not None:
                pipeline.add_clock(self._timeline)
            self._pipeline = pipeline

    def _detach(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._pipeline is not None:
            self._pipeline.remove_clock(self._timeline)
            self._pipeline = None

    def _gather(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> dict[str, Any]:
        t = self.timer
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
        per_loader = torch.tensor(self._per_loader or [0], dtype=torch.float64)
        if trainer.world_size > 1:
            per_loader = trainer.strategy.all_gather(per_loader.to(device)).reshape(-1, per_loader.numel()).cpu()
        total = wait + transform + compute + other
        pooled = float(total.sum())
        per_rank_rate = torch.where(total > 0, samples / total.clamp_min(1e-12), torch.zeros_like(total))
        return {
            "clock": "cuda events" if isinstance(self._timeline.clock, CudaEventClock) else "host",
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

    def _facts(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> RunFacts:
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
        loader = _train_loader(trainer)
        dataset = _unwrap_dataset(loader.dataset) if loader is not None else None
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
            inputs_channels_last=self._inputs_channels_last,
            lr_per_step=all(c.interval == "step" for c in configs) if configs else None,
            cpu_augmentation=_cpu_augmentations(dataset),
            num_workers=loader.num_workers if loader is not None else None,
            cpu_cores=max(1, cores // processes),
            suggested_workers=suggested,
            pin_memory=loader.pin_memory if loader is not None else None,
            persistent_workers=loader.persistent_workers if loader is not None else None,
            pillow_simd=is_pillow_simd(),
            decodes_images=isinstance(dataset, DatasetFolder),
            epochs=max(1, trainer.current_epoch),
            tuned=self.tuned
            if self.tuned is not None
            else decisions_for(pl_module, getattr(loader, "batch_size", None)),
        )
        # the ReportsEfficiencyFacts protocol; Trainer.callbacks is assigned by Lightning, not declared on the class
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            facts = getattr(callback, "efficiency_facts", None)
            if callable(facts):
                observed.update(facts())
        return RunFacts(**observed)


def _memory_text(figures: dict[str, Any], cuda: bool) -> str:
    per_device = figures.get("peak_memory_mb_per_device") or [figures["peak_memory_mb"]]
    kind = "CUDA max_memory_allocated" if cuda else "process RSS"
    if len(per_device) == 1:
        return f"{per_device[0]:.0f} MiB ({kind})"
    return f"{max(per_device):.0f} MiB max ({kind}; per device: {', '.join(f'{m:.0f}' for m in per_device)} MiB)"


def _first_image_channels_last(batch: Any) -> Optional[bool]:
    """Whether the first 4-D floating-point tensor in ``batch`` is channels_last (None: there is none)."""
    from lightning_utilities.core.apply_func import apply_to_collection

    found: list[torch.Tensor] = []
    apply_to_collection(
        batch, torch.Tensor, lambda t: found.append(t) if t.dim() == 4 and t.is_floating_point() else None
    )
    if not found:
        return None
    return is_channels_last(found[0])


def _train_loader(trainer: "pl.Trainer") -> Optional[DataLoader]:
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


def _unwrap_dataset(dataset: Any) -> Any:
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return dataset


def _cpu_augmentations(dataset: Any) -> tuple[str, ...]:
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
        if type(t).__name__ in _CPU_AUGMENTATIONS:
            found.append(type(t).__name__)
    return tuple(found)


def decisions_for(module: torch.nn.Module, batch_size: Optional[int] = None) -> Optional[TuneResult]:
    """tune()'s newest result for a network of ``module``'s architecture (:func:`arch_key`) on this machine, at
    ``batch_size`` images per batch where given: this process's, else the cache's; ``None`` if none. EfficiencyReport
    quotes it, so that its advice never contradicts what tune() measured, however the user applied the choice."""
    key, here = arch_key(module), machine_info()

    def same(r: TuneResult) -> bool:
        sized = batch_size in (None, r.baseline.batch_size) or not r.baseline.batch_size  # 0: not known
        return r.arch == key and r.machine == here and sized

    found = [((math.inf, i), r) for i, r in enumerate(RECENT) if same(r)]
    for path in cache_dir().glob("*.json"):
        try:
            result = TuneResult.from_dict(json.loads(path.read_text())["result"])
            if same(result):
                found.append(((path.stat().st_mtime, 0), result))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return max(found, key=lambda f: f[0])[1] if found else None


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
