"""``tune()``: short real fits on copies of tiny models (CPU, 8x8 images, batches of 4).

Nothing here times anything or asserts a speed: the tests check what ``tune()`` measures, which settings each
step ran with, what it leaves behind (the model, the RNG streams, the backend flags, the user's callbacks and
files), how it handles failing candidates, every kind of training data and the Lightning set-ups real projects
have (callbacks by type, schedulers that monitor validation metrics, ``self.logger``, finders, manual
optimization), and that the report never contradicts it.
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning import callbacks as plc
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info
from trainer_helpers import TRAINER_KW, ddp_script_env

import lightning_efficient as le
from lightning_efficient.callbacks.roles import ROLES
from lightning_efficient.functional.layout import is_channels_last
from lightning_efficient.tuning import probe, store
from lightning_efficient.tuning.fits import WARMUP
from lightning_efficient.tuning.policy import Decision
from lightning_efficient.tuning.records import Candidate, Window
from lightning_efficient.tuning.tuner import kept_callbacks

CPU = dict(accelerator="cpu", devices=1, verbose=False)
ALL = dict(CPU, max_seconds=1e6)  #: no planned length and a budget that affords every pair: all measured
NONE = dict(CPU, max_seconds=1e-6)  #: a budget that affords no pair: the baseline only
N, BATCH = 32, 4


def _images(n: int = N, seed: int = 0, dtype: torch.dtype = torch.float32) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g) if dtype == torch.uint8 else None
    x = torch.randn(n, 3, 8, 8, generator=g) if x is None else x
    return TensorDataset(x, torch.randint(0, 2, (n,), generator=g))


def _loader(**kw) -> DataLoader:
    return DataLoader(_images(), batch_size=BATCH, **kw)


class Net(pl.LightningModule):
    """Conv, batch norm, dropout (draws from the global RNG), SGD with momentum, a per-step LR schedule.

    ``fail``: ``"autocast"`` raises under CPU autocast (bf16-mixed), ``"channels_last"`` raises when the conv
    weights are channels_last, ``"always"`` always raises.
    """

    def __init__(self, fail: str | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.Dropout(0.3),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4, 2),
        )
        self.fail = fail

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.fail == "autocast" and torch.is_autocast_enabled("cpu"):
            raise NotImplementedError("this model has an op without a bf16 kernel")
        if self.fail == "channels_last" and is_channels_last(self.net[0].weight):
            raise NotImplementedError("this model calls .view() on a channels_last tensor")
        if self.fail == "always":
            raise ValueError("broken model")
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _seed(seed: int = 0) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _rng() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _assert_same_rng(a: tuple, b: tuple) -> None:
    assert torch.equal(a[0], b[0]) and a[1] == b[1], "torch or python RNG changed"
    assert a[2][0] == b[2][0] and np.array_equal(a[2][1], b[2][1]) and a[2][2:] == b[2][2:], "numpy RNG changed"


def _flags() -> tuple:
    cudnn = torch.backends.cudnn
    return (
        cudnn.benchmark,
        cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.get_float32_matmul_precision(),
    )


@pytest.fixture
def keep_flags():
    before = _flags()
    yield
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[:2]
    torch.use_deterministic_algorithms(before[2], warn_only=before[3])
    torch.set_float32_matmul_precision(before[4])


def _by(result) -> dict[str, Decision]:
    return {d.factor: d for d in result.decisions}


# ------------------------------------------------------------------------------------------------ state
def _fit_and_snapshot(model: Net, loader: DataLoader, steps: int = 6) -> dict:
    trainer = pl.Trainer(**TRAINER_KW, max_steps=steps)
    trainer.fit(model, loader)
    opt = trainer.optimizers[0].state_dict()
    return {
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "momentum": [opt["state"][i]["momentum_buffer"].clone() for i in sorted(opt["state"])],
        "lr": [g["lr"] for g in opt["param_groups"]],
        "last_epoch": trainer.lr_scheduler_configs[0].scheduler.last_epoch,
    }


def test_a_fit_after_tune_is_bit_identical_to_the_same_fit_without_it():
    def run(tuned: bool, draw_before_fit: bool = False) -> dict:
        _seed(0)
        model, loader = Net(), _loader(shuffle=True)  # shuffled from the global RNG
        if tuned:
            result = le.tune(model, loader, precisions=["32-true", "bf16-mixed"], num_workers=[0, 1], **ALL)
            assert {"channels_last", "precision"} <= set(result.measured())
        if draw_before_fit:
            torch.rand(1)
        return _fit_and_snapshot(model, loader)

    plain = run(tuned=False)
    tuned = run(tuned=True)
    assert all(torch.equal(tuned["weights"][k], plain["weights"][k]) for k in plain["weights"])
    assert all(torch.equal(a, b) for a, b in zip(tuned["momentum"], plain["momentum"], strict=False))
    assert tuned["lr"] == plain["lr"] == [0.1 * 0.5**3] and tuned["last_epoch"] == 6
    moved = run(tuned=False, draw_before_fit=True)  # the comparison sees the RNG
    assert not all(torch.equal(moved["weights"][k], plain["weights"][k]) for k in plain["weights"])


def test_tune_leaves_the_model_rng_and_backend_flags_as_they_were(keep_flags):
    _seed(1)
    model = Net()
    weights = {k: (v.detach().clone(), v.stride()) for k, v in model.state_dict().items()}
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    flags, rng = _flags(), _rng()
    # The measuring Trainers set cudnn.benchmark=False and deterministic algorithms; copies go channels_last.
    result = le.tune(model, _loader(shuffle=True), benchmark=False, deterministic=True, num_workers=False, **ALL)
    assert _by(result)["channels_last"].ratios
    assert _flags() == flags
    _assert_same_rng(_rng(), rng)
    state = model.state_dict()
    assert all(torch.equal(state[k], w) and state[k].stride() == s for k, (w, s) in weights.items())
    assert model._trainer is None and model.training


def test_rng_is_restored_when_the_data_hooks_draw_random_numbers():
    class SplitData(pl.LightningDataModule):
        def setup(self, stage: str) -> None:
            self.order = torch.randperm(N)  # a random split, as random_split() without a generator does

        def train_dataloader(self):
            return DataLoader(torch.utils.data.Subset(_images(), self.order.tolist()), batch_size=BATCH)

    _seed(2)
    model, dm = Net(), SplitData()
    rng = _rng()
    le.tune(model, datamodule=dm, channels_last=False, num_workers=False, **NONE)
    _assert_same_rng(_rng(), rng)


# ------------------------------------------------------------------------------------------------ failures
@pytest.mark.parametrize(
    "fail,kwargs,factor",
    [
        ("autocast", dict(precisions=["32-true", "bf16-mixed"], channels_last=False), "precision"),
        ("channels_last", dict(precisions=["32-true"]), "channels_last"),
    ],
)
def test_a_candidate_that_raises_is_reported_and_never_chosen(fail, kwargs, factor):
    result = le.tune(Net(fail=fail), _loader(), num_workers=False, **kwargs, **ALL)
    d = _by(result)[factor]
    assert d.verdict == "failed" and "NotImplementedError: this model" in d.reason
    assert result.chosen == Candidate() and result.speedup == 1.0
    assert "| failed |" in result.table()


def test_the_current_settings_failing_raises_with_the_error():
    with pytest.raises(RuntimeError, match=r"current settings \(32-true\) fail to train: ValueError: broken model"):
        le.tune(Net(fail="always"), _loader(), num_workers=False, **ALL)


def test_uint8_batches_without_the_converting_callback_say_where_it_goes():
    with pytest.raises(RuntimeError, match=r"uint8 images .* callbacks=\[GPUAugmentation"):
        le.tune(Net(), DataLoader(_images(dtype=torch.uint8), batch_size=BATCH), num_workers=False, **NONE)


# ------------------------------------------------------------------------------------------------ data sources
class RecordingData(pl.LightningDataModule):
    """uint8 images: only its ``on_after_batch_transfer`` makes them float, so a fit that skips it fails."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = {"transfer": 0, "after": 0}  # shared with shallow copies

    def train_dataloader(self):
        return DataLoader(_images(dtype=torch.uint8), batch_size=BATCH)

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self.calls["transfer"] += 1
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.calls["after"] += 1
        return batch[0].float() / 255, batch[1]


