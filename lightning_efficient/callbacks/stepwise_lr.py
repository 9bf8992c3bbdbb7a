"""StepwiseLR: run the epoch-interval LR schedulers of a LightningModule at every optimizer step."""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from torch.optim import Optimizer

from lightning_efficient.adapter import Callback
from lightning_efficient.functional import schedules as F
from lightning_efficient.functional.position import EpochPosition
from lightning_efficient.progress import epoch_position, planned_steps_per_epoch

__all__ = ["StepwiseLR"]

#: A param group whose LR is within this relative distance of the closed form at the scheduler's epoch is on
#: schedule (PyTorch's recursive updates and the closed forms agree to ~1e-15); otherwise it was re-based.
_ON_SCHEDULE_RTOL = 1e-6


def _write_lr(group: dict[str, Any], value: float) -> None:
    if isinstance(group["lr"], Tensor):  # tensor LRs (e.g. capturable Adam) are updated in place, like PyTorch
        group["lr"].fill_(value)
    else:
        group["lr"] = value


class _Driven:
    """One epoch-interval scheduler whose LRs StepwiseLR sets per optimizer step; the scheduler is not modified.

    ``groups`` are the optimizer's param groups when the closed form ``fn`` was built (``fn``'s outputs refer
    to them, in order); groups added later follow the schedule from their own LR.
    """

    def __init__(self, index: int, scheduler: Any, fn: F.ScheduleFn, frequency: int) -> None:
        self.index = index
        self.scheduler = scheduler
        self.optimizer = scheduler.optimizer
        self.fn = fn
        self.frequency = frequency
        self.groups = list(self.optimizer.param_groups)
        self.active = True
        self.held_warned = False
        self.unstepped_warned = False
        self.epoch_start: tuple[int, int] | None = None  # (trainer epoch, scheduler epoch) at the last epoch start
        self._snapshot: tuple[tuple[Any, ...], dict[str, Any]] | None = None  # (key, scheduler state)

    @property
    def name(self) -> str:
        return f"{type(self.scheduler).__name__} (lr_scheduler {self.index})"

    def position(self, trainer_epoch: int, within: float) -> float:
        """Fractional scheduler epoch: its own counter, plus the part of the ``frequency`` trainer epochs done."""
        return F.scheduler_epoch(self.scheduler) + ((trainer_epoch % self.frequency) + within) / self.frequency

    def snapshot(self) -> dict[str, Any]:
        """The scheduler's state now, to redo a step that read per-step LRs. Copied once per scheduler epoch and
        param-group LRs (a PyTorch scheduler's state changes in ``step()`` and ``load_state_dict()`` only), not at
        every batch."""
        key = (F.scheduler_epoch(self.scheduler), tuple(float(g["lr"]) for g in self.optimizer.param_groups))
        if self._snapshot is None or self._snapshot[0] != key:
            self._snapshot = (key, copy.deepcopy(self.scheduler.state_dict()))
        return self._snapshot[1]

    def lrs(self, current: list[float], pos: float) -> list[float]:
        """LRs at fractional epoch ``pos`` from the groups' LRs ``current`` at the scheduler's integer epoch."""
        at_n = self.fn(float(F.scheduler_epoch(self.scheduler)))
        at_pos = self.fn(pos)
        out = []
        for group, lr in zip(self.optimizer.param_groups, current, strict=True):
            j = next((i for i, g in enumerate(self.groups) if g is group), None)
            if j is not None and math.isclose(lr, at_n[j], rel_tol=_ON_SCHEDULE_RTOL, abs_tol=1e-15):
                out.append(at_pos[j])  # on schedule: the closed form itself
                continue
            # a group added (e.g. BackboneFinetuning) or re-based since: from its own LR, shaped like the schedule
            ref = 0 if j is None else j
            out.append(lr * at_pos[ref] / at_n[ref] if at_n[ref] else lr)
        return out


class _Pending:
    """An optimizer whose param groups hold per-step LRs (from batch start until its step or the batch end)."""

    def __init__(
        self, optimizer: Optimizer, saved: list[float], snapshots: list[tuple[_Driven, dict[str, Any], int]]
    ) -> None:
        self.optimizer = optimizer
        self.saved = saved  # the schedulers' LRs, written back after the step
        self.snapshots = snapshots  # (driven, state_dict, scheduler epoch) where a scheduler may step meanwhile


