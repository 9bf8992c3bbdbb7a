"""StepwiseLR leaves the user's scheduler in place: its state, checkpoints and ``lr_schedulers()`` stay plain.

Every scheduler family StepwiseLR drives, in both resume directions (a checkpoint written with the callback
resumed without it, and the reverse) and with -> with from the middle of an epoch.
"""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from test_stepwise_lr import Net, assert_lrs, expected, trainer_kwargs
from torch.optim import lr_scheduler as L

from lightning_efficient.callbacks.stepwise_lr import StepwiseLR
from lightning_efficient.functional import schedules as F

EPOCHS, BATCHES = 4, 3


def _decay(epoch):
    return 0.8**epoch * (1 + 0.1 * epoch)


def _factor(epoch):
    return 0.8


FAMILIES = {
    "StepLR": lambda o: L.StepLR(o, step_size=2, gamma=0.5),
    "MultiStepLR": lambda o: L.MultiStepLR(o, milestones=[1, 3], gamma=0.5),
    "ConstantLR": lambda o: L.ConstantLR(o, factor=0.5, total_iters=2),
    "LinearLR": lambda o: L.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=3),
    "ExponentialLR": lambda o: L.ExponentialLR(o, gamma=0.7),
    "PolynomialLR": lambda o: L.PolynomialLR(o, total_iters=5, power=2.0),
    "CosineAnnealingLR": lambda o: L.CosineAnnealingLR(o, T_max=4, eta_min=0.01),
    "CosineAnnealingWarmRestarts": lambda o: L.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2, eta_min=0.01),
    "LambdaLR": lambda o: L.LambdaLR(o, _decay),
    "MultiplicativeLR": lambda o: L.MultiplicativeLR(o, _factor),
    "SequentialLR": lambda o: L.SequentialLR(
        o, [L.LinearLR(o, 0.25, 1.0, total_iters=1), L.CosineAnnealingLR(o, T_max=3)], milestones=[1]
    ),
    "ChainedScheduler": lambda o: L.ChainedScheduler(
        [L.LinearLR(o, 0.5, 1.0, total_iters=2), L.ExponentialLR(o, gamma=0.8)]
    ),
}
families = pytest.mark.parametrize("family", sorted(FAMILIES))


class Recorder(Net):
    """Also records what ``self.lr_schedulers()`` returns and its state at every epoch end."""

    def __init__(self, family):
        super().__init__(FAMILIES[family], num_batches=BATCHES)
        self.created = None
        self.seen = []

    def configure_optimizers(self):
        config = super().configure_optimizers()
        self.created = config["lr_scheduler"]["scheduler"]
        return config

    def on_train_epoch_end(self):
        sched = self.lr_schedulers()
        self.seen.append((sched, F.scheduler_epoch(sched), list(sched.get_last_lr())))


def run(family, stepwise, tmp_path=None, ckpt_path=None, max_epochs=EPOCHS):
    model = Recorder(family)
    callbacks = [StepwiseLR(verbose=False)] if stepwise else []
    if tmp_path is not None:  # checkpoints at every epoch end and after optimizer step 4 (mid epoch 1)
        callbacks.append(
            ModelCheckpoint(tmp_path / "epoch", save_on_train_epoch_end=True, save_top_k=-1, filename="{epoch}")
        )
        callbacks.append(ModelCheckpoint(tmp_path / "mid", every_n_train_steps=4, save_top_k=-1, filename="{step}"))
    kwargs = trainer_kwargs(max_epochs=max_epochs, enable_checkpointing=tmp_path is not None)
    trainer = pl.Trainer(callbacks=callbacks, **kwargs)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


