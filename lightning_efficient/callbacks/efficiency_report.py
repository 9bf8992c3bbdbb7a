"""EfficiencyReport: where the step time goes, and what to change."""

from __future__ import annotations

from typing import Any, Optional, Union

import pytorch_lightning as pl
import torch

from lightning_efficient.adapter import Callback
from lightning_efficient.callbacks.report_facts import (
    collect_facts,
    first_image_channels_last,
    gather,
    images_per_loader,
    memory_text,
    step_label,
    working_between_steps,
)
from lightning_efficient.fetch_timing import watch_fetch
from lightning_efficient.functional.check import Check
from lightning_efficient.functional.checklist import checklist
from lightning_efficient.functional.measurement import Measurement, process_rss_bytes
from lightning_efficient.functional.run_facts import verdict
from lightning_efficient.functional.timing import Clock, CudaEventClock, HostClock, StepTimeline
from lightning_efficient.functional.tune_advice import tune_hints
from lightning_efficient.pipeline import get_pipeline


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
    :class:`~lightning_efficient.functional.run_facts.ReportsEfficiencyFacts` (an ``efficiency_facts()`` method).
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
            sets it). Without it the report asks tune()'s store for the newest decision for this model's
            architecture on this machine (:func:`lightning_efficient.tuning.store.latest`). Where tune() decided a
            setting, the checklist quotes the measured ratio and never advises against it; without any, the
            report points to ``tune()`` where a setting's effect depends on the model and hardware.

    Raises:
        ValueError: a negative ``log_every_n_steps`` or ``skip_first``, or an unknown ``clock``.

    Example:
        ```python
        report = EfficiencyReport()
        trainer = pl.Trainer(callbacks=[report])
        trainer.fit(model, datamodule=dm)
        report.summary()["images_per_s"]
        ```
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
        self.timer = Measurement(skip_first=skip_first)
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
        self.timer = Measurement(skip_first=self.skip_first)
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
            self._inputs_channels_last = first_image_channels_last(batch)

    def on_train_batch_end(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loaders = trainer.train_dataloader  # the loaders as given: one, a list or dict, or a CombinedLoader
        counts = images_per_loader(batch, getattr(loaders, "iterables", loaders))
        if len(self._per_loader) != len(counts):
            self._per_loader = [0] * len(counts)
        self._per_loader = [a + b for a, b in zip(self._per_loader, counts, strict=True)]
        self._timeline.batch_ended(sum(counts), label=step_label(trainer))
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
        cuda_clock = isinstance(self._timeline.clock, CudaEventClock)
        self._figures = gather(trainer, pl_module, self.timer, self._per_loader, cuda_clock)
        busy = working_between_steps(trainer)
        self._between = f" (callbacks that work between steps: {', '.join(busy)})" if busy else ""
        facts = collect_facts(trainer, pl_module, self._inputs_channels_last, self.tuned, self.timer)
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
            ("peak memory", memory_text(f, self._cuda)),
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
