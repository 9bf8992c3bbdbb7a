"""``tune()``: short real fits on copies of tiny models (CPU, 8x8 images, batches of 4, three steps per fit).

Nothing here times anything or asserts on a speed: the tests check what ``tune()`` measures, reports and leaves
behind (the model, the RNG streams, the backend flags, the user's callbacks and files), how it handles failing
candidates and every kind of training data, and that all DDP ranks choose alike.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info
from trainer_helpers import TRAINER_KW

import lightning_efficient as le
from lightning_efficient.functional.layout import is_channels_last
from lightning_efficient.functional.tuning import Candidate
from lightning_efficient.precision import cpu_has_native_bf16
from lightning_efficient.tuner import Trials, _InterleavedProbe

# tune() warns when this machine's own timing noise is high (a busy CI machine): that depends on the machine, not on
# what these tests check; test_a_noisy_machine_is_warned_about_and_noted checks the warning itself (pytest.warns).
pytestmark = pytest.mark.filterwarnings(r"ignore:tune\(\). the machine is noisy:UserWarning")

#: Three steps per fit: one untimed, two timed windows of one step each; CPU, one device.
# remeasure=False: which candidates are measured must not depend on this machine's timing noise (a gain within the
# noise would be measured again); the second round is tested in tests/functional/test_tuning.py.
FAST = dict(warmup_steps=1, window_steps=1, repeats=2, accelerator="cpu", devices=1, verbose=False, remeasure=False)
#: Only fp32 (bf16 is emulated on most CPUs: the default adds a skipped row to the table where it is).
FP32 = dict(FAST, precisions=["32-true"])
STEPS = 3
#: Steps of a paired fit under FAST (channels_last on and off in one fit; see test_a_paired_fit_*).
PAIRED_STEPS = _InterleavedProbe([Candidate(channels_last=True), Candidate()], 1, 1, 3).steps_needed
N, BATCH = 32, 4


def _images(n: int = N, seed: int = 0, dtype: torch.dtype = torch.float32) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        x = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g)
    else:
        x = torch.randn(n, 3, 8, 8, generator=g)
    return TensorDataset(x, torch.randint(0, 2, (n,), generator=g))


def _is_channels_last(w: torch.Tensor) -> bool:
    return w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()


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
        if self.fail == "channels_last" and _is_channels_last(self.net[0].weight):
            raise NotImplementedError("this model calls .view() on a channels_last tensor")
        if self.fail == "always":
            raise ValueError("broken model")
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class NetWithData(Net):
    """Defines ``train_dataloader()``, built from the global RNG (as many scripts do)."""

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(N, 3, 8, 8), torch.randint(0, 2, (N,))), batch_size=BATCH)


def _seed(seed: int = 0) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _rng() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _assert_same_rng(a: tuple, b: tuple) -> None:
    assert torch.equal(a[0], b[0]), "torch RNG state changed"
    assert a[1] == b[1], "python RNG state changed"
    assert a[2][0] == b[2][0] and np.array_equal(a[2][1], b[2][1]) and a[2][2:] == b[2][2:], "numpy RNG changed"


def _flags() -> tuple:
    return (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.get_float32_matmul_precision(),
    )


@pytest.fixture
def keep_flags():
    """Backend flags the test changes are put back afterwards."""
    before = _flags()
    yield
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[0], before[1]
    torch.use_deterministic_algorithms(before[2], warn_only=before[3])
    torch.set_float32_matmul_precision(before[4])


def _status(result, label: str, stage: str | None = None) -> list[str]:
    return [r["status"] for r in result.rows() if r["settings"] == label and (stage is None or r["stage"] == stage)]


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


def _assert_same_snapshot(a: dict, b: dict) -> None:
    assert a["weights"].keys() == b["weights"].keys()
    for k in a["weights"]:
        assert torch.equal(a["weights"][k], b["weights"][k]), k
    assert len(a["momentum"]) == len(b["momentum"]) > 0
    assert all(torch.equal(x, y) for x, y in zip(a["momentum"], b["momentum"]))
    assert a["lr"] == b["lr"] and a["last_epoch"] == b["last_epoch"]


def test_a_fit_after_tune_is_bit_identical_to_the_same_fit_without_it():
    def run(tuned: bool, draw_before_fit: bool = False) -> dict:
        _seed(0)
        model = Net()
        loader = DataLoader(_images(), batch_size=BATCH, shuffle=True)  # shuffled from the global RNG
        if tuned:
            result = le.tune(model, loader, precisions=["32-true", "bf16-mixed"], num_workers=[0, 1], **FAST)
            assert len([m for m in result.measurements if m.ok]) >= 4  # precision, layout and workers measured
        if draw_before_fit:
            torch.rand(1)
        return _fit_and_snapshot(model, loader)

    plain = run(tuned=False)
    assert plain["last_epoch"] == 6 and plain["lr"] == [0.1 * 0.5**3]
    _assert_same_snapshot(run(tuned=True), plain)
    # The comparison sees the RNG: one extra draw before the fit changes the weights (dropout, shuffling).
    moved = run(tuned=False, draw_before_fit=True)
    assert not all(torch.equal(moved["weights"][k], plain["weights"][k]) for k in plain["weights"])


def test_tune_leaves_the_model_rng_and_backend_flags_as_they_were(keep_flags):
    _seed(1)
    model = Net()
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    strides = {k: v.stride() for k, v in model.state_dict().items()}
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    flags, rng = _flags(), _rng()
    # The tuning Trainers set cudnn.benchmark=False and deterministic algorithms; candidates convert copies of
    # the model to channels_last.
    result = le.tune(
        model,
        DataLoader(_images(), batch_size=BATCH, shuffle=True),
        benchmark=False,
        deterministic=True,
        num_workers=False,
        **FP32,
    )
    assert any(m.ok and m.candidate.channels_last for m in result.measurements)
    assert _flags() == flags
    _assert_same_rng(_rng(), rng)
    state = model.state_dict()
    assert all(torch.equal(state[k], weights[k]) and state[k].stride() == strides[k] for k in weights)
    assert not _is_channels_last(model.net[0].weight)
    assert model._trainer is None and model.training and model.fail is None


def test_rng_is_restored_when_the_data_hooks_draw_random_numbers():
    """The model's ``train_dataloader()`` and the datamodule's ``setup()`` draw from the global RNG; tune() calls
    them to find the loader, and must put the RNG back as it was before it called them."""

    class SplitData(pl.LightningDataModule):
        def setup(self, stage: str) -> None:
            self.order = torch.randperm(N)  # a random split, as random_split() without a generator does

        def train_dataloader(self):
            return DataLoader(torch.utils.data.Subset(_images(), self.order.tolist()), batch_size=BATCH)

    _seed(2)
    model, other, dm = NetWithData(), Net(), SplitData()
    rng = _rng()
    le.tune(model, channels_last=False, num_workers=False, **FP32)
    _assert_same_rng(_rng(), rng)
    le.tune(other, datamodule=dm, channels_last=False, num_workers=False, **FP32)
    _assert_same_rng(_rng(), rng)


# ------------------------------------------------------------------------------------------------ failures
@pytest.mark.parametrize(
    "fail,kwargs,failing",
    [
        ("autocast", dict(precisions=["32-true", "bf16-mixed"], channels_last=False), Candidate("bf16-mixed")),
        ("channels_last", dict(precisions=["32-true"]), Candidate(channels_last=True)),
    ],
)
def test_a_candidate_that_raises_is_reported_and_never_chosen(fail, kwargs, failing):
    result = le.tune(Net(fail=fail), DataLoader(_images(), batch_size=BATCH), num_workers=False, **kwargs, **FAST)
    failed = [m for m in result.measurements if m.error]
    assert [m.candidate for m in failed] == [failing]
    assert failed[0].error.startswith("NotImplementedError: this model")
    assert _status(result, failing.label()) == [f"failed: {failed[0].error}"]
    assert "failed: NotImplementedError: this model" in result.table()
    assert result.chosen == Candidate() and result.speedup == 1.0
    assert any("it failed (NotImplementedError" in r for r in result.reasons)


def test_the_current_settings_failing_raises_with_the_error():
    with pytest.raises(RuntimeError, match=r"current settings \(32-true\) fail to train: ValueError: broken model"):
        le.tune(Net(fail="always"), DataLoader(_images(), batch_size=BATCH), num_workers=False, **FP32)


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
        images, targets = batch
        return images.float() / 255, targets


def test_a_datamodule_and_its_batch_hooks_are_used():
    dm = RecordingData()
    result = le.tune(Net(), datamodule=dm, num_workers=[0, 1], **FP32)
    assert all(m.ok for m in result.measurements)  # uint8 batches would fail in the conv without the hook
    paired = [
        (m.candidate, b.candidate)
        for m, b in zip(result.measurements, result.measurements[1:])
        if m.stage.endswith("(paired)")
    ]
    assert [m.stage for m in result.measurements] == [
        "current",
        "channels_last (paired)",
        "channels_last (paired baseline)",
        "num_workers (paired)",
        "num_workers (paired baseline)",
    ]
    assert paired[1][0].num_workers == 1 and paired[1][1].num_workers == 0
    # Each fit moved its batches through both hooks (the copies and rebuilt loaders share `calls`): STEPS in the
    # separate fit, each paired fit its plan's steps (the one that switches loaders: 2 more untimed steps after
    # each switch to the loader with a worker, for the 2 batches it prepared while idle).
    plans = [_InterleavedProbe(sides, 1, 1, 3, {1: 2, 0: 0}).steps_needed for sides in paired]
    assert plans[1] > plans[0] == PAIRED_STEPS
    steps = STEPS + sum(plans)
    assert dm.calls == {"transfer": steps, "after": steps}
    assert result.batch_size == BATCH and result.current == Candidate(num_workers=0)


def test_a_datamodule_passed_as_train_dataloaders_is_one_as_in_fit():
    dm = RecordingData()
    result = le.tune(Net(), dm, num_workers=[0, 1], channels_last=False, **FP32)  # as trainer.fit(model, dm)
    assert [m.stage for m in result.measurements] == [
        "current",
        "num_workers (paired)",
        "num_workers (paired baseline)",
    ]
    assert dm.calls["after"] > 0 and not any("not tuned" in n for n in result.notes)
    with pytest.raises(ValueError, match="one LightningDataModule"):
        le.tune(Net(), dm, datamodule=dm, **FP32)


def test_a_model_that_defines_train_dataloader():
    result = le.tune(NetWithData(), num_workers=[0, 1], channels_last=False, **FP32)
    assert [(m.stage, m.candidate.num_workers, m.ok) for m in result.measurements] == [
        ("current", 0, True),
        ("num_workers (paired)", 1, True),
        ("num_workers (paired baseline)", 0, True),
    ]


def test_no_data_at_all_is_an_error():
    with pytest.raises(ValueError, match="no training data"):
        le.tune(Net(), **FAST)


class Stream(IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(5):
            yield torch.randn(BATCH, 3, 8, 8, generator=g), torch.randint(0, 2, (BATCH,), generator=g)


def test_worker_counts_asked_for_a_loader_that_cannot_be_rebuilt_are_warned_about():
    with pytest.warns(
        UserWarning,
        match=r"tune\(num_workers=\[0, 1\]\): the worker counts you listed are not "
        r"measured \(num_workers not tuned: the dataset is an IterableDataset.*Set num_workers where",
    ):
        result = le.tune(Net(), DataLoader(Stream(), batch_size=None), num_workers=[0, 1], channels_last=False, **FP32)
    assert result.current.num_workers is None


def test_an_iterable_dataset_is_measured_without_tuning_its_workers():
    result = le.tune(Net(), DataLoader(Stream(), batch_size=None), num_workers=None, channels_last=False, **FP32)
    assert result.current.num_workers is None and all(m.candidate.num_workers is None for m in result.measurements)
    assert any(m.ok for m in result.measurements)
    assert any(n.startswith("num_workers not tuned") and "IterableDataset" in n for n in result.notes)
    assert "IterableDataset" in str(result) and result.batch_size == BATCH


@pytest.fixture
def alarm():
    """Fails the test (instead of hanging) if it runs for more than 60 s."""

    def stop(signum, frame):
        raise TimeoutError("the test ran for more than 60 s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_a_one_shot_iterator_is_refused_before_anything_runs(alarm):
    def one_shot():  # a generator: iterated once, then empty; tuning would leave nothing for the user's fit
        yield from Stream()

    data = one_shot()
    with pytest.raises(ValueError, match="one-shot iterator .generator.*can be iterated again"):
        le.tune(Net(), data, channels_last=False, **FP32)
    assert len(list(data)) == 5  # untouched


@pytest.mark.parametrize("batches", [1, 2])
def test_a_short_reiterable_loader_is_cycled_over_epochs(alarm, batches):
    class Short:  # re-iterable: each epoch yields the same batches again
        def __iter__(self):
            return iter(list(Stream())[:batches])

    data = Short()
    result = le.tune(Net(), data, channels_last=False, **FP32)
    assert result.measurements[-1].ok and len(result.measurements[-1].window_images_per_s) == FAST["repeats"]


def test_an_empty_loader_is_a_clear_error(alarm):
    with pytest.raises(RuntimeError, match=rf"fail to train: the loader gave 0 batches; {STEPS} are needed"):
        le.tune(Net(), _Empty(), channels_last=False, **FP32)


class _Empty:
    def __iter__(self):
        return iter(())


class Marking(Dataset):
    """Leaves a file named after the worker process that loaded an item."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.data = folder, _images()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        if get_worker_info() is not None:
            (self.folder / f"worker-{os.getpid()}").touch()
        return self.data[i]


