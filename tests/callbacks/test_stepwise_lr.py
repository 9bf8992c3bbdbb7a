"""StepwiseLR callback: per-step LRs under real Trainer settings (CPU, tiny model)."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from torch import nn
from torch.optim import lr_scheduler as L
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from trainer_helpers import TRAINER_KW, ddp_script_env

from lightning_efficient.callbacks.stepwise_lr import StepwiseLR
from lightning_efficient.functional import schedules as F

LRS = (0.4, 0.1)  # two param groups with different base LRs


def trainer_kwargs(**overrides):
    # log_every_n_steps=1: the runs here are shorter than Lightning's default logging interval (its warning)
    return {**TRAINER_KW, "num_sanity_val_steps": 0, "log_every_n_steps": 1, **overrides}


def make_optimizer(module: nn.Module | None = None, lrs=LRS):
    if module is None:
        module = nn.Linear(3, 1)
    return torch.optim.SGD([{"params": [module.weight], "lr": lrs[0]}, {"params": [module.bias], "lr": lrs[1]}], lr=1.0)


class Net(pl.LightningModule):
    """Records the LRs each optimizer update uses (module hook runs after the callbacks' hook)."""

    def __init__(self, make_scheduler, num_batches=7, batch_size=2, interval="epoch", frequency=1):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.make_scheduler = make_scheduler
        self.num_batches = num_batches
        self.batch_size = batch_size
        self.interval = interval
        self.frequency = frequency
        self.used_lrs: list[list[float]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def on_before_optimizer_step(self, optimizer):
        self.used_lrs.append([g["lr"] for g in optimizer.param_groups])

    def configure_optimizers(self):
        opt = make_optimizer(self.layer)
        if self.make_scheduler is None:
            return opt
        config = {"scheduler": self.make_scheduler(opt), "interval": self.interval, "frequency": self.frequency}
        return {"optimizer": opt, "lr_scheduler": config}

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        n = self.num_batches * self.batch_size
        data = TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))
        return DataLoader(data, batch_size=self.batch_size)


def expected(make_scheduler, steps_per_epoch, num_steps):
    return F.stepwise_lrs(make_scheduler(make_optimizer()), steps_per_epoch, num_steps)


def assert_lrs(actual, wanted):
    assert len(actual) == len(wanted)
    for k, (a, w) in enumerate(zip(actual, wanted, strict=True)):
        assert a == pytest.approx(w, rel=1e-9, abs=1e-15), f"update {k}: {a} vs {w}"


def fit(model, callbacks=None, **overrides):
    trainer = pl.Trainer(callbacks=[StepwiseLR()] if callbacks is None else callbacks, **trainer_kwargs(**overrides))
    trainer.fit(model)
    return trainer


def cosine3(opt):
    return L.CosineAnnealingLR(opt, T_max=3, eta_min=0.01)


def warmup_then_cosine(opt):
    return L.SequentialLR(opt, [L.LinearLR(opt, 0.25, 1.0, total_iters=1), L.CosineAnnealingLR(opt, 2)], [1])


# ------------------------------------------------------------------------------------------ basics


def test_cosine_per_step_matches_epoch_boundaries_and_param_groups():
    model = Net(cosine3, num_batches=5)
    trainer = fit(model, max_epochs=3)
    assert_lrs(model.used_lrs, expected(cosine3, 5, 15))
    real = F.epochwise_lrs(cosine3(make_optimizer()), 3)
    for epoch in range(3):  # update e*S uses the LR the epoch-wise scheduler gives in epoch e
        assert model.used_lrs[epoch * 5] == pytest.approx(real[epoch], rel=1e-9)
    assert model.used_lrs[0] == pytest.approx(list(LRS))  # no lag
    # each group follows its own base LR: lr - eta_min scales with base - eta_min
    for a, b in model.used_lrs:
        assert (a - 0.01) / (0.4 - 0.01) == pytest.approx((b - 0.01) / (0.1 - 0.01), rel=1e-9)
    config = trainer.lr_scheduler_configs[0]  # the user's scheduler, stepped per epoch by Lightning
    assert type(config.scheduler) is L.CosineAnnealingLR and config.interval == "epoch"
    assert config.scheduler.last_epoch == 3 and trainer.global_step == 15
    assert config.scheduler.get_last_lr() == pytest.approx(F.epochwise_lrs(cosine3(make_optimizer()), 4)[3])


def test_sequential_warmup_cosine():
    model = Net(warmup_then_cosine, num_batches=4)
    fit(model, max_epochs=3)
    want = expected(warmup_then_cosine, 4, 12)
    assert_lrs(model.used_lrs, want)
    assert model.used_lrs[1][0] == pytest.approx(0.4 * (0.25 + 0.75 / 4))  # warmup ramps within epoch 0