@pytest.mark.parametrize("as_positional", [False, True])
def test_a_datamodule_and_its_batch_hooks_are_used(as_positional):
    dm = RecordingData()
    args = (dm,) if as_positional else ()  # tune(model, dm), as trainer.fit(model, dm)
    result = le.tune(Net(), *args, datamodule=None if as_positional else dm, num_workers=[0, 1], **ALL)
    assert {"channels_last", "num_workers"} <= set(result.measured())  # uint8 would fail without the hook
    assert dm.calls["transfer"] == dm.calls["after"] > 0
    assert result.baseline.batch_size == BATCH and result.current == Candidate(num_workers=0)
    with pytest.raises(ValueError, match="not both"):
        le.tune(Net(), dm, datamodule=dm, **NONE)


def test_a_model_that_defines_train_dataloader():
    class NetWithData(Net):
        def train_dataloader(self):
            return _loader()

    result = le.tune(NetWithData(), num_workers=[0, 1], channels_last=False, **ALL)
    assert result.current == Candidate(num_workers=0) and _by(result)["num_workers"].value == 1


def test_no_data_at_all_is_an_error():
    with pytest.raises(ValueError, match="no training data"):
        le.tune(Net(), **NONE)


class Stream(IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(5):
            yield torch.randn(BATCH, 3, 8, 8, generator=g), torch.randint(0, 2, (BATCH,), generator=g)


def test_an_iterable_dataset_is_measured_without_its_workers_and_listed_counts_are_warned_about():
    with pytest.warns(UserWarning, match=r"tune\(num_workers=\[0, 1\]\): not measured \(the dataset is an Iterable"):
        result = le.tune(Net(), DataLoader(Stream(), batch_size=None), num_workers=[0, 1], **NONE)
    assert result.current.num_workers is None and "num_workers" not in {d.factor for d in result.decisions}
    assert any(n.startswith("num_workers not measured") and "IterableDataset" in n for n in result.notes)


def test_a_one_shot_iterator_is_refused_before_anything_runs():
    data = iter(list(Stream()))
    with pytest.raises(ValueError, match="one-shot iterator .list_iterator.*restarts"):
        le.tune(Net(), data, **NONE)
    assert len(list(data)) == 5  # untouched


def test_a_dataset_or_a_validation_loader_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"a Dataset \(TensorDataset\): wrap it in a DataLoader"):
        le.tune(Net(), _loader().dataset, **NONE)
    with pytest.raises(ValueError, match="not both; tune\\(\\) takes no validation data"):
        le.tune(Net(), _loader(), _loader(), **NONE)  # as trainer.fit(model, train_loader, val_loader)


