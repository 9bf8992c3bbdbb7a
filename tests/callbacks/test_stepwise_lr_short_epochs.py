"""StepwiseLR when an epoch is shorter than its reported length, each way, compared with plain Lightning.

An epoch ends before ``trainer.num_training_batches`` when ``on_train_batch_start`` returns -1 (Lightning's
documented way to skip the rest of an epoch), when a dataloader's ``__len__`` overstates (an IterableDataset,
or a sampler that shards by hand under ``use_distributed_sampler=False``) and when ``trainer.should_stop`` is set
mid-epoch; a fractional ``limit_train_batches`` and a partial last accumulation window make it shorter than the
loader. In every case the LR at each epoch boundary, the scheduler's state and the LRs the optimizer holds after
fit are plain Lightning's (the same scheduler stepped once per epoch, without StepwiseLR), and inside an epoch
update ``k`` uses ``f(n + k / S)`` (``n``: the scheduler's epoch, ``S``: the planned optimizer steps per epoch).

The DDP case runs this file as a script (``python test_stepwise_lr_short_epochs.py OUT_DIR``).
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.demos.boring_classes import BoringModel
from torch import nn
from torch.optim import lr_scheduler as L
from torch.utils.data import DataLoader, IterableDataset, Sampler, TensorDataset
from trainer_helpers import TRAINER_KW, ddp_script_env, destroy_process_group_at_exit

from lightning_efficient.callbacks.stepwise_lr import StepwiseLR
from lightning_efficient.functional import schedules as F
from lightning_efficient.progress import epoch_position, fractional_epoch, planned_steps_per_epoch

KW = {**TRAINER_KW, "num_sanity_val_steps": 0, "log_every_n_steps": 1}


def step10(opt):
    return L.StepLR(opt, step_size=1, gamma=0.1)


def cosine3(opt):
    return L.CosineAnnealingLR(opt, T_max=3, eta_min=0.01)


def warmup_cosine(opt):
    return L.SequentialLR(opt, [L.LinearLR(opt, 0.25, 1.0, total_iters=1), L.CosineAnnealingLR(opt, T_max=2)], [1])


SCHEDULES = {"StepLR": step10, "CosineAnnealingLR": cosine3, "SequentialLR": warmup_cosine}


class OverstatedIterable(IterableDataset):
    """``real`` samples, but ``__len__`` says ``claimed``."""

    def __init__(self, real: int, claimed: int) -> None:
        self.real, self.claimed = real, claimed

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(self.real):
            yield torch.randn(3, generator=g), torch.randn(1, generator=g)

    def __len__(self) -> int:
        return self.claimed


class Short(pl.LightningModule):
    """One param group, SGD at ``lr``; records the LR of every training step and every optimizer update.

    ``skip_at``: ``on_train_batch_start`` returns -1 at that batch index (the rest of each epoch is skipped);
    ``stop_at``: ``(epoch, batch_idx)`` where ``training_step`` sets ``trainer.should_stop``;
    ``loader``: ``"map"`` (``batches`` batches of 1) or ``"overstated"`` (an IterableDataset of ``batches // 2``
    samples whose ``__len__`` says ``batches``); ``frequency``: the scheduler config's, in epochs.
    """

    def __init__(self, make, batches=10, skip_at=None, stop_at=None, loader="map", lr=0.1, frequency=1):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.make, self.batches, self.skip_at, self.stop_at = make, batches, skip_at, stop_at
        self.loader, self.lr, self.frequency = loader, lr, frequency
        self.step_lrs: list[tuple[int, float]] = []  # (epoch, LR) in every training_step
        self.used: list[tuple[int, float]] = []  # (epoch, LR) of every optimizer update
        self.epoch_start: list[tuple[float, int]] = []  # (LR, scheduler epoch) at every epoch start

    def on_train_epoch_start(self):
        opt = self.optimizers().optimizer
        self.epoch_start.append((opt.param_groups[0]["lr"], F.scheduler_epoch(self.lr_schedulers())))

    def on_train_batch_start(self, batch, batch_idx):
        if batch_idx == self.skip_at:
            return -1
        return None

    def training_step(self, batch, batch_idx):
        if self.stop_at == (self.current_epoch, batch_idx):
            self.trainer.should_stop = True
        self.step_lrs.append((self.current_epoch, self.optimizers().optimizer.param_groups[0]["lr"]))
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def on_before_optimizer_step(self, optimizer):
        self.used.append((self.current_epoch, optimizer.param_groups[0]["lr"]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self.make(opt), "frequency": self.frequency}}

    def train_dataloader(self):
        if self.loader == "overstated":
            return DataLoader(OverstatedIterable(self.batches // 2, self.batches), batch_size=1)
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(self.batches, 3, generator=g), torch.randn(self.batches, 1, generator=g))
        return DataLoader(data, batch_size=1)


def run(model, stepwise, callbacks=(), ckpt_path=None, **overrides):
    kwargs = {**KW, "max_epochs": 3, **overrides}
    cbs = ([StepwiseLR(verbose=False)] if stepwise else []) + list(callbacks)
    trainer = pl.Trainer(callbacks=cbs, **kwargs)
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer


def by_epoch(records):
    out: dict[int, list[float]] = {}
    for epoch, lr in records:
        out.setdefault(epoch, []).append(lr)
    return out


def assert_like_plain(make, kwargs_model, steps_per_epoch, expect_warning=None, position=None, **trainer_kw):
    """Fit with and without StepwiseLR; compare at every epoch boundary, inside epochs and after fit.

    ``position(epoch, n, k)``: the fractional scheduler epoch of update ``k`` of ``epoch`` (``n``: the scheduler's
    epoch then); default ``n + min(k / steps_per_epoch, 1)``.
    """
    if position is None:

        def position(epoch, n, k):
            return n + min(k / steps_per_epoch, 1.0)

    plain = Short(make, **kwargs_model)
    plain_trainer = run(plain, stepwise=False, **trainer_kw)
    model = Short(make, **kwargs_model)
    if expect_warning is None:
        trainer = run(model, stepwise=True, **trainer_kw)
    else:
        with pytest.warns(UserWarning, match=expect_warning):
            trainer = run(model, stepwise=True, **trainer_kw)

    # every epoch boundary: the LR the groups hold at the epoch start, the scheduler's epoch, the first update
    assert len(model.epoch_start) == len(plain.epoch_start)
    for (lr, n), (plain_lr, plain_n) in zip(model.epoch_start, plain.epoch_start, strict=True):
        assert n == plain_n
        assert lr == pytest.approx(plain_lr, rel=1e-12)
    used, plain_used = by_epoch(model.used), by_epoch(plain.used)
    assert used.keys() == plain_used.keys()
    frequency = kwargs_model.get("frequency", 1)  # scheduler epochs start every `frequency` trainer epochs
    for epoch in used:
        assert len(used[epoch]) == len(plain_used[epoch])
        if epoch % frequency == 0:
            assert used[epoch][0] == pytest.approx(plain_used[epoch][0], rel=1e-12), f"epoch {epoch} starts off plain"
    # inside each epoch: update k uses f(n + k / S), n the scheduler's (plain) epoch
    fn = F.schedule_function(make(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=model.lr)))
    for epoch, lrs in used.items():
        n = plain.epoch_start[epoch][1]
        for k, lr in enumerate(lrs):
            assert lr == pytest.approx(fn(position(epoch, n, k))[0], rel=1e-9), (epoch, k)
    # training_step sees the LR of the update it contributes to; the same in both runs at epoch starts
    steps = by_epoch(model.step_lrs)
    for epoch, lrs in steps.items():
        if epoch % frequency == 0:
            assert lrs[0] == pytest.approx(by_epoch(plain.step_lrs)[epoch][0], rel=1e-12)
    # after fit: the same scheduler state and optimizer LRs as plain Lightning
    sched, plain_sched = trainer.lr_scheduler_configs[0].scheduler, plain_trainer.lr_scheduler_configs[0].scheduler
    assert F.scheduler_epoch(sched) == F.scheduler_epoch(plain_sched)
    assert sched.get_last_lr() == pytest.approx(plain_sched.get_last_lr(), rel=1e-12)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(
        plain_trainer.optimizers[0].param_groups[0]["lr"], rel=1e-12
    )
    assert trainer.global_step == plain_trainer.global_step
    return model, plain, trainer


# ------------------------------------------------------------------ on_train_batch_start returns -1


# Ported from Lightning-AI/pytorch-lightning, tests/tests_pytorch/loops/test_training_loop.py, Apache-2.0
# (Copyright The Lightning AI team): the epoch-interval LR is updated at the end of an epoch that
# on_train_batch_start cut short by returning -1. Here with StepwiseLR in the Trainer and pytorch_lightning imports.
@pytest.mark.parametrize(("max_epochs", "batch_idx_"), [(2, 5), (3, 8), (4, 1)])
def test_lr_updated_on_train_batch_start_returns_minus_one(tmp_path, max_epochs, batch_idx_):
    class CurrentModel(BoringModel):
        def on_train_batch_start(self, batch, batch_idx):
            if batch_idx == batch_idx_:
                return -1
            return None

    model = CurrentModel()
    init_lr = 0.1  # BoringModel: SGD(lr=0.1) and StepLR(step_size=1), gamma 0.1
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=max_epochs,
        limit_train_batches=10,
        limit_val_batches=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=[StepwiseLR(verbose=False)],
    )
    trainer.fit(model)
    assert len(trainer.lr_scheduler_configs) == 1
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == max_epochs
    adjusted_lr = [pg["lr"] for pg in trainer.optimizers[0].param_groups]
    assert all(a == adjusted_lr[0] for a in adjusted_lr)
    assert adjusted_lr[0] == pytest.approx(init_lr * 0.1**max_epochs, rel=1e-12)
    assert trainer.global_step == batch_idx_ * max_epochs


def test_reported_case_step_lr_half_epochs():
    """StepLR(step_size=1, gamma=0.1), 10 batches planned, 5 run per epoch (-1 at batch 5), 3 epochs."""
    model, plain, trainer = assert_like_plain(step10, {"skip_at": 5}, steps_per_epoch=10)
    assert [lr for _, lr in model.step_lrs] == pytest.approx([0.1] * 5 + [0.01] * 5 + [0.001] * 5, rel=1e-12)
    assert [lr for _, lr in plain.step_lrs] == pytest.approx([0.1] * 5 + [0.01] * 5 + [0.001] * 5, rel=1e-12)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-4, rel=1e-12)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("skip_at", [0, 3, 9])
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`")
def test_minus_one_any_batch_any_schedule(name, skip_at):
    """-1 at the first batch (an epoch without updates), mid-epoch and at the last planned batch."""
    assert_like_plain(SCHEDULES[name], {"skip_at": skip_at}, steps_per_epoch=10)


@pytest.mark.parametrize("skip_at", [6, 4])
def test_minus_one_with_gradient_accumulation(skip_at):
    """accumulate 4 over 10 batches: S = 3; -1 inside the second window (two batches accumulated, no update) or
    at its first batch."""
    assert_like_plain(cosine3, {"skip_at": skip_at}, steps_per_epoch=3, accumulate_grad_batches=4)


def test_minus_one_with_a_frequency_of_two_epochs():
    """``"frequency": 2``: Lightning steps the scheduler after every second epoch, each of them cut at batch 4."""

    def make(opt):
        return L.ExponentialLR(opt, gamma=0.5)

    def position(epoch, n, k):  # S = 10 planned updates per epoch, two epochs per scheduler epoch
        return n + (epoch % 2 + k / 10) / 2

    model, plain, _ = assert_like_plain(
        make, {"skip_at": 4, "frequency": 2}, steps_per_epoch=10, position=position, max_epochs=4
    )
    assert [n for _, n in plain.epoch_start] == [0, 0, 1, 1]
    assert [len(v) for v in by_epoch(model.used).values()] == [4] * 4


@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_minus_one_checkpoints_equal_plain_and_resume_the_same(tmp_path):
    def ckpt(folder):
        return ModelCheckpoint(folder, save_on_train_epoch_end=True, save_top_k=-1, filename="{epoch}")

    full = Short(cosine3, skip_at=5)
    run(full, stepwise=True, callbacks=[ckpt(tmp_path / "with")], enable_checkpointing=True)
    run(Short(cosine3, skip_at=5), stepwise=False, callbacks=[ckpt(tmp_path / "plain")], enable_checkpointing=True)
    for epoch in range(3):  # what a checkpoint holds at each epoch end: plain Lightning's
        a = torch.load(tmp_path / "with" / f"epoch={epoch}.ckpt", weights_only=False)
        b = torch.load(tmp_path / "plain" / f"epoch={epoch}.ckpt", weights_only=False)
        assert a["optimizer_states"][0]["param_groups"][0]["lr"] == b["optimizer_states"][0]["param_groups"][0]["lr"]
        assert a["lr_schedulers"] == b["lr_schedulers"]
    resumed = Short(cosine3, skip_at=5)
    run(resumed, stepwise=True, ckpt_path=tmp_path / "with" / "epoch=0.ckpt")
    assert [lr for _, lr in resumed.used] == pytest.approx([lr for _, lr in full.used][5:], rel=1e-12)


# ------------------------------------------------------------------ the other ways an epoch is short


@pytest.mark.parametrize("accumulate", [1, 2])
def test_fractional_limit_train_batches(accumulate):
    """limit_train_batches=0.5 of 10 batches: 5 batches, S = ceil(5 / accumulate) (a partial last window at 2)."""
    assert_like_plain(
        cosine3,
        {},
        steps_per_epoch=math.ceil(5 / accumulate),
        limit_train_batches=0.5,
        accumulate_grad_batches=accumulate,
    )


def test_partial_last_accumulation_window():
    """10 batches, accumulate 4: windows of 4, 4 and 2 batches, S = 3, the last update at the last batch."""
    model, _, _ = assert_like_plain(warmup_cosine, {}, steps_per_epoch=3, accumulate_grad_batches=4)
    assert [len(v) for v in by_epoch(model.used).values()] == [3, 3, 3]


@pytest.mark.filterwarnings("ignore:Your `IterableDataset` has `__len__` defined")
def test_iterable_dataset_whose_len_overstates():
    """5 samples, __len__ says 10: each epoch ends after 5 of 10 planned batches, without Lightning knowing its
    last batch, so plain Lightning never steps the scheduler. StepwiseLR keeps the scheduler's epoch at every
    boundary (and says so once)."""
    model, plain, _ = assert_like_plain(
        cosine3, {"loader": "overstated"}, steps_per_epoch=10, expect_warning="was not stepped at the end of epoch 0"
    )
    assert [n for _, n in plain.epoch_start] == [0, 0, 0]
    assert [len(v) for v in by_epoch(model.used).values()] == [5, 5, 5]


@pytest.mark.parametrize("accumulate", [1, 4])
def test_should_stop_mid_epoch(accumulate):
    """should_stop set in training_step at batch 4 of epoch 1: the fit ends there (with accumulate 4, batch 4
    opens a window that never steps)."""
    model, _, trainer = assert_like_plain(
        cosine3, {"stop_at": (1, 4)}, steps_per_epoch=math.ceil(10 / accumulate), accumulate_grad_batches=accumulate
    )
    assert trainer.current_epoch == 2 and len(model.epoch_start) == 2


def test_should_stop_mid_epoch_before_min_epochs_continues_like_plain():
    assert_like_plain(cosine3, {"stop_at": (0, 4)}, steps_per_epoch=10, min_epochs=2)


def test_use_distributed_sampler_false_single_process_is_plain():
    """One process (-1 at batch 7): Lightning leaves the sampler as it is either way, its length is the epoch's."""
    assert_like_plain(cosine3, {"skip_at": 7}, steps_per_epoch=10, use_distributed_sampler=False)