def chained(opt):
    return L.ChainedScheduler([L.LinearLR(opt, 0.5, 1.0, total_iters=2), L.CosineAnnealingLR(opt, 2, eta_min=0.01)])


def test_chained_scheduler_past_t_max():
    model = Net(chained, num_batches=3)
    with pytest.warns(UserWarning, match="ends at epoch 2"):
        fit(model, max_epochs=4)
    assert_lrs(model.used_lrs, expected(chained, 3, 12))
    real = F.epochwise_lrs(chained(make_optimizer()), 4)
    for epoch in range(4):  # includes PyTorch's additive cosine restart at epoch 3
        assert model.used_lrs[3 * epoch] == pytest.approx(real[epoch], rel=1e-9)


@pytest.mark.parametrize(("num_batches", "accumulate", "steps"), [(7, 3, 3), (6, 2, 3)])
def test_gradient_accumulation_with_partial_last_window(num_batches, accumulate, steps):
    model = Net(cosine3, num_batches=num_batches)
    trainer = fit(model, max_epochs=3, accumulate_grad_batches=accumulate)
    assert trainer.global_step == 3 * steps
    assert_lrs(model.used_lrs, expected(cosine3, steps, 3 * steps))


def test_max_steps_without_and_with_max_epochs():
    model = Net(cosine3, num_batches=4)
    fit(model, max_steps=10, max_epochs=-1)
    assert_lrs(model.used_lrs, expected(cosine3, 4, 10))
    model = Net(cosine3, num_batches=4)
    fit(model, max_steps=6, max_epochs=2)
    assert_lrs(model.used_lrs, expected(cosine3, 4, 6))
    model = Net(cosine3, num_batches=4)
    fit(model, max_steps=50, max_epochs=2)
    assert_lrs(model.used_lrs, expected(cosine3, 4, 8))


@pytest.mark.parametrize(("limit", "steps"), [(3, 3), (0.5, 5)])
def test_limit_train_batches(limit, steps):
    model = Net(cosine3, num_batches=10)
    fit(model, max_epochs=3, limit_train_batches=limit)
    assert_lrs(model.used_lrs, expected(cosine3, steps, 3 * steps))


class ShrinkingNet(Net):
    def train_dataloader(self):  # 4 batches in epoch 0, then 2
        self.num_batches = 4 if self.trainer.current_epoch == 0 else 2
        return super().train_dataloader()


def test_epoch_length_changing_between_epochs():
    model = ShrinkingNet(cosine3)
    fit(model, max_epochs=3, reload_dataloaders_every_n_epochs=1)
    fn = F.schedule_function(cosine3(make_optimizer()))
    positions = [0, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5]  # completed epochs + updates this epoch / S of this epoch
    assert_lrs(model.used_lrs, [fn(p) for p in positions])


def test_frequency_two_epochs_per_scheduler_epoch():
    def step(opt):
        return L.StepLR(opt, step_size=1, gamma=0.5)

    model = Net(step, num_batches=2, frequency=2)
    fit(model, max_epochs=4)
    assert [lr[0] for lr in model.used_lrs] == pytest.approx([0.4] * 4 + [0.2] * 4)


@pytest.mark.parametrize("monitor_first", [True, False])
def test_learning_rate_monitor_logs_the_schedulers_epoch_lr(tmp_path, monitor_first):
    """LearningRateMonitor sees the param groups between updates: the scheduler's LR, once per epoch, as plain."""
    import csv

    from pytorch_lightning.loggers import CSVLogger

    model = Net(cosine3, num_batches=3)
    cb = StepwiseLR()
    trainer = fit(
        model,
        callbacks=[LearningRateMonitor(), cb] if monitor_first else [cb, LearningRateMonitor()],
        max_epochs=3,
        logger=CSVLogger(tmp_path, name="lr"),
        log_every_n_steps=1,
    )
    rows = list(csv.DictReader(open(Path(trainer.logger.log_dir) / "metrics.csv")))
    logged = {int(r["step"]): float(r["lr-SGD/pg1"]) for r in rows if r.get("lr-SGD/pg1")}
    assert sorted(logged) == [0, 3, 6]  # once per epoch, at its start
    real = F.epochwise_lrs(cosine3(make_optimizer()), 3)
    assert [logged[k] for k in (0, 3, 6)] == pytest.approx([lrs[0] for lrs in real], rel=1e-12)
    assert cb.last_lrs == [pytest.approx(model.used_lrs[-1], rel=1e-12)]  # the per-step LR of the last update