@pytest.mark.parametrize("batches", [1, 2])
def test_a_short_reiterable_loader_is_cycled_over_epochs(batches):
    class Short:  # re-iterable: each epoch yields the same batches again
        def __iter__(self):
            return iter(list(Stream())[:batches])

    result = le.tune(Net(), Short(), **ALL)
    assert _by(result)["channels_last"].ratios and result.baseline.step_s > 0


def test_an_empty_loader_is_a_clear_error():
    class Empty:
        def __iter__(self):
            return iter(())

    with pytest.raises(RuntimeError, match=r"fail to train: MeasurementError: the training data ran out after 0"):
        le.tune(Net(), Empty(), **NONE)


# ------------------------------------------------------------------------------------------------ in one fit
class Origin(Dataset):
    """Images whose last pixel says where they were loaded: 1.0 in a worker process, 0.0 in the main one. Loading
    one takes 5 ms (a slow loader), so that the steps wait for data and more workers are worth measuring."""

    def __init__(self) -> None:
        self.data = _images()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        x, y = self.data[i]
        x = x.clone()
        x[-1, -1, -1] = float(get_worker_info() is not None)
        time.sleep(0.005)
        return x, y


class Spy(Net):
    """Records at every training step (class-level: tune() trains copies) whether the batch came from a worker,
    whether the batch, a conv weight, its momentum and a depthwise weight ``[C, 1, k, k]`` (only its strides tell
    the layouts apart) are channels_last, and one draw from the global RNG."""

    seen: list[tuple] = []

    def __init__(self) -> None:
        super().__init__()
        self.net.insert(0, nn.Conv2d(3, 3, 3, padding=1, groups=3))

    def training_step(self, batch, batch_idx):
        weight = self.net[1].weight
        buf = self.optimizers().optimizer.state.get(weight, {}).get("momentum_buffer")
        Spy.seen.append(
            (
                bool(batch[0][:, -1, -1, -1].eq(1).all()),
                is_channels_last(batch[0]),
                is_channels_last(weight),
                None if buf is None else is_channels_last(buf),
                is_channels_last(self.net[0].weight),
                float(torch.rand(())),
            )
        )
        return super().training_step(batch, batch_idx)


