"""StepwiseLR: run the epoch-interval LR schedulers of a LightningModule at every optimizer step."""

from __future__ import annotations

import math
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning import Callback
from pytorch_lightning.core.optimizer import LightningOptimizer
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from lightning_efficient.functional import schedules as F

__all__ = ["StepwiseLR"]


class _StepwiseScheduler(LRScheduler):
    """Stands in for an epoch-interval scheduler in ``trainer.lr_scheduler_configs``; LR set per update.

    ``step()`` is a no-op: Lightning (automatic optimization) or the user (manual optimization) may call it,
    the callback sets the LRs (:meth:`apply`). So the ``step()`` that ``LRScheduler.__init__`` makes leaves the
    optimizer's LRs alone. Position in scheduler epochs of the next update of this optimizer::

        epoch_offset + (epoch + updates_in_epoch / S) / frequency

    where ``epoch`` is the Trainer's current epoch, ``updates_in_epoch`` counts this optimizer's updates in it
    and ``S`` is the optimizer steps per epoch. ``updates_in_epoch / S`` is capped at 1 (an epoch longer than
    ``S`` holds the boundary LR until it ends).
    """

    def __init__(self, scheduler: LRScheduler, fn: F.ScheduleFn, frequency: int) -> None:
        # step() is a no-op, so this keeps the LRs. base_lrs = the groups' "initial_lr", which the scheduler
        # wrapped here set (SequentialLR / ChainedScheduler: their children).
        super().__init__(scheduler.optimizer)
        self.scheduler = scheduler
        self.fn = fn
        self.frequency = frequency
        self.epoch_offset = max(int(getattr(scheduler, "last_epoch", 0)), 0)  # ChainedScheduler has none
        self.epoch = 0
        self.updates_in_epoch = 0
        self.updates = 0
        self.steps_per_epoch: int | None = None
        self.last_epoch = self.epoch_offset
        self.last_lrs = [group["lr"] for group in self.optimizer.param_groups]
        self._held_warned = False

    # ---------------------------------------------------------------- called by the callback
    def position(self, updates_in_epoch: int | None = None) -> float:
        """Fractional scheduler epoch of update number ``updates_in_epoch`` (default: the next one)."""
        j = self.updates_in_epoch if updates_in_epoch is None else updates_in_epoch
        assert self.steps_per_epoch is not None
        within = min(j / self.steps_per_epoch, 1.0)
        if self.frequency == 1:
            return self.epoch_offset + self.epoch + within
        return self.epoch_offset + (self.epoch + within) / self.frequency

    def apply(self) -> list[float]:
        """Write the LR of the next update into the param groups (and ``get_last_lr()``)."""
        lrs = self.fn(self.position())
        for group, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        self.last_lrs = list(lrs)
        self.last_epoch = math.floor(self.position())
        return lrs

    def start_epoch(self, epoch: int, steps_per_epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.updates_in_epoch = 0
        self.steps_per_epoch = steps_per_epoch

    def advance(self) -> None:
        self.updates += 1
        self.updates_in_epoch += 1
        if self.updates_in_epoch > self.steps_per_epoch and not self._held_warned:  # type: ignore[operator]
            self._held_warned = True
            rank_zero_warn(
                f"StepwiseLR: epoch {self.epoch} has more than steps_per_epoch={self.steps_per_epoch} optimizer "
                "steps; the LR holds at the next epoch's value until the epoch ends. Set "
                "StepwiseLR(steps_per_epoch=...) to the real number of optimizer steps per epoch."
            )

    # ---------------------------------------------------------------- LRScheduler API
    def step(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102 - no-op by design
        return None

    def get_lr(self) -> list[float]:
        return list(self.last_lrs)

    def get_last_lr(self) -> list[float]:
        return list(self.last_lrs)

    def state_dict(self) -> dict[str, Any]:
        return {
            "stepwise_lr": 1,
            "scheduler": self.scheduler.state_dict(),
            "epoch_offset": self.epoch_offset,
            "epoch": self.epoch,
            "updates_in_epoch": self.updates_in_epoch,
            "updates": self.updates,
            "frequency": self.frequency,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "stepwise_lr" not in state_dict:
            # a checkpoint written without StepwiseLR: the original scheduler's state, stepped once per
            # (frequency) epochs; resume at the start of the epoch it had reached.
            self.scheduler.load_state_dict(state_dict)
            self.epoch_offset = 0
            self.epoch = -1  # start_epoch() resets the in-epoch counter for whatever epoch comes next
            self.updates_in_epoch = 0
            return
        self.scheduler.load_state_dict(state_dict["scheduler"])
        self.epoch_offset = int(state_dict["epoch_offset"])
        self.epoch = int(state_dict["epoch"])
        self.updates_in_epoch = int(state_dict["updates_in_epoch"])
        self.updates = int(state_dict["updates"])
        self.frequency = int(state_dict.get("frequency", self.frequency))

    def __repr__(self) -> str:
        return f"_StepwiseScheduler({type(self.scheduler).__name__}, updates={self.updates})"


class StepwiseLR(Callback):
    r"""Run the LightningModule's epoch-interval LR schedulers at every optimizer step.

    Each scheduler configured with ``"interval": "epoch"`` (Lightning's default) and a known closed form is
    replaced, in ``on_fit_start``, by a wrapper that sets the LR of every optimizer update from the
    scheduler's closed form in fractional epochs
    (:func:`lightning_efficient.functional.schedules.schedule_function`): the update with 0-based index
    ``k`` uses ``f(k / S)``, where ``S = ceil(trainer.num_training_batches / accumulate_grad_batches)`` is the
    number of optimizer steps per epoch on this process (after ``limit_train_batches`` and the
    DistributedSampler). At every epoch boundary ``k = e * S`` the LR equals the LR the unconverted scheduler
    uses in epoch ``e``; the first update uses ``f(0)``; each param group keeps its own base LR. The wrapper
    is listed with ``"interval": "step"`` so :class:`~pytorch_lightning.callbacks.LearningRateMonitor` logs
    the per-step LR, and its ``step()`` does nothing (calling it, as Lightning and manual-optimization code
    do, is harmless).

    Supported exactly: ``StepLR``, ``MultiStepLR``, ``ConstantLR``, ``LinearLR``, ``ExponentialLR``,
    ``CosineAnnealingLR``, ``PolynomialLR``, ``CosineAnnealingWarmRestarts``, ``LambdaLR`` (its functions
    called with fractional epochs; a function that fails for a float keeps epoch resolution, with a warning),
    ``MultiplicativeLR`` (each epoch's factor spread geometrically over its steps), and ``SequentialLR`` /
    ``ChainedScheduler`` of these, nested (PyTorch's composition quirks reproduced; not supported: a
    ``MultiplicativeLR`` after the first phase of a ``SequentialLR``, a ``SequentialLR`` inside a
    ``ChainedScheduler``). Left as they are, with one log line each: schedulers already at
    ``"interval": "step"``, ``ReduceLROnPlateau``, ``OneCycleLR``/``CyclicLR`` and classes without a
    converter (register one with :func:`~lightning_efficient.functional.schedules.register_schedule`).

    Details and policies:

    - **Epoch length.** ``S`` is recomputed at every epoch start; the position in epochs is
      ``current_epoch + (updates this epoch) / S``, so every epoch boundary is exact even if ``S`` changes
      (e.g. dataloaders reloaded with another length). An epoch longer than ``S`` holds the boundary LR.
    - **Gradient accumulation.** One update per ``accumulate_grad_batches`` batches; a partial last window
      is one more update (``ceil``), as Lightning steps the optimizer at the last batch of an epoch.
    - **frequency.** ``"frequency": n`` (scheduler stepped every ``n`` epochs) becomes ``f(k / (n S))``.
    - **Skipped steps.** The schedule advances on every optimizer-step *attempt*
      (``on_before_optimizer_step``), including steps the ``16-mixed`` GradScaler skips after an inf/NaN
      gradient, exactly like ``trainer.global_step``. No scheduler ``step()`` runs, so PyTorch's
      "``lr_scheduler.step()`` before ``optimizer.step()``" warning cannot occur.
    - **Manual optimization.** Every scheduler advances once per update of its own optimizer
      (``on_before_optimizer_step`` is called from ``LightningOptimizer.step``); ``S`` assumes one update per
      optimizer per batch (``num_training_batches``) unless ``steps_per_epoch`` is given.
    - **Resuming.** Progress lives in the wrappers, which Lightning saves under ``lr_schedulers`` in the
      checkpoint and restores after ``on_fit_start``; a run resumed from an end-of-epoch or mid-epoch
      checkpoint continues the same LR sequence. A checkpoint written without this callback resumes at the
      start of the epoch its scheduler had reached.
    - **Horizon.** A warning when the run is longer than the schedule (``CosineAnnealingLR.T_max``,
      ``PolynomialLR.total_iters``, ...). :class:`~lightning_efficient.functional.schedules.EpochSchedule`
      functions (e.g. ``warmup_cosine(warmup_epochs=5)``) with ``total_epochs=None`` get the run length in
      epochs (fractional if ``max_steps`` ends mid-epoch) through
      :meth:`~lightning_efficient.functional.schedules.EpochSchedule.follow_run`.
    - **Between updates** the param groups hold the LR of the coming update (PyTorch's convention).

    Why per step: measured effect on accuracy in ``benchmarks/results/schedule_accuracy.md``
    (``benchmarks/schedule_accuracy.py``).

    Args:
        steps_per_epoch: optimizer steps per epoch (``S``), overriding the one computed from the Trainer.
            Required for dataloaders without ``__len__`` (``IterableDataset``). ``None``: computed.
        verbose: log one line per scheduler (what is converted or left alone). Warnings are always shown.

    Raises:
        ValueError: ``steps_per_epoch`` is not a positive int; in ``on_train_start``, the train dataloader
            has no length and ``steps_per_epoch`` was not given (before the first optimizer step).
        TypeError: ``verbose`` is not a bool.

    Example::

        from torch.optim.lr_scheduler import CosineAnnealingLR
        from lightning_efficient import StepwiseLR

        class Model(pl.LightningModule):
            def configure_optimizers(self):
                opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
                return {"optimizer": opt, "lr_scheduler": CosineAnnealingLR(opt, T_max=30)}  # in epochs

        trainer = pl.Trainer(max_epochs=30, callbacks=[StepwiseLR()])  # cosine over all 30 * S steps
    """

    def __init__(self, steps_per_epoch: int | None = None, verbose: bool = True) -> None:
        if steps_per_epoch is not None and (
            isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1
        ):
            raise ValueError(
                f"StepwiseLR(steps_per_epoch=...) must be a positive int (optimizer steps per epoch) or None, "
                f"got {steps_per_epoch!r}."
            )
        if not isinstance(verbose, bool):
            raise TypeError(f"StepwiseLR(verbose=...) must be a bool, got {type(verbose).__name__}.")
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._wrappers: list[_StepwiseScheduler] = []
        self._by_optimizer: dict[int, list[_StepwiseScheduler]] = {}
        self._current_steps_per_epoch: int | None = None

    # ------------------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._wrappers = []
        self._by_optimizer = {}
        for index, config in enumerate(trainer.lr_scheduler_configs):
            scheduler = config.scheduler
            name = f"{type(scheduler).__name__} (lr_scheduler {index})"
            if isinstance(scheduler, _StepwiseScheduler):
                self._track(scheduler)
                continue
            if config.interval != "epoch":
                self._info(f"StepwiseLR: {name} already runs at interval={config.interval!r}; left as it is.")
                continue
            if config.reduce_on_plateau:
                self._info(f"StepwiseLR: {name} reacts to a metric; left as it is (stepped per epoch).")
                continue
            try:
                fn = F.schedule_function(scheduler)
            except F.UnsupportedSchedulerError as err:
                rank_zero_warn(f"StepwiseLR: {name} left as it is (stepped per epoch): {err}")
                continue
            wrapper = _StepwiseScheduler(scheduler, fn, frequency=int(config.frequency))
            config.scheduler = wrapper
            config.interval = "step"
            config.frequency = 1
            self._track(wrapper)
            per = "" if wrapper.frequency == 1 else f" (stepped every {wrapper.frequency} epochs)"
            self._info(f"StepwiseLR: {name}{per} LR now set at every optimizer step from its "
                       "schedule in fractional epochs.")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._wrappers:
            return
        steps = self._current_steps_per_epoch = self._compute_steps_per_epoch(trainer)
        self._bind_horizons(trainer, steps)
        for wrapper in self._wrappers:
            wrapper.start_epoch(trainer.current_epoch, steps)
            wrapper.apply()
        self._info(f"StepwiseLR: {steps} optimizer steps per epoch.")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._wrappers:
            return
        steps = self._current_steps_per_epoch = self._compute_steps_per_epoch(trainer)
        for wrapper in self._wrappers:
            wrapper.start_epoch(trainer.current_epoch, steps)
            wrapper.apply()

    @property
    def current_steps_per_epoch(self) -> int | None:
        """S in use: optimizer steps per epoch on this process for the current (or last) epoch; None before
        ``on_train_start`` or when no scheduler was converted."""
        return self._current_steps_per_epoch

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Optimizer
    ) -> None:
        raw = optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
        for wrapper in self._by_optimizer.get(id(raw), ()):
            wrapper.apply()  # the LR of this update (again: something may have changed it since)
            wrapper.advance()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        for wrapper in self._wrappers:
            wrapper.apply()  # LR of the next update, visible to anyone reading param_groups until then

    # ------------------------------------------------------------------------- state
    def efficiency_facts(self) -> dict[str, Any]:
        """For :class:`~lightning_efficient.EfficiencyReport`: every converted scheduler steps per optimizer step."""
        return {"lr_per_step": True} if self._wrappers else {}

    def state_dict(self) -> dict[str, Any]:
        # Per-scheduler progress is in the wrappers (saved by Lightning under "lr_schedulers").
        return {"steps_per_epoch": self.steps_per_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.steps_per_epoch is None:
            self.steps_per_epoch = state_dict.get("steps_per_epoch")

    # ------------------------------------------------------------------------- helpers
    @property
    def schedulers(self) -> list[_StepwiseScheduler]:
        """The wrappers installed by this callback (empty before ``on_fit_start``)."""
        return list(self._wrappers)

    def _track(self, wrapper: _StepwiseScheduler) -> None:
        self._wrappers.append(wrapper)
        self._by_optimizer.setdefault(id(wrapper.optimizer), []).append(wrapper)

    def _info(self, message: str) -> None:
        if self.verbose:
            rank_zero_info(message)

    def _compute_steps_per_epoch(self, trainer: pl.Trainer) -> int:
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch
        batches = trainer.num_training_batches
        if batches == float("inf") or batches is None:
            raise ValueError(
                "StepwiseLR: the train dataloader has no length (e.g. an IterableDataset without __len__), so "
                "the number of optimizer steps per epoch is unknown. Pass StepwiseLR(steps_per_epoch=N)."
            )
        accumulate = max(int(trainer.accumulate_grad_batches), 1)
        # 0 batches (limit_train_batches=0): no update will happen, any S > 0 will do
        return max(math.ceil(int(batches) / accumulate), 1)

    def _run_epochs(self, trainer: pl.Trainer, steps: int) -> float | None:
        """Length of the run in epochs (fractional when max_steps ends mid-epoch); None if unbounded."""
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else None
        max_steps = trainer.max_steps if trainer.max_steps is not None and trainer.max_steps >= 0 else None
        candidates = []
        if max_epochs is not None:
            candidates.append(float(max_epochs))
        if max_steps is not None:
            candidates.append(max_steps / steps)
        return min(candidates) if candidates else None

    def _bind_horizons(self, trainer: pl.Trainer, steps: int) -> None:
        run = self._run_epochs(trainer, steps)
        for wrapper in self._wrappers:
            run_sched = None if run is None else wrapper.epoch_offset + run / wrapper.frequency
            # Bind an open horizon, and re-bind one bound by an earlier fit (a schedule object reused for a
            # run of another length follows the new length).
            for schedule in F.epoch_schedules(wrapper.scheduler):
                if not schedule.follows_run:
                    continue
                if run_sched is None:
                    raise ValueError(
                        f"StepwiseLR: {schedule!r} follows the Trainer's length, but the run is unbounded "
                        "(max_epochs=-1 and max_steps=-1). Set total_epochs or bound the Trainer."
                    )
                schedule.follow_run(run_sched)
                self._info(f"StepwiseLR: {type(schedule).__name__} horizon set to {run_sched:g} epochs.")
            horizon = F.schedule_horizon(wrapper.scheduler)
            if horizon is not None and run_sched is not None and run_sched > horizon + 1e-9:
                at_end = wrapper.fn(horizon)[0]
                last = wrapper.fn(run_sched)[0]
                rank_zero_warn(
                    f"StepwiseLR: the {type(wrapper.scheduler).__name__} schedule ends at epoch {horizon:g} but the "
                    f"run lasts {run_sched:g} epochs (LR of param group 0: {at_end:.4g} at its end, {last:.4g} at "
                    "the end of the run). Lengthen the schedule or shorten the run."
                )