def test_num_workers_candidates_train_on_the_rebuilt_loader(tmp_path):
    loader = DataLoader(Marking(tmp_path), batch_size=BATCH)
    result = le.tune(Net(), loader, num_workers=[0, 1], channels_last=False, **FP32)
    assert result.current == Candidate(num_workers=0)
    assert [(m.stage, m.candidate.label(), m.ok) for m in result.measurements] == [
        ("current", "32-true, workers=0", True),
        ("num_workers (paired)", "32-true, workers=1", True),
        ("num_workers (paired baseline)", "32-true, workers=0", True),
    ]
    assert _status(result, "32-true, workers=1", "num_workers (paired)")[0] in ("ok", "chosen")
    workers = [p.name for p in tmp_path.iterdir()]
    assert workers and f"worker-{os.getpid()}" not in workers  # a worker process loaded the data
    assert loader.num_workers == 0


def test_default_precisions_skip_emulated_bf16_and_planned_steps():
    loader = DataLoader(_images(), batch_size=BATCH)
    result = le.tune(Net(), loader, channels_last=False, num_workers=False, max_epochs=2, **FAST)
    if cpu_has_native_bf16():
        assert any(m.candidate.precision == "bf16-mixed" and m.stage == "precision" for m in result.measurements)
    else:
        assert result.rows()[0]["status"].startswith("skipped: this CPU has no native bf16")
        assert [m.stage for m in result.measurements] == ["precision", "current"]
    assert result.planned_steps == 2 * N // BATCH and result.machine.startswith("cpu: ")
    assert any("torch.compile not measured" in n for n in result.notes)
    assert result.current.num_workers is None  # not tuned: the loader's own
    steps = le.tune(Net(), loader, channels_last=False, num_workers=False, precisions=["32-true"], max_steps=5, **FAST)
    assert steps.planned_steps == 5
    assert (
        le.tune(
            Net(),
            loader,
            channels_last=False,
            num_workers=False,
            precisions=["32-true"],
            max_steps=5,
            planned_steps=100,
            **FAST,
        ).planned_steps
        == 100
    )