def test_one_fit_switches_layout_loader_and_optimizer_state_by_its_plan(monkeypatch):
    Spy.seen, steps = [], []
    end = probe.Probe.on_train_batch_end

    def record(self, trainer, *args):
        steps.append((self.side, self.plan[0][1] if self.plan else None))
        end(self, trainer, *args)

    monkeypatch.setattr(probe.Probe, "on_train_batch_end", record)
    model = Spy()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = le.tune(model, DataLoader(Origin(), batch_size=BATCH, shuffle=True), num_workers=[0, 1], **ALL)
    assert len(Spy.seen) == len(steps) and {"channels_last", "num_workers"} <= set(result.measured())
    for (side, _), (worker, batch_cl, weight_cl, buf_cl, depthwise_cl, _) in zip(steps, Spy.seen, strict=False):
        assert batch_cl == weight_cl == depthwise_cl == side.channels_last and buf_cl in (None, batch_cl)
        assert worker == (side.num_workers == 1)
    assert {s.channels_last for s, _ in steps} == {False, True} and {s.num_workers for s, _ in steps} == {0, 1}
    # Common random numbers: the j-th steps of the two windows of a pair drew the same numbers.
    draws: dict = {}
    for (_, tag), seen in zip(steps, Spy.seen, strict=False):
        if tag is not None:
            draws.setdefault((tag.serial, tag.index), {}).setdefault(tag.side, []).append(seen[-1])
    pairs = [d for d in draws.values() if set(d) == {"new", "old"}]
    assert pairs and all(d["new"] == d["old"] for d in pairs)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not is_channels_last(model.net[1].weight)


def test_the_warm_up_and_windows_are_the_plan(monkeypatch):
    plans = []
    init = probe.Probe.__init__
    monkeypatch.setattr(probe.Probe, "__init__", lambda self, plan, *a: plans.append(plan) or init(self, plan, *a))
    le.tune(Net(), _loader(), num_workers=False, **NONE)
    (plan,) = plans
    assert [tag for _, tag in plan[:WARMUP]] == [None] * WARMUP and all(tag for _, tag in plan[WARMUP:])


# ------------------------------------------------------------------------------------------------ choices
def test_default_precisions_skip_emulated_bf16_and_16_mixed_on_a_cpu_is_not_measured():
    result = le.tune(Net(), _loader(), num_workers=False, max_epochs=2, **NONE)
    if le.precision.cpu_has_native_bf16():
        assert _by(result)["precision"].value == "bf16-mixed"
    else:
        assert any(n.startswith("bf16-mixed not measured: emulated") for n in result.notes)
    assert result.baseline.planned_batches == 2 * N // BATCH and result.machine["cpus"] >= 1
    assert any("torch.compile not measured" in n for n in result.notes) and result.current.num_workers is None
    with pytest.raises(ValueError, match="Lightning runs 16-mixed as bf16-mixed on a CPU; measure 'bf16-mixed'"):
        le.tune(Net(), _loader(), num_workers=False, precisions=["32-true", "16-mixed"], **NONE)