@families
def test_lr_schedulers_is_the_users_scheduler_with_plain_state(family):
    plain, _ = run(family, stepwise=False)
    model, trainer = run(family, stepwise=True)
    assert trainer.lr_scheduler_configs[0].scheduler is model.created
    assert trainer.lr_scheduler_configs[0].interval == "epoch"
    for epoch, ((sched, n, lrs), (_, plain_n, plain_lrs)) in enumerate(zip(model.seen, plain.seen, strict=True)):
        assert sched is model.created and type(sched) is type(plain.created)
        assert n == plain_n == epoch + 1  # after 3 epochs it says 3, not 0
        assert lrs == plain_lrs  # exactly: the scheduler ran PyTorch's own updates from the same LRs
    assert model.created.state_dict().keys() == plain.created.state_dict().keys()
    # ... while the LRs used per step follow the closed form, equal to plain's at every epoch start
    assert_lrs(model.used_lrs, expected(FAMILIES[family], BATCHES, EPOCHS * BATCHES))
    assert_lrs(model.used_lrs[::BATCHES], plain.used_lrs[::BATCHES])


@families
@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_checkpoints_resume_across_with_and_without(tmp_path, family):
    full_with, _ = run(family, stepwise=True, tmp_path=tmp_path / "with")
    full_plain, _ = run(family, stepwise=False, tmp_path=tmp_path / "plain")
    after_1 = BATCHES * 2  # updates done when the checkpoint after epoch 1 was written

    # written with StepwiseLR, resumed without: the plain epoch-wise schedule, from the checkpoint's epoch
    resumed, trainer = run(family, stepwise=False, ckpt_path=tmp_path / "with" / "epoch" / "epoch=1.ckpt")
    assert trainer.global_step == EPOCHS * BATCHES
    assert_lrs(resumed.used_lrs, full_plain.used_lrs[after_1:])
    assert resumed.seen[-1][1:] == full_plain.seen[-1][1:]

    # written without, resumed with: the per-step schedule from that epoch on
    resumed, trainer = run(family, stepwise=True, ckpt_path=tmp_path / "plain" / "epoch" / "epoch=1.ckpt")
    assert_lrs(resumed.used_lrs, full_with.used_lrs[after_1:])
    assert resumed.seen[-1][1:] == full_plain.seen[-1][1:]

    # with -> with, from the middle of epoch 1: exactly the same per-step LRs
    resumed, trainer = run(family, stepwise=True, ckpt_path=tmp_path / "with" / "mid" / "step=4.ckpt")
    assert_lrs(resumed.used_lrs, full_with.used_lrs[4:])

    # the two runs' checkpoints hold the same scheduler state and optimizer LRs
    a = torch.load(tmp_path / "with" / "epoch" / "epoch=1.ckpt", weights_only=False)
    b = torch.load(tmp_path / "plain" / "epoch" / "epoch=1.ckpt", weights_only=False)
    assert [g["lr"] for g in a["optimizer_states"][0]["param_groups"]] == [
        g["lr"] for g in b["optimizer_states"][0]["param_groups"]
    ]
    assert a["lr_schedulers"][0].keys() == b["lr_schedulers"][0].keys()


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_checkpoint_of_the_old_wrapper_is_refused_with_a_clear_error(tmp_path):
    kwargs = trainer_kwargs(max_epochs=1, enable_checkpointing=True)
    pl.Trainer(callbacks=[ModelCheckpoint(tmp_path, filename="c")], **kwargs).fit(Net(FAMILIES["ExponentialLR"]))
    state = torch.load(tmp_path / "c.ckpt", weights_only=False)
    state["lr_schedulers"][0] = {"stepwise_lr": 1, "scheduler": state["lr_schedulers"][0], "epoch": 0}
    torch.save(state, tmp_path / "old.ckpt")
    trainer = pl.Trainer(callbacks=[StepwiseLR()], **trainer_kwargs(max_epochs=2))
    with pytest.raises(ValueError, match="lightning_efficient 0.1"):
        trainer.fit(Net(FAMILIES["ExponentialLR"]), ckpt_path=tmp_path / "old.ckpt")