def test_16_mixed_on_a_cpu_is_skipped_with_the_reason_not_measured_as_bf16():
    result = le.tune(
        Net(),
        DataLoader(_images(), batch_size=BATCH),
        channels_last=False,
        num_workers=False,
        precisions=["32-true", "16-mixed"],
        **FAST,
    )
    (row,) = [r for r in result.rows() if r["settings"] == "16-mixed"]
    assert row["status"].startswith("skipped: Lightning runs 16-mixed as bf16-mixed on a CPU")
    assert [m.candidate.precision for m in result.measurements if m.ok] == ["32-true"]


def test_a_noisy_machine_is_warned_about_and_noted(monkeypatch):
    from lightning_efficient import tuner
    from lightning_efficient.functional.tuning import Candidate, Measurement

    def noisy_search(current, options, measure, **kw):  # the user's settings' windows vary by 50%
        assert kw["remeasure"] is False  # passed through from tune()
        m = Measurement(current, "current", window_images_per_s=(10.0, 20.0, 15.0))
        return current, [m], ["chosen: the current settings."]

    monkeypatch.setattr(tuner, "search", noisy_search)
    with pytest.warns(UserWarning, match="the machine is noisy: windows of your own settings varied by 67%"):
        result = le.tune(Net(), DataLoader(_images(), batch_size=BATCH), **FAST)
    assert any(n.startswith("the machine is noisy") for n in result.notes)