@pytest.mark.parametrize(
    "kwargs,planned",
    [
        (dict(max_epochs=3), 3 * N // BATCH),
        (dict(max_steps=5), 5),
        (dict(max_steps=5, planned_steps=100), 100),
        (dict(max_epochs=3, limit_train_batches=2), 6),
        (dict(max_steps=6, accumulate_grad_batches=2), 12),
        ({}, None),
    ],
)
def test_the_planned_batches(kwargs, planned):
    assert le.tune(Net(), _loader(), num_workers=False, **kwargs, **NONE).baseline.planned_batches == planned


def test_over_budget_the_defaults_of_recipe_apply_and_the_table_says_so():
    result = le.tune(Net(), _loader(), num_workers=False, precisions=["32-true"], **NONE)
    assert _by(result)["channels_last"].verdict == "not measured" and result.chosen.channels_last
    assert result.by_rule() == ["channels_last"] and "not measured: default True" in result.table()
    assert "over budget" in _by(result)["channels_last"].reason


def test_over_budget_the_precision_is_recipes_on_either_kind_of_cpu():
    result = le.tune(Net(), _loader(), num_workers=False, precisions=["32-true", "bf16-mixed"], **NONE)
    assert _by(result)["precision"].verdict == "not measured" and "precision" in result.by_rule()
    # bf16-mixed only where the CPU runs it natively and faster
    assert result.chosen.precision == le.recommended_precision("cpu")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(datamodule="both"), ValueError, "not both"),
        (dict(max_epoch=3), TypeError, "did you mean 'max_epochs'"),
        (dict(train_dataloader=None), TypeError, r"neither tune\(\) nor Trainer .*'train_dataloaders'"),
        (dict(precisions=["fp16"]), ValueError, "precision 'fp16' is not one Lightning accepts; use one of '32-true'"),
        (dict(precisions="bf16-mixed"), TypeError, r"expected a list, e.g. precisions=\['bf16-mixed'\]"),
        (dict(precision="half"), ValueError, "precision 'half' is not one"),
        (dict(channels_last="yes"), TypeError, r"channels_last='yes'"),
        (dict(compile=1), TypeError, "compile=1"),
        (dict(num_workers=4), TypeError, r"num_workers=\[4\]"),
        (dict(num_workers=[-1]), TypeError, "counts >= 0"),
        (dict(budget=0), ValueError, r"budget=0\): expected a fraction in \(0, 1\], e.g. 0.05"),
        (dict(budget=5), ValueError, r"budget=5\): expected a fraction in \(0, 1\], e.g. 0.05"),
        (dict(max_seconds=-1), ValueError, r"max_seconds=-1\): expected seconds > 0"),
        (dict(planned_steps=0), ValueError, "planned_steps=0"),
        (dict(min_gain=True), ValueError, "min_gain"),
    ],
)
def test_bad_arguments_name_the_fix(kwargs, error, match):
    with pytest.raises(error, match=match):
        le.tune(Net(), _loader(), **{**NONE, **kwargs})


def test_a_model_that_is_not_a_lightning_module():
    with pytest.raises(TypeError, match="LightningModule, got Conv2d"):
        le.tune(nn.Conv2d(3, 4, 3), _loader(), **NONE)


