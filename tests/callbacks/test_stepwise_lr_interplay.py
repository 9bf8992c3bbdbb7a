"""StepwiseLR beside Lightning's callbacks that read or replace LRs and schedulers, and pickling of the run."""

from __future__ import annotations

import io
import math
import pickle

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import (
    BackboneFinetuning,
    EarlyStopping,
    LearningRateFinder,
    LearningRateMonitor,
    StochasticWeightAveraging,
)
from pytorch_lightning.demos.boring_classes import BoringModel
from pytorch_lightning.loggers import CSVLogger
from test_stepwise_lr import Net, assert_lrs, cosine3, expected, fit, trainer_kwargs
from torch import nn
from torch.optim import lr_scheduler as L
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import DestroyProcessGroupAtExit

from lightning_efficient.callbacks.stepwise_lr import StepwiseLR


class Tiny(pl.LightningModule):
    """``Linear(1, 1)``, SGD ``lr``, a scheduler from ``make``; records the param-group LRs of every update."""

    def __init__(self, make, lr=1.0, batches=4):
        super().__init__()
        self.layer = nn.Linear(1, 1)
        self.make, self.lr, self.batches = make, lr, batches
        self.used: list[list[float]] = []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def on_before_optimizer_step(self, optimizer):
        self.used.append([g["lr"] for g in optimizer.param_groups])

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        return {"optimizer": opt, "lr_scheduler": self.make(opt)}

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.ones(self.batches, 1)), batch_size=1)


def cosine6(opt):
    return L.CosineAnnealingLR(opt, T_max=6)


# ------------------------------------------------------------------------------------------------ 1. SWA


@pytest.mark.parametrize("swa_first", [True, False])
@pytest.mark.parametrize("swa_epoch_start", [3, 0.5])
def test_stochastic_weight_averaging_takes_over_exactly_as_without(swa_first, swa_epoch_start):
    def run(stepwise):
        swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=swa_epoch_start, annealing_epochs=1)
        callbacks = [swa] + ([StepwiseLR()] if stepwise else [])
        model = Tiny(cosine6)
        fit(model, callbacks=callbacks if swa_first else callbacks[::-1], max_epochs=6)
        return [lrs[0] for lrs in model.used]

    plain, ours = run(False), run(True)
    firsts = plain[::4]
    assert firsts == pytest.approx([1, 0.933, 0.75, 0.05, 0.05, 0.05], abs=5e-4)
    assert ours[::4] == pytest.approx(firsts, rel=1e-12)
    # SWA swaps in its SWALR at the start of epoch swa_epoch_start - 1 = 2 (annealing from 0.75 in that epoch)
    assert ours[8:] == pytest.approx(plain[8:], rel=1e-12)  # SWALR's LRs once it took over, unchanged
    fn = [0.5 * (1 + math.cos(math.pi * k / 24)) for k in range(8)]
    assert ours[:8] == pytest.approx(fn, rel=1e-9)  # per step before that


def test_learning_rate_finder_then_the_users_schedule_per_step():
    model = Net(cosine3, num_batches=4)
    finder = LearningRateFinder(num_training_steps=5, update_attr=False)
    fit(model, callbacks=[StepwiseLR(), finder], max_epochs=3)
    assert_lrs(model.used_lrs[-12:], expected(cosine3, 4, 12))


# -------------------------------------------------------------------------------------- 14. finetuning


class Backboned(BoringModel):
    """BoringModel with a backbone; the optimizer starts with the head only (BackboneFinetuning adds the rest)."""

    def __init__(self, make):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(32, 32), nn.ReLU())
        self.make = make
        self.used: list[list[float]] = []

    def forward(self, x):
        return self.layer(self.backbone(x))

    def on_before_optimizer_step(self, optimizer):
        self.used.append([g["lr"] for g in optimizer.param_groups])

    def configure_optimizers(self):
        opt = torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": self.make(opt)}

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 32)), batch_size=2)

    def training_step(self, batch, batch_idx):
        return self(batch[0]).sum()


FINETUNE_FAMILIES = {
    "StepLR": lambda o: L.StepLR(o, step_size=1, gamma=0.5),
    "ExponentialLR": lambda o: L.ExponentialLR(o, gamma=0.5),
    "LinearLR": lambda o: L.LinearLR(o, start_factor=0.25, total_iters=3),
    "PolynomialLR": lambda o: L.PolynomialLR(o, total_iters=6, power=2.0),
}


@pytest.mark.parametrize("family", sorted(FINETUNE_FAMILIES))
def test_backbone_finetuning_param_group_added_during_fit(family):
    def run(stepwise):
        model = Backboned(FINETUNE_FAMILIES[family])
        callbacks = [BackboneFinetuning(unfreeze_backbone_at_epoch=1)] + ([StepwiseLR()] if stepwise else [])
        trainer = fit(model, callbacks=callbacks, max_epochs=3, limit_val_batches=0)
        return model, trainer

    plain, plain_trainer = run(False)
    ours, trainer = run(True)
    final = [g["lr"] for g in trainer.optimizers[0].param_groups]
    assert final == [g["lr"] for g in plain_trainer.optimizers[0].param_groups]  # exactly plain's, after fit
    if family == "StepLR":
        assert final == pytest.approx([0.0125, 0.005])
    assert [len(lrs) for lrs in ours.used] == [1] * 4 + [2] * 8
    assert_lrs(ours.used[::4], plain.used[::4])  # every epoch starts at plain's LRs, both groups
    for epoch in (1, 2):  # the added group follows the schedule from its own LR: same ratio as the head
        window = ours.used[4 * epoch : 4 * epoch + 4]
        ratios = [backbone / head for head, backbone in window]
        assert ratios == pytest.approx([ratios[0]] * 4, rel=1e-9)
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr() == final