# ------------------------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(warmup_steps=0), ValueError, "warmup_steps=0"),
        (dict(window_steps=0), ValueError, "window_steps=0"),
        (dict(repeats=-1), ValueError, "repeats=-1"),
        (dict(repeats=True), ValueError, "repeats=True"),
        (dict(warmup_steps=1.5), ValueError, "warmup_steps=1.5"),
        (dict(datamodule="both"), ValueError, "not both"),
        (dict(max_epoch=3), TypeError, "'max_epoch' .did you mean 'max_epochs'"),
        (dict(precisions=["fp16"]), ValueError, "precision 'fp16' is not one Lightning accepts; use one of '32-true'"),
        (dict(precisions="bf16-mixed"), TypeError, r"expected a list of precisions, e.g. precisions=\['bf16-mixed'\]"),
        (dict(precision="half"), ValueError, "precision 'half' is not one Lightning accepts"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        le.tune(Net(), DataLoader(_images(), batch_size=BATCH), **{**FAST, **kwargs})


def test_a_model_that_is_not_a_lightning_module():
    with pytest.raises(TypeError, match="LightningModule, got Conv2d"):
        le.tune(nn.Conv2d(3, 4, 3), DataLoader(_images(), batch_size=BATCH), **FAST)


# ------------------------------------------------------------------------------------------------ callbacks, output
class Counting(pl.Callback):
    batches_seen_by_copies: list[int] = []  # class-level: the copies tune() makes append here

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches += 1
        Counting.batches_seen_by_copies.append(batch_idx)


def test_the_users_callbacks(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path / "checkpoints", every_n_train_steps=1, save_top_k=-1)
    counting = Counting()
    Counting.batches_seen_by_copies.clear()
    loader = DataLoader(_images(), batch_size=BATCH)
    result = le.tune(
        Net(),
        loader,
        callbacks=[ckpt, le.ChannelsLast(), counting],
        default_root_dir=tmp_path,
        num_workers=False,
        **FP32,
    )
    assert list(tmp_path.rglob("*")) == []  # no checkpoint, no log
    assert result.current == Candidate(channels_last=True)
    assert [(m.stage, m.candidate.channels_last) for m in result.measurements] == [
        ("current", True),
        ("channels_last (paired)", False),
        ("channels_last (paired baseline)", True),
    ]
    # Other callbacks train along, as copies: the user's instance saw nothing.
    assert counting.batches == 0 and len(Counting.batches_seen_by_copies) == STEPS + PAIRED_STEPS
    # The same checkpoint callback does write in a real fit (the check above can fail).
    pl.Trainer(
        **{**TRAINER_KW, "enable_checkpointing": True}, max_steps=1, callbacks=[ckpt], default_root_dir=tmp_path
    ).fit(Net(), loader)
    assert list((tmp_path / "checkpoints").glob("*.ckpt"))


def test_verbose_prints_the_table_and_none_of_lightnings_info_lines(capsys, caplog):
    caplog.set_level(logging.INFO)
    loader = DataLoader(_images(), batch_size=BATCH)
    result = le.tune(Net(), loader, num_workers=False, **{**FP32, "verbose": True})
    out, err = capsys.readouterr()
    assert out == str(result) + "\n"
    assert "| settings | stage | images/s |" in out and out.startswith("tune(): chose ")
    info = [r.getMessage() for r in caplog.records]
    assert not any("GPU available" in m or "`Trainer.fit` stopped" in m for m in info), info
    assert "GPU available" not in out + err
    # Control: the same Trainer outside tune() does log "GPU available" where this test listens.
    pl.Trainer(**TRAINER_KW, max_steps=1)
    assert any("GPU available" in r.getMessage() for r in caplog.records)


def test_a_model_of_the_unified_lightning_package():
    unified = pytest.importorskip("lightning.pytorch", reason="the `lightning` package is not installed")

    class UnifiedNet(unified.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
            )

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainers = []

    class Spy(unified.Callback):
        def on_train_start(self, trainer, pl_module):
            trainers.append(type(trainer))

    result = le.tune(
        UnifiedNet(), DataLoader(_images(), batch_size=BATCH), callbacks=[Spy()], num_workers=False, **FP32
    )
    assert all(m.ok for m in result.measurements) and len(result.measurements) == 3  # current, a paired fit
    assert trainers == [unified.Trainer] * 2


# ------------------------------------------------------------------------------------------------ DDP
@pytest.mark.ddp
def test_ddp_ranks_choose_alike_from_rank_zeros_measurements(tmp_path):
    """2 CPU processes (gloo, strategy="ddp", in a subprocess): every rank gets rank 0's table and choice."""
    script = Path(__file__).with_name("ddp_tune_script.py")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    assert ranks[0]["chosen"] == ranks[1]["chosen"]
    assert ranks[0]["table"] == ranks[1]["table"]
    assert len(ranks[0]["table"]) >= 2 and all(row["images_per_s"] for row in ranks[0]["table"])
    assert run.stdout.count("tune(): chose") == 1  # printed by rank 0 only
    assert "GPU available" not in run.stdout + run.stderr


def test_noise_note_for_noisy_windows_or_the_same_settings_measured_far_apart():
    from lightning_efficient.functional.tuning import Candidate, Measurement
    from lightning_efficient.tuner import noise_note

    cur, cl = Candidate(), Candidate(channels_last=True)
    quiet = [Measurement(cur, "current", (100.0, 101.0, 99.0)), Measurement(cl, "channels_last", (50.0, 90.0, 70.0))]
    assert noise_note(quiet, cur) is None  # a noisy candidate alone is the candidate's business (measured again)
    drifting = quiet + [Measurement(cur, "channels_last, again (baseline)", (60.0, 61.0, 59.0))]
    assert "the same settings measured 1.67x apart in two fits" in noise_note(drifting, cur)
    noisy = [Measurement(cur, "current", (60.0, 100.0, 80.0))]
    assert "windows of your own settings varied by 50%" in noise_note(noisy, cur)
    failed = [Measurement(cur, "current", (100.0,)), Measurement(cur, "again", error="RuntimeError: boom")]
    assert noise_note(failed, cur) is None


def test_uint8_batches_without_the_converting_callback_say_where_it_goes():
    with pytest.raises(RuntimeError, match=r"uint8 images .* callbacks=\[GPUAugmentation"):
        le.tune(Net(), DataLoader(_images(dtype=torch.uint8), batch_size=BATCH), num_workers=False, **FP32)


class LayoutSpy(Net):
    """Records, at every training step, whether the batch, the conv weight, its momentum buffer and a depthwise
    conv weight (``[C, 1, k, k]``: only its strides tell the layouts apart) are channels_last (class-level, as
    tune() trains deep copies)."""

    seen: list[tuple[bool, bool, bool | None, bool]] = []

    def __init__(self) -> None:
        super().__init__()
        self.net.insert(0, nn.Conv2d(3, 3, 3, padding=1, groups=3))

    def training_step(self, batch, batch_idx):
        weight = self.net[1].weight
        buf = self.optimizers().optimizer.state.get(weight, {}).get("momentum_buffer")
        LayoutSpy.seen.append(
            (
                is_channels_last(batch[0]),
                is_channels_last(weight),
                None if buf is None else is_channels_last(buf),
                is_channels_last(self.net[0].weight),
            )
        )
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("new_cl", [True, False])
def test_a_paired_fit_alternates_model_batches_and_optimizer_state_by_its_plan(new_cl):
    LayoutSpy.seen = []
    model = LayoutSpy()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trials = Trials(
        model,
        DataLoader(_images(), batch_size=BATCH),
        warmup_steps=1,
        window_steps=2,
        repeats=2,
        accelerator="cpu",
        devices=1,
    )
    new, old = Candidate(channels_last=new_cl), Candidate(channels_last=not new_cl)
    new_m, old_m = trials.pair(new, old, "channels_last")
    probe = _InterleavedProbe([new, old], 1, 2, 3)
    # Warm-up in the old layout, then the new one, then windows new, old, old, new, new, old (one untimed step
    # after each switch): the batch, the weights and the optimizer state always agree with the plan.
    assert [probe.sides[side].channels_last for side, _ in probe.plan] == [
        not new_cl,
        new_cl,
        new_cl,
        new_cl,
        not new_cl,
        not new_cl,
        not new_cl,
        not new_cl,
        not new_cl,
        new_cl,
        new_cl,
        new_cl,
        new_cl,
        new_cl,
        not new_cl,
        not new_cl,
        not new_cl,
    ]
    assert [batch for batch, _, _, _ in LayoutSpy.seen] == [probe.sides[side].channels_last for side, _ in probe.plan]
    assert all(weight == batch == depthwise for batch, weight, _, depthwise in LayoutSpy.seen)
    assert all(buf in (None, batch) for batch, _, buf, _ in LayoutSpy.seen) and LayoutSpy.seen[-1][2] is not None
    assert (new_m.stage, old_m.stage) == ("channels_last (paired)", "channels_last (paired baseline)")
    assert (new_m.candidate, old_m.candidate) == (new, old) and new_m.ok and old_m.ok
    assert len(new_m.window_images_per_s) == len(old_m.window_images_per_s) == 3
    assert 0.0 <= new_m.data_wait <= 1.0 and 0.0 <= old_m.data_wait <= 1.0
    # The user's model is untouched: values and NCHW layout.
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not is_channels_last(model.net[0].weight) and not is_channels_last(model.net[1].weight)


class Origin(Dataset):
    """Images whose last pixel says where they were loaded: 1.0 in a worker process, 0.0 in the main one."""

    def __init__(self) -> None:
        self.data = _images()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        x, y = self.data[i]
        x = x.clone()
        x[-1, -1, -1] = float(get_worker_info() is not None)
        return x, y


class OriginSpy(LayoutSpy):
    """Records, at every training step, whether the batch came from a worker and whether the batch and the conv
    weight are channels_last."""

    origins: list[tuple[bool, bool, bool]] = []
    draws: list[float] = []

    def training_step(self, batch, batch_idx):
        OriginSpy.origins.append(
            (
                bool(batch[0][:, -1, -1, -1].eq(1).all()),
                is_channels_last(batch[0]),
                is_channels_last(self.net[1].weight),
            )
        )
        OriginSpy.draws.append(float(torch.rand(())))
        return super().training_step(batch, batch_idx)


def test_an_interleaved_fit_switches_layout_and_loader_by_its_plan():
    OriginSpy.origins, OriginSpy.draws, LayoutSpy.seen = [], [], []
    loader = DataLoader(Origin(), batch_size=BATCH, shuffle=True)
    trials = Trials(OriginSpy(), loader, warmup_steps=1, window_steps=2, repeats=1, accelerator="cpu", devices=1)
    sides = [Candidate(channels_last=cl, num_workers=w) for cl in (False, True) for w in (0, 1)]
    found = trials.interleave(sides, [f"side {i}" for i in range(4)], rounds=3)
    probe = _InterleavedProbe(sides, 1, 2, 3, {0: 0, 1: 2})
    expected = [(sides[s].num_workers == 1, sides[s].channels_last, sides[s].channels_last) for s, _ in probe.plan]
    assert OriginSpy.origins == expected  # every step: the batch from its side's loader, in its side's layout
    # Common random numbers: the j-th step of a round's windows draws the same on every side, another round not.
    by_round: dict[tuple[int, int], set[float]] = {}
    for k, (side, r) in enumerate(probe.plan):
        if r is not None:
            j = sum(1 for s, rr in probe.plan[:k] if (s, rr) == (side, r))
            by_round.setdefault((r, j), set()).add(OriginSpy.draws[k])
    assert len(by_round) == 6 and all(len(v) == 1 for v in by_round.values())
    assert len(set().union(*by_round.values())) == 6
    # The plan: warm-up of each side, then rounds 0 1 2 3 | 3 2 1 0 | 0 1 2 3; a switch to the loader with a
    # worker is followed by 2 untimed steps (the batches it prepared while idle) plus 1, any other switch by 1.
    timed = [s for s, r in probe.plan if r is not None]
    assert timed == [0, 0, 1, 1, 2, 2, 3, 3] + [3, 3, 2, 2, 1, 1, 0, 0] + [0, 0, 1, 1, 2, 2, 3, 3]
    untimed_after = [sum(1 for _ in g) for key, g in itertools.groupby(probe.plan, lambda x: x[1]) if key is None][1:]
    assert sorted(set(untimed_after)) == [1, 3]
    assert [m.stage for m in found] == ["side 0", "side 1", "side 2", "side 3"]
    assert all(m.ok and len(m.window_images_per_s) == 3 and 0 <= m.data_wait <= 1 for m in found)
    assert [m.candidate for m in found] == sides
    assert loader.num_workers == 0  # the user's loader is left as it was


def test_only_settings_one_fit_can_switch_between_are_interleaved():
    trials = Trials(
        Net(),
        DataLoader(_images(), batch_size=BATCH),
        warmup_steps=1,
        window_steps=1,
        repeats=1,
        accelerator="cpu",
        devices=1,
    )
    assert trials.interleave([Candidate(), Candidate(precision="bf16-mixed")], ["a", "b"]) is None
    assert trials.pair(Candidate(channels_last=True, compile=True), Candidate(compile=True), "channels_last") is None
    assert trials.pair(Candidate(channels_last=True, num_workers=1), Candidate(), "channels_last") is None  # None:
    # the loader's own workers, not a count to rebuild it with
    stream = Trials(
        Net(),
        DataLoader(Stream(), batch_size=None),
        warmup_steps=1,
        window_steps=1,
        repeats=1,
        accelerator="cpu",
        devices=1,
    )
    assert stream.interleave([Candidate(), Candidate(num_workers=1)], ["a", "b"]) is None


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            dict(num_workers=4),
            TypeError,
            r"tune\(num_workers=4\): expected a list of worker counts .*num_workers=\[4\]",
        ),
        (dict(num_workers=[0, "2"]), ValueError, r"worker counts must be integers >= 0; got '2'"),
        (dict(num_workers=[-1]), ValueError, r"got -1"),
        (dict(compile="yes"), TypeError, r"tune\(compile='yes'\): expected True, False or None"),
        (dict(channels_last=None), TypeError, r"tune\(channels_last=None\): expected True"),
    ],
)
def test_wrong_kinds_of_choices_name_the_fix(kwargs, error, match):
    with pytest.raises(error, match=match):
        le.tune(Net(), DataLoader(_images(), batch_size=BATCH), **{**FP32, **kwargs})


def test_a_measurement_records_the_share_of_time_spent_waiting_for_data():
    result = le.tune(Net(), DataLoader(_images(), batch_size=BATCH), num_workers=False, channels_last=False, **FP32)
    (current,) = result.measurements
    assert 0.0 <= current.data_wait < 1.0