# ------------------------------------------------------------------ the position helper in a real fit


class Positions(Callback):
    """Reads lightning_efficient.progress in the hooks its docstring names."""

    def __init__(self):
        self.at_epoch_start: list[float] = []
        self.at_batch_start: list[tuple[int, float]] = []

    def on_train_epoch_start(self, trainer, pl_module):
        self.at_epoch_start.append(fractional_epoch(trainer))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.at_batch_start.append((trainer.current_epoch, fractional_epoch(trainer, batch_idx)))


@pytest.mark.parametrize("accumulate", [1, 4])
def test_fractional_epoch_follows_the_epochs_that_happened(accumulate):
    positions = Positions()
    model = Short(cosine3, skip_at=6)
    trainer = run(model, stepwise=True, callbacks=[positions], accumulate_grad_batches=accumulate)
    steps = math.ceil(10 / accumulate)
    assert planned_steps_per_epoch(trainer) == steps
    assert positions.at_epoch_start == [0.0, 1.0, 2.0]  # every epoch starts at its integer, whatever ran before
    want = [(e, e + (b // accumulate) / steps) for e in range(3) for b in range(7)]  # batch 6 starts, returns -1
    assert [e for e, _ in positions.at_batch_start] == [e for e, _ in want]
    assert [x for _, x in positions.at_batch_start] == pytest.approx([x for _, x in want], rel=1e-12)
    at = epoch_position(trainer, 5)
    assert (at.epoch, at.step, at.steps_per_epoch) == (3, 5 // accumulate, steps)
    assert float(at) == fractional_epoch(trainer, 5)


class Unsized(Short):
    def train_dataloader(self):
        return DataLoader(NoLen(), batch_size=1)


class NoLen(IterableDataset):
    def __iter__(self):
        return iter([(torch.zeros(3), torch.zeros(1))] * 3)


def test_position_helper_errors():
    trainer = run(Short(step10), stepwise=False, max_epochs=1)
    with pytest.raises(ValueError, match="batch_idx"):
        fractional_epoch(trainer, -1)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        fractional_epoch(trainer, 0, steps_per_epoch=0)
    with pytest.warns(UserWarning, match="no length"):
        unsized = run(Unsized(step10), stepwise=True, max_epochs=1)
    assert planned_steps_per_epoch(unsized) is None
    with pytest.raises(ValueError, match="steps_per_epoch"):
        fractional_epoch(unsized, 0)
    assert fractional_epoch(unsized, 2, steps_per_epoch=4) == pytest.approx(1 + 2 / 4)
    assert fractional_epoch(unsized, steps_per_epoch=4) == 1.0


# ------------------------------------------------------------------ DDP: use_distributed_sampler=False


class RankShard(Sampler):
    """This rank's share of the indices (rank::world_size), but ``__len__`` is the whole dataset's: the epoch is
    shorter than reported. Under ``use_distributed_sampler=False`` Lightning uses it as it is."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        return iter(range(rank, self.n, world))

    def __len__(self) -> int:
        return self.n


class Sharded(Short):
    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(self.batches, 3, generator=g), torch.randn(self.batches, 1, generator=g))
        return DataLoader(data, batch_size=1, sampler=RankShard(self.batches))


def _ddp_main(out: Path) -> None:
    destroy_process_group_at_exit()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    result = {}
    for name, stepwise, skip_at in (
        ("plain", False, None),
        ("with", True, None),
        ("plain-1", False, 3),
        ("with-1", True, 3),
    ):
        model = Sharded(cosine3, skip_at=skip_at)
        kwargs = {**KW, "devices": 2, "strategy": "ddp", "use_distributed_sampler": False, "max_epochs": 3}
        trainer = pl.Trainer(callbacks=[StepwiseLR(verbose=False)] if stepwise else [], **kwargs)
        trainer.fit(model)
        sched = trainer.lr_scheduler_configs[0].scheduler
        result[name] = {
            "used": model.used,
            "epoch_start": model.epoch_start,
            "after": (F.scheduler_epoch(sched), trainer.optimizers[0].param_groups[0]["lr"]),
            "num_training_batches": trainer.num_training_batches,
        }
    torch.save(result, out / f"rank{trainer.global_rank}.pt")


@pytest.mark.ddp
def test_ddp_use_distributed_sampler_false_with_a_sharding_sampler(tmp_path):
    """2 CPU processes: each runs 5 of the 10 batches its sampler reports (and then also -1 at batch 3)."""
    env = ddp_script_env()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert ranks[0] == ranks[1]  # the same LRs on every rank
    res = ranks[0]
    fn = F.schedule_function(cosine3(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)))
    for suffix, per_epoch in (("", 5), ("-1", 3)):
        with_, plain = res["with" + suffix], res["plain" + suffix]
        assert with_["num_training_batches"] == 10  # S is the reported length, per process
        assert [n for _, n in with_["epoch_start"]] == [n for _, n in plain["epoch_start"]]
        for (lr, _), (plain_lr, _) in zip(with_["epoch_start"], plain["epoch_start"], strict=True):
            assert lr == pytest.approx(plain_lr, rel=1e-12)
        assert with_["after"][0] == plain["after"][0]
        assert with_["after"][1] == pytest.approx(plain["after"][1], rel=1e-12)
        used = by_epoch(with_["used"])
        assert [len(v) for v in used.values()] == [per_epoch] * 3
        for epoch, lrs in used.items():
            n = with_["epoch_start"][epoch][1]
            assert lrs == pytest.approx([fn(n + k / 10)[0] for k in range(per_epoch)], rel=1e-9)
    assert [n for _, n in res["plain"]["epoch_start"]] == [0, 0, 0]  # Lightning never learns the last batch
    assert [n for _, n in res["plain-1"]["epoch_start"]] == [0, 1, 2]


if __name__ == "__main__":
    _ddp_main(Path(sys.argv[1]))