class Rebase(pl.Callback):
    """Divides param group 0's LR by 10 at the start of epoch 1 (someone else changing the LR)."""

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            trainer.optimizers[0].param_groups[0]["lr"] /= 10


def test_param_group_rebased_by_someone_else_follows_the_schedule_from_there():
    def exp(opt):
        return L.ExponentialLR(opt, gamma=0.5)

    plain, ours = Net(exp, num_batches=4), Net(exp, num_batches=4)
    fit(plain, callbacks=[Rebase()], max_epochs=3)
    fit(ours, callbacks=[Rebase(), StepwiseLR()], max_epochs=3)
    assert_lrs(ours.used_lrs[::4], plain.used_lrs[::4])
    assert ours.used_lrs[5][0] == pytest.approx(0.4 / 10 * 0.5**1.25, rel=1e-9)
    assert ours.used_lrs[5][1] == pytest.approx(0.1 * 0.5**1.25, rel=1e-9)


# ------------------------------------------------------------------------- 15. LR read per epoch by monitors


@pytest.mark.parametrize(
    "make", [lambda o: L.StepLR(o, 1, 0.5), lambda o: L.ExponentialLR(o, 0.5)], ids=["StepLR", "ExponentialLR"]
)
@pytest.mark.parametrize("stepwise_first", [True, False])
def test_early_stopping_on_the_lr_logged_by_learning_rate_monitor(tmp_path, make, stepwise_first):
    def run(stepwise):
        monitor = LearningRateMonitor()
        stop = EarlyStopping("lr-SGD", mode="min", stopping_threshold=0.02, check_on_train_epoch_end=True)
        callbacks = [monitor, stop]
        if stepwise:
            callbacks.insert(0 if stepwise_first else 2, StepwiseLR())
        model = Tiny(make, lr=0.1, batches=10)
        trainer = fit(model, callbacks=callbacks, max_epochs=5, logger=CSVLogger(tmp_path, name=str(stepwise)))
        return trainer, monitor

    plain, plain_monitor = run(False)
    ours, monitor = run(True)
    assert plain_monitor.lrs["lr-SGD"] == pytest.approx([0.1, 0.05, 0.025, 0.0125])
    assert monitor.lrs["lr-SGD"] == plain_monitor.lrs["lr-SGD"]
    assert ours.current_epoch == plain.current_epoch == 4 and ours.should_stop


# ------------------------------------------------------------------------------------------ 16. pickling


def test_trainer_with_the_callback_pickles_after_fit():
    cb = StepwiseLR()
    model = Net(cosine3, num_batches=3)
    trainer = fit(model, callbacks=[cb], max_epochs=2)
    buffer = io.BytesIO()
    torch.save(trainer, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    clone = [c for c in loaded.callbacks if isinstance(c, StepwiseLR)][0]
    assert clone.current_steps_per_epoch == 3 and clone.state_dict() == cb.state_dict()
    assert loaded.lr_scheduler_configs[0].scheduler.last_epoch == 2
    # what ddp_spawn pickles: the callback before fit, and after one (its per-fit state is rebuilt by the next fit)
    assert pickle.loads(pickle.dumps(StepwiseLR(steps_per_epoch=3))).steps_per_epoch == 3
    again = pickle.loads(pickle.dumps(cb))
    model = Net(cosine3, num_batches=3)
    fit(model, callbacks=[again], max_epochs=2)
    assert_lrs(model.used_lrs, expected(cosine3, 3, 6))


@pytest.mark.ddp
def test_ddp_spawn_pickles_the_callback():
    model = Net(cosine3, num_batches=3)
    trainer = pl.Trainer(
        callbacks=[StepwiseLR(), DestroyProcessGroupAtExit()], **trainer_kwargs(max_epochs=2, strategy="ddp_spawn")
    )
    trainer.fit(model)  # the spawned process got the callback by pickle
    assert trainer.state.finished


# -------------------------------------------------------------- between updates, manual optimization


class Between(pl.Callback):
    """Records, after every batch, the param groups' LRs and the scheduler's own LRs."""

    def __init__(self):
        self.pairs = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        sched = trainer.lr_scheduler_configs[0].scheduler
        self.pairs.append(([g["lr"] for g in trainer.optimizers[0].param_groups], sched.get_last_lr()))


@pytest.mark.parametrize("accumulate", [1, 3])
def test_param_groups_hold_the_schedulers_lr_between_updates(accumulate):
    between = Between()
    model = Net(cosine3, num_batches=7)
    trainer = fit(model, callbacks=[StepwiseLR(), between], max_epochs=3, accumulate_grad_batches=accumulate)
    assert len(between.pairs) == 21
    assert all(groups == sched for groups, sched in between.pairs)  # exactly, so the scheduler steps as plain
    final = trainer.lr_scheduler_configs[0].scheduler.get_last_lr()
    assert [g["lr"] for g in trainer.optimizers[0].param_groups] == final


class ForgetsToStep(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.layer = nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(self.layer(batch[0]).pow(2).mean())
        opt.step()

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [L.ExponentialLR(opt, 0.5)]

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2)


def test_manual_optimization_scheduler_never_stepped_warns():
    with pytest.warns(UserWarning, match="was not stepped during epoch 0"):
        fit(ForgetsToStep(), max_epochs=2)