# --------------------------------------------------------------------------------- resume


@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
@pytest.mark.parametrize("where", ["epoch_end", "mid_epoch"])
def test_resume_gives_identical_lr_sequence(tmp_path, where):
    full = Net(warmup_then_cosine, num_batches=5)
    fit(full, max_epochs=3)

    first = Net(warmup_then_cosine, num_batches=5)
    if where == "epoch_end":  # saved in on_train_epoch_end after epoch 0
        every, epoch, in_epoch = 5, 0, 5
        ckpt_cb = ModelCheckpoint(dirpath=tmp_path, save_on_train_epoch_end=True, save_top_k=-1, filename="{step}")
    else:  # saved in on_train_batch_end of the 3rd batch of epoch 1
        every, epoch, in_epoch = 7, 1, 2
        ckpt_cb = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=7, save_top_k=-1, filename="{step}")
    fit(first, callbacks=[StepwiseLR(), ckpt_cb], max_epochs=3, enable_checkpointing=True)
    ckpt = tmp_path / f"step={every}.ckpt"
    state = torch.load(ckpt, weights_only=False)
    assert state["global_step"] == every
    scheduler_state = state["lr_schedulers"][0]  # the plain SequentialLR state: stepped once, after epoch 0
    assert scheduler_state["last_epoch"] == 1 and "stepwise_lr" not in scheduler_state
    assert state["epoch"] == epoch and every - epoch * 5 == in_epoch

    resumed = Net(warmup_then_cosine, num_batches=5)
    trainer = pl.Trainer(callbacks=[StepwiseLR()], **trainer_kwargs(max_epochs=3))
    trainer.fit(resumed, ckpt_path=ckpt)
    assert trainer.global_step == 15
    assert_lrs(resumed.used_lrs, full.used_lrs[every:])


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_resume_from_checkpoint_written_without_callback(tmp_path):
    full = Net(cosine3, num_batches=4)
    fit(full, max_epochs=3)
    plain = Net(cosine3, num_batches=4)
    fit(plain, callbacks=[ModelCheckpoint(dirpath=tmp_path, filename="plain")], max_epochs=1, enable_checkpointing=True)
    resumed = Net(cosine3, num_batches=4)
    trainer = pl.Trainer(callbacks=[StepwiseLR()], **trainer_kwargs(max_epochs=3))
    trainer.fit(resumed, ckpt_path=tmp_path / "plain.ckpt")
    assert_lrs(resumed.used_lrs, full.used_lrs[4:])


def test_state_dicts_round_trip():
    cb = StepwiseLR(steps_per_epoch=6)
    cb._updates = {1: [2, 5]}  # manual optimization: 5 updates of config 1's optimizer in epoch 2
    other = StepwiseLR()
    other.load_state_dict(cb.state_dict())
    assert other.steps_per_epoch == 6 and other.state_dict() == cb.state_dict()
    assert StepwiseLR(steps_per_epoch=3).load_state_dict(cb.state_dict()) is None  # the given S wins
    assert pickle.loads(pickle.dumps(cb)).state_dict() == cb.state_dict()


# ------------------------------------------------------------------------ special trainer setups