class StepwiseLR(Callback):
    r"""Run the LightningModule's epoch-interval LR schedulers at every optimizer step.

    For each scheduler configured with ``"interval": "epoch"`` (Lightning's default) and a known closed form
    (:func:`lightning_efficient.functional.schedules.schedule_function`), the callback sets the LR of every
    optimizer update from the closed form in fractional epochs: the update with 0-based index ``k`` within
    epoch ``e`` uses ``f(e + k / S)``, where ``S = ceil(trainer.num_training_batches / accumulate_grad_batches)``
    is the number of optimizer steps per epoch on this process (after ``limit_train_batches`` and the
    DistributedSampler). ``e`` is the scheduler's own counter (``last_epoch``), so at every epoch boundary the
    LR equals the LR the plain epoch-wise scheduler uses in that epoch; each param group keeps its own base LR.
    ``k / S`` is the fraction of :func:`lightning_efficient.progress.epoch_position`, the run's position in
    the epochs that really happened, which other per-step features read too.

    **The scheduler stays yours.** ``trainer.lr_scheduler_configs`` is not modified: Lightning keeps stepping
    your scheduler once per epoch (its ``last_epoch``, ``state_dict()``, type and attributes stay those of plain
    Lightning, and ``self.lr_schedulers()`` returns it). The LR of a batch's update is written into the param
    groups in ``on_train_batch_start`` (so ``training_step`` and ``on_before_optimizer_step`` see it) and the
    scheduler's own LR written back right after the optimizer step (or at ``on_train_batch_end`` when no step
    happened). So at ``on_train_batch_end``, at epoch boundaries, in checkpoints and whenever Lightning steps
    the scheduler, the param groups hold exactly what plain Lightning would. Consequences:

    - **Checkpoints are plain Lightning checkpoints**: one written with StepwiseLR resumes in a Trainer without
      it (epoch-wise, from the checkpoint's epoch), and the reverse; with -> with resumes (end of epoch or
      mid-epoch) continue the same per-step LRs.
    - :class:`~pytorch_lightning.callbacks.LearningRateMonitor` logs the scheduler's LR per epoch, as without
      the callback (so ``EarlyStopping("lr-SGD")`` still finds it). With ``logging_interval="step"`` it logs
      the per-step LR when it comes after StepwiseLR in ``callbacks`` (it reads the groups in
      ``on_train_batch_start``). The LRs of the last update of each optimizer: :attr:`last_lrs`.
    - **Callbacks that replace a scheduler config** (``StochasticWeightAveraging`` at ``swa_epoch_start``)
      take over: StepwiseLR only acts on schedulers that are in ``trainer.lr_scheduler_configs`` at that
      moment (``LearningRateFinder``'s temporary config is left alone and the user's resumes afterwards).
    - **Param groups added during fit** (``BackboneFinetuning``) follow the schedule from their own LR, as
      PyTorch's recursive schedulers do; a group whose LR was changed by someone else (re-based) follows the
      schedule's shape from that LR; removed groups are simply not set.

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

    - **Epoch length.** ``S`` is recomputed at every epoch start; ``k`` is the optimizer-step index within
      the epoch (``batch_idx // accumulate_grad_batches``), so every epoch boundary is exact even if ``S``
      changes (e.g. dataloaders reloaded with another length). An epoch longer than ``S`` holds the boundary LR
      (with a warning).
    - **Epochs shorter than planned** (``on_train_batch_start`` returning -1, ``trainer.should_stop``, a
      dataloader whose ``__len__`` overstates): the next epoch starts at the scheduler's next epoch, with
      exactly plain Lightning's LR; the part of the schedule the short epoch skipped is not used. After an
      epoch cut by -1, Lightning steps the scheduler while the batch's per-step LRs are in the param groups;
      that step is redone from the scheduler's own LRs at ``on_train_epoch_end`` (before checkpoints), so its
      state stays plain Lightning's. Where Lightning does not step the scheduler at all (it never saw the last
      batch of an epoch whose ``__len__`` overstates), the per-step LRs repeat the same scheduler epoch, as the
      per-epoch LR does without the callback, with a warning.
    - **Gradient accumulation.** One update per ``accumulate_grad_batches`` batches; a partial last window
      is one more update (``ceil``), as Lightning steps the optimizer at the last batch of an epoch.
    - **frequency.** ``"frequency": n`` (scheduler stepped every ``n`` epochs) becomes ``f(k / (n S))``.
    - **Skipped steps.** Every optimizer-step *attempt* counts, including steps the ``16-mixed`` GradScaler
      skips after an inf/NaN gradient, exactly like ``trainer.global_step``. If a skipped step was the last
      of an epoch, the scheduler's epoch step (which read the per-step LR, as nothing ran after the optimizer)
      is redone from its saved state, so the scheduler's values stay exactly plain Lightning's.
    - **Manual optimization.** Lightning does not step schedulers there: step each one yourself once per
      epoch (``if self.trainer.is_last_batch: sch.step()``), as without the callback. The LR of an update is
      ``f(last_epoch + j / S)`` with ``j`` the updates of that optimizer so far in the epoch (saved in the
      callback's state); ``S`` assumes one update per optimizer per batch unless ``steps_per_epoch`` is given.
      A scheduler not stepped during an epoch gets a warning (its LRs would repeat the same epoch).
    - **Horizon.** A warning when the run is longer than the schedule (``CosineAnnealingLR.T_max``,
      ``PolynomialLR.total_iters``, ...). :class:`~lightning_efficient.functional.schedules.EpochSchedule`
      functions (e.g. ``warmup_cosine(warmup_epochs=5)``) with ``total_epochs=None`` get the run length in
      epochs (fractional if ``max_steps`` ends mid-epoch) through
      :meth:`~lightning_efficient.functional.schedules.EpochSchedule.follow_run`.

    Why per step: measured effect on accuracy in ``benchmarks/results/schedule_accuracy.md``
    (``benchmarks/schedule_accuracy.py``).

    Args:
        steps_per_epoch: optimizer steps per epoch (``S``), overriding the one computed from the Trainer.
            Needed for dataloaders without ``__len__`` (``IterableDataset``): without it such a fit warns and
            leaves the schedulers stepping per epoch, as plain Lightning does. ``None``: computed.
        verbose: log one line per scheduler (what is driven or left alone). Warnings are always shown.

    Raises:
        ValueError: ``steps_per_epoch`` is not a positive int; resuming
            from a checkpoint whose scheduler state was written by the StepwiseLR of lightning_efficient 0.1
            (a ``_StepwiseScheduler`` wrapper).
        TypeError: ``verbose`` is not a bool.

    Example:
        ```python
        from torch.optim.lr_scheduler import CosineAnnealingLR
        from lightning_efficient import StepwiseLR

        class Model(pl.LightningModule):
            def configure_optimizers(self):
                opt = torch.optim.SGD(self.parameters(), lr=0.1)
                sched = CosineAnnealingLR(opt, T_max=30)  # in epochs
                return {"optimizer": opt, "lr_scheduler": sched}

        # the cosine over all 30 x S optimizer steps, S per epoch
        trainer = pl.Trainer(max_epochs=30, callbacks=[StepwiseLR()])
        ```
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
        self._current_steps_per_epoch: int | None = None
        self._reset_run()
        # manual optimization: {config index: [trainer epoch, updates of its optimizer in that epoch]}
        self._updates: dict[int, list[int]] = {}

    def _reset_run(self) -> None:
        """Per-fit runtime state (not pickled; rebuilt in ``on_train_start``)."""
        self._driven: list[_Driven] = []
        self._epoch_wise: list[tuple[str, str]] = []  # (reason, fix) of each scheduler left per epoch
        self._pending: dict[int, _Pending] = {}
        self._handles: list[Any] = []
        self._batch_idx = 0
        self._batches_in_epoch = 0
        self._last_lrs: dict[int, list[float]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_driven", "_epoch_wise", "_pending", "_handles", "_last_lrs"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_run()

    # ------------------------------------------------------------------------- hooks
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the checkpoint restore: the schedulers hold their restored state
        self._release()
        self._epoch_wise = []
        self._driven = self._select(trainer)
        if not self._driven:
            return
        if planned_steps_per_epoch(trainer, self.steps_per_epoch) is None:
            rank_zero_warn(
                "StepwiseLR: the train dataloader has no length (e.g. an IterableDataset without __len__), so the "
                "number of optimizer steps per epoch is unknown; the LR schedulers are left stepping once per epoch, "
                "as without StepwiseLR. Pass StepwiseLR(steps_per_epoch=N) to run them at every optimizer step."
            )
            fix = "pass StepwiseLR(steps_per_epoch=N) (optimizer steps per epoch)"
            self._epoch_wise = [("the training loader has no length: the optimizer steps per epoch are unknown", fix)]
            self._driven = []
            return
        steps = self._current_steps_per_epoch = self._compute_steps_per_epoch(trainer)
        self._bind_horizons(trainer, steps)
        for optimizer in {id(d.optimizer): d.optimizer for d in self._driven}.values():
            self._handles.append(optimizer.register_step_post_hook(self._after_optimizer_step))
        self._info(f"StepwiseLR: {steps} optimizer steps per epoch.")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._driven:
            return
        self._settle()  # normally settled at the previous epoch's end already
        planned = self._current_steps_per_epoch
        self._current_steps_per_epoch = self._compute_steps_per_epoch(trainer)
        epoch = trainer.current_epoch
        for d in self._driven:
            n = F.scheduler_epoch(d.scheduler)
            if (
                d.epoch_start is not None
                and epoch == d.epoch_start[0] + 1
                and (epoch % d.frequency) == 0
                and n == d.epoch_start[1]
                and self._is_active(trainer, d)
                and not d.unstepped_warned
            ):
                d.unstepped_warned = True
                rank_zero_warn(self._unstepped_message(trainer, pl_module, d, epoch - 1, planned))
            d.epoch_start = (epoch, n)
        self._batches_in_epoch = 0

    def _unstepped_message(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, d: _Driven, epoch: int, planned: int | None
    ) -> str:
        if not pl_module.automatic_optimization:
            return (
                f"StepwiseLR: {d.name} was not stepped during epoch {epoch} (manual optimization), so its "
                "per-step LRs repeat the same epoch. Step it once per epoch in training_step, e.g. "
                "`if self.trainer.is_last_batch: sch.step()`."
            )
        ran = self._batches_in_epoch
        batches = trainer.num_training_batches
        why = (
            f" Epoch {epoch} ended after {ran} of the {batches} batches its dataloader's length announced, without "
            "Lightning knowing which batch was the last (a dataset or sampler whose __len__ overstates, e.g. an "
            "IterableDataset or data sharded by hand with use_distributed_sampler=False), and Lightning steps "
            "epoch-interval schedulers at an epoch's last batch only. Make __len__ exact, or end such an epoch "
            "with `return -1` from on_train_batch_start."
            if isinstance(batches, int) and ran < batches
            else ""
        )
        return (
            f"StepwiseLR: {d.name} was not stepped at the end of epoch {epoch}, so its per-step LRs repeat its "
            f"epoch {F.scheduler_epoch(d.scheduler)} (at every epoch start they equal its per-epoch LR, as without "
            f"StepwiseLR; S={planned} optimizer steps per epoch).{why}"
        )

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch_idx = batch_idx
        self._batches_in_epoch = batch_idx + 1
        for optimizer in {id(d.optimizer): d.optimizer for d in self._driven}.values():
            self._apply(trainer, pl_module, optimizer, advance=False)  # visible to training_step

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Optimizer
    ) -> None:
        # the LightningOptimizer of either Lightning package wraps the torch optimizer as `.optimizer`
        for raw in (optimizer, getattr(optimizer, "optimizer", None)):
            if raw is not None and any(d.optimizer is raw for d in self._driven):
                self._apply(trainer, pl_module, raw, advance=True)  # again: something may have changed it since
                return

    def _apply(self, trainer: pl.Trainer, pl_module: pl.LightningModule, raw: Optimizer, advance: bool) -> None:
        """Write the LRs of the coming update of ``raw`` into its param groups (``advance``: it is happening)."""
        driven = [d for d in self._driven if d.optimizer is raw and self._is_active(trainer, d)]
        if not driven:
            return
        pending = self._pending.get(id(raw))
        if pending is None:  # the groups hold the schedulers' LRs: keep them to write back after the update
            # A scheduler may step before the update or without one (-1 from on_train_batch_start, a skipped last
            # step, manual optimization): its state now, to redo that step from its own LRs (see _settle).
            snapshots = [(d, d.snapshot(), F.scheduler_epoch(d.scheduler)) for d in driven]
            saved = [float(g["lr"]) for g in raw.param_groups]
            pending = self._pending[id(raw)] = _Pending(raw, saved, snapshots)
        lrs = list(pending.saved)
        for d in driven:
            at = self._position(trainer, pl_module, d, advance)
            if advance and at.overrun and not d.held_warned:
                d.held_warned = True
                rank_zero_warn(
                    f"StepwiseLR: epoch {trainer.current_epoch} has more than steps_per_epoch={at.steps_per_epoch} "
                    "optimizer steps; the LR holds at the next epoch's value until the epoch ends. Set "
                    "StepwiseLR(steps_per_epoch=...) to the real number of optimizer steps per epoch."
                )
            lrs = d.lrs(lrs, d.position(at.epoch, at.fraction))
        for group, lr in zip(raw.param_groups, lrs, strict=True):
            _write_lr(group, lr)
        if advance:
            self._last_lrs[id(raw)] = lrs

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._settle()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A batch whose on_train_batch_start returned -1 ends the epoch without an update or on_train_batch_end,
        # and Lightning steps the schedulers right after it: settle here, before checkpoints and the next epoch.
        self._settle()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._release()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._release()

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        for state in checkpoint.get("lr_schedulers") or []:
            if isinstance(state, dict) and "stepwise_lr" in state:
                raise ValueError(
                    "StepwiseLR: this checkpoint's scheduler state was written by the StepwiseLR of "
                    "lightning_efficient 0.1, which replaced your scheduler by a wrapper. Schedulers now stay "
                    "yours and their state is plain PyTorch: resume it with lightning_efficient 0.1, or start "
                    "from its weights (ckpt['state_dict']) without ckpt_path."
                )

    # ------------------------------------------------------------------------- optimizer-step plumbing
    def _after_optimizer_step(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        """Step post-hook: write the schedulers' LRs back (a skipped step is settled in on_train_batch_end)."""
        pending = self._pending.pop(id(optimizer), None)
        if pending is not None:
            for group, lr in zip(optimizer.param_groups, pending.saved, strict=True):
                _write_lr(group, lr)

    def _settle(self) -> None:
        """Write back the LRs of updates that did not happen (accumulation, GradScaler skip, skipped batch), and
        redo a scheduler step that read the per-step LRs instead of its own."""
        for pending in self._pending.values():
            optimizer = pending.optimizer
            stepped = [(d, state) for d, state, epoch in pending.snapshots if F.scheduler_epoch(d.scheduler) != epoch]
            for d, state in stepped:
                d.scheduler.load_state_dict(copy.deepcopy(state))
            for group, lr in zip(optimizer.param_groups, pending.saved, strict=True):
                _write_lr(group, lr)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "lr_scheduler.step() before optimizer.step()"
                for d, _ in stepped:
                    d.scheduler.step()
        self._pending.clear()

    def _release(self) -> None:
        self._settle()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _position(self, trainer: pl.Trainer, pl_module: pl.LightningModule, d: _Driven, advance: bool) -> EpochPosition:
        """Where the coming update of ``d``'s optimizer falls in the epochs that happened (trainer epochs)."""
        steps = self._current_steps_per_epoch or 1
        if pl_module.automatic_optimization:
            return epoch_position(trainer, self._batch_idx, steps_per_epoch=steps)
        epoch, count = self._updates.get(d.index, (trainer.current_epoch, 0))
        if epoch != trainer.current_epoch:
            count = 0
        if advance:
            self._updates[d.index] = [trainer.current_epoch, count + 1]
        return EpochPosition(epoch=int(trainer.current_epoch), step=count, steps_per_epoch=steps)

    def _is_active(self, trainer: pl.Trainer, d: _Driven) -> bool:
        live = any(config.scheduler is d.scheduler for config in trainer.lr_scheduler_configs)
        if live != d.active:
            d.active = live
            if live:
                self._info(f"StepwiseLR: {d.name} is back in trainer.lr_scheduler_configs; LR set per step again.")
            else:
                self._info(
                    f"StepwiseLR: {d.name} is no longer in trainer.lr_scheduler_configs (replaced by another "
                    "callback, e.g. StochasticWeightAveraging); its replacement sets the LRs now."
                )
        return live

    # ------------------------------------------------------------------------- state
    @property
    def current_steps_per_epoch(self) -> int | None:
        """S in use: optimizer steps per epoch on this process for the current (or last) epoch; None before
        ``on_train_start`` or when no scheduler is driven."""
        return self._current_steps_per_epoch

    @property
    def schedulers(self) -> list[Any]:
        """The user's schedulers whose LRs this callback sets per step (the objects themselves; empty before
        ``on_train_start``)."""
        return [d.scheduler for d in self._driven]

    @property
    def last_lrs(self) -> list[list[float]]:
        """LRs (floats, one per param group) of the last update of each optimizer in :attr:`schedulers`' order;
        ``[]`` for an optimizer not updated yet. After an update the param groups hold the schedulers' LRs."""
        return [list(self._last_lrs.get(id(d.optimizer), [])) for d in self._driven]

    def efficiency_facts(self) -> dict[str, Any]:
        """For :class:`~lightning_efficient.EfficiencyReport`: whether every scheduler runs per optimizer step, and
        why one does not (by design, e.g. ReduceLROnPlateau, or with a fix, e.g. an unsized loader)."""
        facts: dict[str, Any] = {"lr_per_step": True} if self._driven and not self._epoch_wise else {}
        if self._epoch_wise:  # the report says why, and the fix where there is one, instead of "add StepwiseLR"
            fixes = [fix for _, fix in self._epoch_wise if fix]
            facts["lr_epoch_wise"] = ("; ".join(r for r, _ in self._epoch_wise), fixes[0] if fixes else "")
        return facts

    def state_dict(self) -> dict[str, Any]:
        # The schedulers' own progress is in their state (saved by Lightning under "lr_schedulers").
        updates = {index: list(counter) for index, counter in self._updates.items()}
        return {"steps_per_epoch": self.steps_per_epoch, "updates_in_epoch": updates}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.steps_per_epoch is None:
            self.steps_per_epoch = state_dict.get("steps_per_epoch")
        self._updates = {int(k): list(v) for k, v in (state_dict.get("updates_in_epoch") or {}).items()}

    # ------------------------------------------------------------------------- helpers
    def _select(self, trainer: pl.Trainer) -> list[_Driven]:
        driven = []
        for index, config in enumerate(trainer.lr_scheduler_configs):
            scheduler = config.scheduler
            name = f"{type(scheduler).__name__} (lr_scheduler {index})"
            if config.interval != "epoch":
                self._info(f"StepwiseLR: {name} already runs at interval={config.interval!r}; left as it is.")
                continue
            if config.reduce_on_plateau:
                self._info(f"StepwiseLR: {name} reacts to a metric; left as it is (stepped per epoch).")
                self._epoch_wise.append((f"{name} reacts to a metric: StepwiseLR leaves it per epoch", ""))
                continue
            try:
                fn = F.schedule_function(scheduler)
                F.scheduler_epoch(scheduler)
            except (F.UnsupportedSchedulerError, TypeError) as err:
                rank_zero_warn(f"StepwiseLR: {name} left as it is (stepped per epoch): {err}")
                self._epoch_wise.append((f"StepwiseLR cannot run {name} per step: {err}", ""))
                continue
            d = _Driven(index, scheduler, fn, frequency=int(config.frequency))
            driven.append(d)
            per = "" if d.frequency == 1 else f" (stepped every {d.frequency} epochs)"
            self._info(
                f"StepwiseLR: {name}{per} LR now set at every optimizer step from its schedule in fractional epochs."
            )
        return driven

    def _info(self, message: str) -> None:
        if self.verbose:
            rank_zero_info(message)

    def _compute_steps_per_epoch(self, trainer: pl.Trainer) -> int:
        """``steps_per_epoch``, or ``ceil(num_training_batches / accumulate_grad_batches)`` (the loader is sized)."""
        steps = planned_steps_per_epoch(trainer, self.steps_per_epoch)
        return 1 if steps is None else steps

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
        epoch = trainer.current_epoch
        for d in self._driven:
            # the run's end in scheduler epochs, from where the scheduler is at the start of this trainer epoch
            run_sched = None if run is None else d.position(epoch, 0.0) + (run - epoch) / d.frequency
            # Bind an open horizon, and re-bind one bound by an earlier fit (a schedule object reused for a
            # run of another length follows the new length).
            for schedule in F.epoch_schedules(d.scheduler):
                if not schedule.follows_run:
                    continue
                if run_sched is None:
                    raise ValueError(
                        f"StepwiseLR: {schedule!r} follows the Trainer's length, but the run is unbounded "
                        "(max_epochs=-1 and max_steps=-1). Set total_epochs or bound the Trainer."
                    )
                schedule.follow_run(run_sched)
                self._info(f"StepwiseLR: {type(schedule).__name__} horizon set to {run_sched:g} epochs.")
            horizon = F.schedule_horizon(d.scheduler)
            if horizon is not None and run_sched is not None and run_sched > horizon + 1e-9:
                at_end = d.fn(horizon)[0]
                last = d.fn(run_sched)[0]
                rank_zero_warn(
                    f"StepwiseLR: the {type(d.scheduler).__name__} schedule ends at epoch {horizon:g} but the "
                    f"run lasts {run_sched:g} epochs (LR of param group 0: {at_end:.4g} at its end, {last:.4g} at "
                    "the end of the run). Lengthen the schedule or shorten the run."
                )