# ------------------------------------------------------------------------------------------------ callbacks
def _instances() -> dict[str, pl.Callback]:
    """One instance of every type in CALLBACKS (of pytorch_lightning's callbacks and ours)."""
    return {
        "Checkpoint": plc.ModelCheckpoint(),
        "EarlyStopping": plc.EarlyStopping(monitor="val_loss"),
        "Timer": plc.Timer(),
        "SpikeDetection": plc.SpikeDetection(),
        "LearningRateFinder": plc.LearningRateFinder(),
        "BatchSizeFinder": plc.BatchSizeFinder(),
        "LearningRateMonitor": plc.LearningRateMonitor(),
        "ProgressBar": plc.TQDMProgressBar(),
        "ModelSummary": plc.ModelSummary(),
        "DeviceStatsMonitor": plc.DeviceStatsMonitor(),
        "ThroughputMonitor": plc.ThroughputMonitor(lambda b: BATCH),
        "BasePredictionWriter": plc.BasePredictionWriter(),
        "StochasticWeightAveraging": plc.StochasticWeightAveraging(0.1),
        "WeightAveraging": plc.EMAWeightAveraging(),
        "ModelPruning": plc.ModelPruning("l1_unstructured", amount=0.1),
        "BaseFinetuning": plc.BackboneFinetuning(),
        "GradientAccumulationScheduler": plc.GradientAccumulationScheduler({0: 2}),
        "StepwiseLR": le.StepwiseLR(),
        "EfficiencyReport": le.EfficiencyReport(),
        "GPUDecode": le.GPUDecode(),
        "GPUAugmentation": le.GPUAugmentation("trivial_augment"),
        "ProgressiveResize": le.ProgressiveResize(),
        "ChannelsLast": le.ChannelsLast(),
    }


@pytest.mark.parametrize("row", ROLES, ids=lambda row: row[0])
def test_each_callback_is_kept_or_dropped_by_its_type_under_any_class_name(row):
    name, kind, why = row
    keep = kind == "step cost"
    cb = _instances()[name]
    renamed = type("MyProjectsCallback", (type(cb),), {})  # a user's subclass with another name
    cb.__class__ = renamed
    kept, dropped = kept_callbacks([cb], pl)
    assert (kept == [cb]) == keep and (dropped == ["MyProjectsCallback"]) == (not keep and kind != "factor"), why
    assert kept_callbacks([cb], pl)[0] == kept  # deciding does not change the callback


def test_a_callback_of_no_listed_type_is_kept_and_runs_as_a_copy(tmp_path):
    class Counting(pl.Callback):
        seen_by_copies: list[int] = []

        def on_train_batch_end(self, *args):
            Counting.seen_by_copies.append(1)

    class MyCheckpoint(plc.ModelCheckpoint):  # another name: still a checkpoint, dropped
        pass

    counting = Counting()
    loader = _loader()
    ckpt = MyCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1)
    stop = type("Patience", (plc.EarlyStopping,), {})(monitor="val_loss")
    result = le.tune(
        Net(),
        loader,
        callbacks=[ckpt, stop, counting, le.ChannelsLast()],
        default_root_dir=tmp_path,
        num_workers=False,
        **ALL,
    )
    assert [p.name for p in tmp_path.iterdir()] == ["tune-cache"] and result.current == Candidate(channels_last=True)
    assert Counting.seen_by_copies and not counting.__dict__  # copies ran; the user's instance saw nothing
    assert "not in the measuring fits: MyCheckpoint, Patience (see callbacks.roles)" in str(result)


def test_finders_do_not_run_and_a_batch_size_finder_is_mentioned(monkeypatch):
    ran = []
    monkeypatch.setattr(plc.LearningRateFinder, "on_fit_start", lambda *a: ran.append("lr"))
    monkeypatch.setattr(plc.BatchSizeFinder, "on_fit_start", lambda *a: ran.append("bs"))
    result = le.tune(Net(), _loader(), callbacks=[plc.LearningRateFinder(), plc.BatchSizeFinder()], **NONE)
    assert ran == []
    assert any(
        n.startswith(f"tune() measured the loader's batch size ({BATCH}); your BatchSizeFinder") for n in result.notes
    )


def test_a_scheduler_monitoring_a_validation_metric_does_not_fail_the_measuring_fits():
    class Plateau(Net):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}

    loader = DataLoader(_images(n=8), batch_size=BATCH)  # 2 batches per epoch: every fit crosses epoch ends
    result = le.tune(Plateau(), loader, num_workers=False, **ALL)
    assert _by(result)["channels_last"].verdict != "failed" and _by(result)["channels_last"].ratios