class _Unsized(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            yield torch.randn(3, generator=g), torch.randn(1, generator=g)


class UnsizedNet(Net):
    def train_dataloader(self):
        return DataLoader(_Unsized(self.num_batches * 2), batch_size=2)


def test_iterable_dataset_without_steps_per_epoch_warns_and_trains_per_epoch_like_plain_lightning():
    plain = UnsizedNet(cosine3, num_batches=4)
    fit(plain, callbacks=[], max_epochs=3)
    model = UnsizedNet(cosine3, num_batches=4)
    with pytest.warns(UserWarning, match=r"StepwiseLR\(steps_per_epoch=N\)"):
        fit(model, max_epochs=3)
    assert model.used_lrs == plain.used_lrs and len(plain.used_lrs) == 12  # per epoch, as without the callback
    model = UnsizedNet(cosine3, num_batches=4)
    fit(model, callbacks=[StepwiseLR(steps_per_epoch=4)], max_epochs=3)
    assert_lrs(model.used_lrs, expected(cosine3, 4, 12))


class TwoOptimizers(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.a = nn.Linear(3, 1)
        self.b = nn.Linear(3, 1)
        self.used = {0: [], 1: []}

    def training_step(self, batch, batch_idx):
        x, y = batch
        opts = self.optimizers()
        for i, (opt, layer) in enumerate(zip(opts, (self.a, self.b), strict=False)):
            if i == 1 and batch_idx % 2:  # optimizer b updates every other batch
                continue
            opt.zero_grad()
            self.manual_backward(nn.functional.mse_loss(layer(x), y))
            self.used[i].append(opt.optimizer.param_groups[0]["lr"])
            opt.step()
        if self.trainer.is_last_batch:
            for sch in self.lr_schedulers():
                sch.step()  # the usual manual-optimization pattern: the user steps the real schedulers

    def configure_optimizers(self):
        oa = torch.optim.SGD(self.a.parameters(), lr=0.2)
        ob = torch.optim.SGD(self.b.parameters(), lr=0.1)
        return [oa, ob], [L.ExponentialLR(oa, 0.5), L.CosineAnnealingLR(ob, T_max=4)]

    def train_dataloader(self):
        data = TensorDataset(torch.randn(8, 3), torch.randn(8, 1))
        return DataLoader(data, batch_size=2)


def test_manual_optimization_two_optimizers():
    model = TwoOptimizers()
    fit(model, max_epochs=2)
    # a: one update per batch, S = 4
    want_a = [0.2 * 0.5 ** (k / 4) for k in range(8)]
    assert model.used[0] == pytest.approx(want_a)
    # b: its own counter advances once per update of b (2 per epoch); position = epoch + j / S
    want_b = [0.1 * (1 + math.cos(math.pi * e / 4)) / 2 for e in (0, 0.25, 1, 1.25)]
    assert model.used[1] == pytest.approx(want_b)
    # the user's schedulers are the real ones, stepped by the user once per epoch, with plain values
    sa, sb = model.lr_schedulers()
    assert type(sa) is L.ExponentialLR and sa.last_epoch == 2 == sb.last_epoch
    assert sa.get_last_lr() == pytest.approx([0.05]) and sb.get_last_lr() == pytest.approx([0.05])


@pytest.mark.parametrize("init_scale", [2.0**19, 2.0**17])
def test_grad_scaler_skipped_steps_advance_schedule_and_leave_the_scheduler_plain(init_scale):
    """Real ``16-mixed`` with a GradScaler on CPU (fp16 autocast); policy: skipped steps advance the schedule.

    When the last step of an epoch is skipped, Lightning's epoch step of the scheduler reads the per-step LR
    (no post-step hook ran); the callback redoes that step, so the scheduler ends exactly where plain's does.
    """
    from pytorch_lightning.plugins.precision import MixedPrecision

    class Counting(Net):
        def on_train_start(self):
            self.real_steps = []
            self.trainer.optimizers[0].register_step_post_hook(lambda *a: self.real_steps.append(self.global_step))

    def exp(opt):
        return L.ExponentialLR(opt, 0.5)

    def run(callbacks):
        torch.manual_seed(1)  # the data and weights decide which fp16 steps overflow: the same in every run
        model = Counting(exp, num_batches=4)
        # a large initial scale makes the first fp16 backward passes overflow: the GradScaler skips those steps
        precision = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=init_scale))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = pl.Trainer(callbacks=callbacks, plugins=[precision], **trainer_kwargs(max_epochs=3))
            trainer.fit(model)
        return model, trainer, sorted({str(w.message) for w in caught if "lr_scheduler.step()" in str(w.message)})

    plain, plain_trainer, plain_warnings = run([])
    model, trainer, caught = run([StepwiseLR()])
    for run_model, run_warnings in ((plain, plain_warnings), (model, caught)):
        # PyTorch's own warning comes exactly when the whole first epoch was skipped, with or without StepwiseLR
        assert bool(run_warnings) == (min(run_model.real_steps) >= 4)
    assert 0 < len(model.real_steps) < 12  # some skipped, some taken (not the same as plain's: other LRs)
    assert {3, 7} - set(model.real_steps)  # the last step of an epoch was skipped: the redo was needed
    assert trainer.global_step == 12
    assert_lrs(model.used_lrs, expected(exp, 4, 12))  # skipped attempts advance the schedule too
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.get_last_lr() == plain_trainer.lr_scheduler_configs[0].scheduler.get_last_lr()
    assert scheduler.last_epoch == 3


# ----------------------------------------------------------------- what is converted / left alone