def test_a_model_that_logs_through_self_logger_is_measured():
    class Logging(Net):
        def training_step(self, batch, batch_idx):
            self.logger.log_metrics({"seen": float(batch_idx)}, step=self.global_step)
            self.logger.experiment.add_scalar("seen", 1.0)
            return super().training_step(batch, batch_idx)

    result = le.tune(Logging(), _loader(), num_workers=False, **ALL)
    assert _by(result)["channels_last"].ratios


def test_manual_optimization_with_two_optimizers_counts_batches_not_optimizer_steps():
    class GAN(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.g, self.d = nn.Conv2d(3, 3, 3, padding=1), nn.Sequential(nn.Conv2d(3, 2, 3), nn.Flatten())

        def training_step(self, batch, batch_idx):
            for opt, net in zip(self.optimizers(), (self.g, self.d), strict=False):
                loss = net(batch[0]).mean()
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.g.parameters(), lr=0.1), torch.optim.SGD(self.d.parameters(), lr=0.1)

    loader = DataLoader(_images(n=4 * BATCH), batch_size=BATCH)  # 4 batches: fewer than a fit's plan
    planned = le.tune(GAN(), loader, num_workers=False, max_steps=40, **NONE)
    assert planned.baseline.steps_per_batch == 2 and planned.baseline.planned_batches == 20
    assert _by(le.tune(GAN(), loader, num_workers=False, **ALL))["channels_last"].ratios


def test_manual_optimization_stepping_its_own_schedulers_is_measured():
    class ManualWithSchedulers(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.net = nn.Sequential(nn.Conv2d(3, 2, 3), nn.Flatten())

        def training_step(self, batch, batch_idx):
            opt, (sched,) = self.optimizers(), [self.lr_schedulers()]  # None if tune() took them away
            opt.zero_grad()
            self.manual_backward(self.net(batch[0]).mean())
            opt.step()
            sched.step()

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]

    result = le.tune(ManualWithSchedulers(), _loader(), num_workers=False, **ALL)
    assert _by(result)["channels_last"].ratios


def test_a_model_of_the_unified_lightning_package():
    unified = pytest.importorskip("lightning.pytorch", reason="the `lightning` package is not installed")

    class UnifiedNet(unified.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 2))

        def training_step(self, batch, batch_idx):
            return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainers = []

    class Seen(unified.Callback):
        def on_train_start(self, trainer, pl_module):
            trainers.append(type(trainer))

    result = le.tune(UnifiedNet(), _loader(), callbacks=[Seen(), unified.callbacks.ModelCheckpoint()], **NONE)
    assert trainers == [unified.Trainer] and "ModelCheckpoint" in " ".join(result.notes)