def test_left_alone_schedulers_and_messages():
    class MyLR(L.LRScheduler):
        def get_lr(self):
            return list(self.base_lrs)

    class Multi(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.layers = nn.ModuleList(nn.Linear(3, 1) for _ in range(4))

        def training_step(self, batch, batch_idx):
            return None

        def configure_optimizers(self):
            opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in self.layers]
            scheds = [
                {"scheduler": L.OneCycleLR(opts[0], max_lr=0.1, total_steps=100)},
                {"scheduler": L.ExponentialLR(opts[1], 0.5), "interval": "step"},
                {"scheduler": MyLR(opts[2])},
                {"scheduler": L.ExponentialLR(opts[3], 0.5)},
            ]
            return opts, scheds

    with pytest.warns(UserWarning) as record:
        model = Multi()
        trainer = pl.Trainer(callbacks=[StepwiseLR()], **trainer_kwargs(max_epochs=1))
        trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 3), torch.randn(4, 1)), batch_size=2))
    messages = " ".join(str(w.message) for w in record)
    assert "OneCycleLR" in messages and "MyLR" in messages and "register_schedule" in messages
    kinds = [type(c.scheduler).__name__ for c in trainer.lr_scheduler_configs]
    assert kinds == ["OneCycleLR", "ExponentialLR", "MyLR", "ExponentialLR"]  # configs are never replaced
    assert [c.interval for c in trainer.lr_scheduler_configs] == ["epoch", "step", "epoch", "epoch"]
    driven = [cb for cb in trainer.callbacks if isinstance(cb, StepwiseLR)][0].schedulers
    assert len(driven) == 1 and driven[0] is trainer.lr_scheduler_configs[3].scheduler


def test_horizon_warning_and_warmup_cosine_follows_trainer():
    with pytest.warns(UserWarning, match="ends at epoch 3 but the run lasts 4 epochs"):
        fit(Net(cosine3, num_batches=2), max_epochs=4)

    def warm(opt):
        return L.LambdaLR(opt, F.warmup_cosine(warmup_epochs=1))

    model = Net(warm, num_batches=4)
    trainer = fit(model, max_epochs=3)
    fn = trainer.lr_scheduler_configs[0].scheduler.lr_lambdas[0]
    assert fn.total_epochs == 3
    lrs = [lr[0] for lr in model.used_lrs]
    assert lrs[:5] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert lrs[8] == pytest.approx(0.2) and lrs[-1] == pytest.approx(0.4 * (1 + math.cos(math.pi * 7 / 8)) / 2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="steps_per_epoch"):
        StepwiseLR(steps_per_epoch=0)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        StepwiseLR(steps_per_epoch=2.5)
    with pytest.raises(TypeError, match="verbose"):
        StepwiseLR(verbose="yes")


# ---------------------------------------------------------------------------------------- DDP


@pytest.mark.ddp
def test_ddp_two_cpu_processes_identical_lrs(tmp_path):
    """DDP (2 CPU processes, gloo): every rank uses the same LR at every step, S computed per rank."""
    script = Path(__file__).with_name("ddp_stepwise_script.py")
    env = ddp_script_env()
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=240, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    per_rank = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert per_rank[0]["lrs"] == per_rank[1]["lrs"]
    # 12 samples, 2 ranks, batch 2 -> 3 batches per rank per epoch = S
    assert per_rank[0]["steps_per_epoch"] == 3
    assert_lrs(per_rank[0]["lrs"], expected(cosine3, 3, 9))


def test_reused_warmup_cosine_follows_each_fit_and_s_is_public():
    schedule = F.warmup_cosine(warmup_epochs=1, start_factor=0.1)

    def make(opt):
        return L.LambdaLR(opt, schedule)

    for epochs in (4, 2):  # long run first: a stale horizon would cut the second cosine short silently
        cb = StepwiseLR(verbose=False)
        model = Net(make, num_batches=5)
        fit(model, callbacks=[cb], max_epochs=epochs)
        assert schedule.total_epochs == epochs
        assert cb.current_steps_per_epoch == 5
        assert_lrs(model.used_lrs, expected(make, 5, 5 * epochs))
    assert StepwiseLR().current_steps_per_epoch is None


def test_trainer_with_converted_schedulers_pickles(tmp_path):
    """torch.save of the Trainer's scheduler configs after a fit (the schedule functions are not closures)."""

    def warm(opt):
        return L.SequentialLR(opt, [L.LambdaLR(opt, F.warmup_cosine(1)), L.ExponentialLR(opt, 0.5)], [2])

    trainer = fit(Net(warm, num_batches=2), max_epochs=2)
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    torch.save(trainer.lr_scheduler_configs, tmp_path / "configs.pt")
    loaded = torch.load(tmp_path / "configs.pt", weights_only=False)
    assert type(loaded[0].scheduler) is L.SequentialLR and loaded[0].scheduler.last_epoch == 2
    fn = F.schedule_function(scheduler)
    assert pickle.loads(pickle.dumps(fn))(1.5) == pytest.approx(fn(1.5))