def test_verbose_prints_the_table_and_none_of_lightnings_info_lines(capsys, caplog):
    caplog.set_level(logging.INFO)
    result = le.tune(Net(), _loader(), num_workers=False, **{**NONE, "verbose": True})
    out, err = capsys.readouterr()
    assert out == str(result) + "\n" and "| factor | tried | in use |" in out and out.startswith("tune(): ")
    assert not any("GPU available" in r.getMessage() for r in caplog.records) and "GPU available" not in out + err
    pl.Trainer(**TRAINER_KW, max_steps=1)  # control: the same Trainer outside tune() logs it where this listens
    assert any("GPU available" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------------ the report agrees
def _slow_channels_last(arch: str) -> le.TuneResult:
    """A result as tune() gives it where channels_last measured slower and precision faster."""
    chosen = Candidate("bf16-mixed", channels_last=False)
    decisions = [
        Decision("channels_last", True, False, "ruled out", (0.8, 0.82, 0.79), "no gain above 2%"),
        Decision("precision", "bf16-mixed", "32-true", "kept", (1.5, 1.6, 1.55), "kept"),
    ]
    return le.TuneResult(Candidate(), chosen, decisions, machine=le.doctor.machine_info(), arch=arch)


def _report(trainer_kwargs: dict) -> dict:
    callbacks = trainer_kwargs.setdefault("callbacks", [])
    if not any(isinstance(c, le.EfficiencyReport) for c in callbacks):
        callbacks.append(le.EfficiencyReport())
    report = next(c for c in callbacks if isinstance(c, le.EfficiencyReport))
    report.verbose = False
    with pytest.MonkeyPatch.context() as mp:  # as on a CPU with native bf16, whatever this one has
        mp.setattr("lightning_efficient.callbacks.report_facts.recommended_precision", lambda a: "bf16-mixed")
        pl.Trainer(**{**TRAINER_KW, "max_steps": 3, **trainer_kwargs}).fit(Net(), _loader())
    return {c.practice: c for c in report.checks}


@pytest.mark.parametrize("how", ["recipe(tune=result)", "recipe(**kwargs)", "by hand", "a later process"])
def test_the_report_never_contradicts_what_tune_measured(how):
    result = _slow_channels_last(store.arch_key(Net()))
    if how == "a later process":
        store.Store({"any": "fingerprint"}).save(result)
        store.RECENT.clear()  # only the cache file is left
    elif how != "recipe(tune=result)":
        store.RECENT.append(result)
    kwargs = {
        "recipe(tune=result)": lambda: le.recipe(tune=result, precision="32-true", stepwise_lr=False),
        "recipe(**kwargs)": lambda: le.recipe(**{**result.recipe_kwargs(), "precision": "32-true"}, stepwise_lr=False),
        "by hand": lambda: {"precision": "32-true", "callbacks": [le.ChannelsLast()]},
        "a later process": lambda: {"precision": "32-true"},
    }[how]()
    checks = _report(kwargs)
    model_cl = checks["model channels_last"]
    assert "tune() measured channels_last=True at 0.80x over 3 pairs" in model_cl.detail
    assert model_cl.ok is (False if how == "by hand" else None)  # kept off: information; on: what tune ruled out
    precision = checks["mixed precision"]
    assert precision.ok is False and "tune() measured precision='bf16-mixed' at 1.55x" in precision.detail
    assert "use precision='bf16-mixed', as tune() chose" == precision.advice


def test_the_cli_advice_is_matched_by_architecture_under_another_attribute_name():
    class Other(pl.LightningModule):  # the same network as Net, under another name
        def __init__(self):
            super().__init__()
            self.backbone = Net().net

    result = _slow_channels_last(store.arch_key(Net()))
    store.RECENT.append(result)
    assert store.latest(Other()) is result
    result.baseline = Window(0.1, 0.0, 32, 1.0)
    assert store.latest(Other(), batch_size=32) is result
    assert store.latest(Other(), batch_size=64) is None  # another loader's batches: not what tune() measured
    assert store.latest(nn.Linear(3, 3)) is None


# ------------------------------------------------------------------------------------------------ DDP
@pytest.mark.ddp
def test_ddp_ranks_choose_alike_and_only_rank_zero_writes_the_cache(tmp_path):
    """2 CPU processes (gloo, strategy="ddp", in a subprocess): every rank gets rank 0's decisions."""
    script = Path(__file__).with_name("ddp_tune_script.py")
    env = ddp_script_env(LIGHTNING_EFFICIENT_CACHE=str(tmp_path / "cache"))
    for run_number in (1, 2):
        for old in tmp_path.glob("rank*.json"):
            old.unlink()
        run = subprocess.run(
            [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env
        )
        assert run.returncode == 0, run.stderr[-3000:]
        ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2 and ranks[0]["result"] == ranks[1]["result"]
        assert ranks[0]["reused"] == ranks[1]["reused"] == (run_number == 2)
        assert len(list((tmp_path / "cache" / "tune").glob("*.json"))) == 1
        assert run.stdout.count("tune(): ") == 1  # printed by rank 0 only
