"""The unified ``lightning`` package (``import lightning as L``) and Lightning's noise.

Every callback and ``recipe()`` must work the same under ``lightning.pytorch`` (Trainer, LightningModule,
LightningDataModule with and without its own ``on_after_batch_transfer``, LightningCLI) as under
``pytorch_lightning``: each test below runs with both packages, and one compares the two runs value for value.
The last tests check that the demo's Trainers print neither Lightning's tips nor known-harmless warnings, and that
nothing else is hidden.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import queue
import types
import warnings

import numpy as np
import pytest
import pytorch_lightning
import torch
from PIL import Image
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_efficient as le
from lightning_efficient.adapter import LIGHTNING_PACKAGES, Callback
from lightning_efficient.functional.layout import is_channels_last
from lightning_efficient.pipeline import get_pipeline, hook_owner, overrides_hook

if os.environ.get("CI"):  # CI installs the dev extra, which includes `lightning`: missing there is a failure
    import lightning.pytorch as unified
else:
    unified = pytest.importorskip(
        "lightning.pytorch", reason="the `lightning` package is not installed (pip install -e '.[dev]')"
    )

PACKAGES = pytest.mark.parametrize("pkg", [pytorch_lightning, unified], ids=["pytorch_lightning", "lightning.pytorch"])
CALLBACKS = (le.ChannelsLast, le.StepwiseLR, le.GPUAugmentation, le.GPUDecode, le.EfficiencyReport)
QUIET_KW = dict(
    accelerator="cpu",
    devices=1,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=0,
    log_every_n_steps=1,
)
LR, EPOCHS, BATCHES, BATCH = 0.1, 2, 4, 4  # cosine over 2 epochs of 4 batches of 4 images


def _classes(pkg):
    """A LightningModule and two LightningDataModules (without and with on_after_batch_transfer) of ``pkg``."""

    class Net(pkg.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
            )
            self.train_images: list[torch.Tensor] = []
            self.val_images: list[torch.Tensor] = []
            self.lrs: list[float] = []

        def training_step(self, batch, batch_idx):
            images, targets = batch
            self.train_images.append(images.detach().clone(memory_format=torch.preserve_format))
            self.lrs.append(self.optimizers().param_groups[0]["lr"])
            return nn.functional.cross_entropy(self.net(images), targets)

        def validation_step(self, batch, batch_idx):
            self.val_images.append(batch[0].detach().clone(memory_format=torch.preserve_format))

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=LR)
            cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": cosine, "interval": "epoch"}}

    class Data(pkg.LightningDataModule):
        def _loader(self, seed: int, n: int) -> DataLoader:
            g = torch.Generator().manual_seed(seed)
            images = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g)
            return DataLoader(TensorDataset(images, torch.randint(0, 2, (n,), generator=g)), batch_size=BATCH)

        def train_dataloader(self):
            return self._loader(0, BATCHES * BATCH)

        def val_dataloader(self):
            return self._loader(1, 2 * BATCH)

    class HookData(Data):
        def __init__(self) -> None:
            super().__init__()
            self.hook_saw: list[torch.dtype] = []

        def on_after_batch_transfer(self, batch, dataloader_idx):
            self.hook_saw.append(batch[0].dtype)
            return batch

    return Net, Data, HookData


def _fit(pkg, hook: bool, tmp_path, callbacks=None):
    torch.manual_seed(0)
    Net, Data, HookData = _classes(pkg)
    model, dm = Net(), (HookData() if hook else Data())
    report = le.EfficiencyReport(log_every_n_steps=1, skip_first=0, verbose=False)
    if callbacks is None:  # listed in reverse: the pipeline decides the order
        callbacks = [le.ChannelsLast(), le.GPUAugmentation("cifar", seed=0), le.StepwiseLR(verbose=False)]
    logger = pkg.loggers.CSVLogger(tmp_path, name=pkg.__name__)
    trainer = pkg.Trainer(max_epochs=EPOCHS, logger=logger, callbacks=[*callbacks, report], **QUIET_KW)
    trainer.fit(model, datamodule=dm)
    return trainer, model, dm, report


# ------------------------------------------------------------------------------------------- the classes


@pytest.mark.parametrize("cls", CALLBACKS, ids=lambda c: c.__name__)
def test_every_callback_is_a_callback_of_both_packages(cls):
    # Before: subclasses of pytorch_lightning.Callback only; lightning.pytorch's type tests (LightningCLI, a single
    # callback given without a list) rejected them.
    callback = cls()
    assert isinstance(callback, pytorch_lightning.Callback) and isinstance(callback, unified.Callback)
    assert issubclass(cls, Callback) and LIGHTNING_PACKAGES == (pytorch_lightning, unified)
    trainer = unified.Trainer(callbacks=callback, logger=False, **QUIET_KW)  # one callback, not in a list
    assert callback in trainer.callbacks


def test_hook_ownership_with_real_lightning_pytorch_classes():
    Net, Data, HookData = _classes(unified)
    model = Net()
    assert not overrides_hook(Data()) and not overrides_hook(unified.LightningDataModule())
    assert not overrides_hook(model) and overrides_hook(HookData())
    dm = HookData()
    assert hook_owner(types.SimpleNamespace(datamodule=dm), model) is dm
    assert hook_owner(types.SimpleNamespace(datamodule=Data()), model) is model
    # The root cause of the crash: pytorch_lightning's is_overridden on an object of lightning.pytorch.
    with pytest.raises(ValueError, match="Expected a parent"):
        is_overridden("on_after_batch_transfer", dm)


# ------------------------------------------------------------------------------------------- fitting


@PACKAGES
@pytest.mark.parametrize("hook", [False, True], ids=["datamodule-without-hook", "datamodule-with-hook"])
def test_augmentation_layout_stepwise_lr_and_report_in_a_fit(pkg, hook, tmp_path):
    trainer, model, dm, report = _fit(pkg, hook, tmp_path)

    # GPUAugmentation then ChannelsLast ran on every batch, training and validation.
    assert len(model.train_images) == EPOCHS * BATCHES and len(model.val_images) == EPOCHS * 2
    for images in model.train_images + model.val_images:
        assert images.dtype == torch.float32 and images.shape == (BATCH, 3, 8, 8) and is_channels_last(images)
        assert 0.0 <= float(images.min()) and float(images.max()) <= 1.0
    if hook:  # the datamodule's own hook ran (its override wins) and saw uint8, before the augmentation
        assert dm.hook_saw == [torch.uint8] * (EPOCHS * (BATCHES + 2))
    # Everything restored after fit.
    assert get_pipeline(trainer) is None
    assert "on_after_batch_transfer" not in model.__dict__ and "on_after_batch_transfer" not in dm.__dict__

    # StepwiseLR: the cosine over 2 epochs is followed per optimizer step (k / 4 epochs), not per epoch.
    expected = [LR * (1 + math.cos(math.pi * (k / BATCHES) / EPOCHS)) / 2 for k in range(EPOCHS * BATCHES)]
    assert model.lrs == pytest.approx(expected, rel=1e-6)

    # EfficiencyReport: figures, facts from the other callbacks (trainer.callbacks), metrics in the logger.
    summary = report.summary()
    assert summary["steps"] == EPOCHS * BATCHES and summary["samples"] == EPOCHS * BATCHES * BATCH
    assert summary["images_per_s"] > 0 and 0 <= summary["data_wait_share"] <= 1
    checks = {c.practice: c.ok for c in report.checks}
    assert checks["LR stepped per optimizer step"] is True, checks
    assert checks["model channels_last"] is True and checks["inputs channels_last"] is True, checks
    assert checks["augmentation on the device"] is True, checks
    with open(os.path.join(trainer.logger.log_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert sum(1 for r in rows if r.get("efficiency/images_per_s")) == EPOCHS * BATCHES


@pytest.mark.parametrize("hook", [False, True], ids=["datamodule-without-hook", "datamodule-with-hook"])
def test_both_packages_train_identically(hook, tmp_path):
    _, pl_model, pl_dm, pl_report = _fit(pytorch_lightning, hook, tmp_path / "pl")
    _, l_model, l_dm, l_report = _fit(unified, hook, tmp_path / "l")
    for a, b in zip(
        pl_model.train_images + pl_model.val_images, l_model.train_images + l_model.val_images, strict=True
    ):
        assert torch.equal(a, b)
    assert pl_model.lrs == l_model.lrs
    for (name, a), (_, b) in zip(pl_model.state_dict().items(), l_model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    timed = "input pipeline keeps up"  # the one check that depends on measured time
    assert [(c.practice, c.ok) for c in pl_report.checks if c.practice != timed] == [
        (c.practice, c.ok) for c in l_report.checks if c.practice != timed
    ]
    assert getattr(pl_dm, "hook_saw", None) == getattr(l_dm, "hook_saw", None)


def _write_jpegs(root, n: int = 8, size: int = 16) -> None:
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "RGB").save(folder / f"{i}.jpg")


@PACKAGES
@pytest.mark.filterwarnings("ignore:GPUDecode. the model is on cpu")
def test_gpu_decode_runs_before_the_datamodule_hook(pkg, tmp_path):
    _write_jpegs(tmp_path / "images")
    dataset = le.FastImageFolder(tmp_path / "images", 16, train=False, eval_resize=16, backend="nvjpeg")
    Net, _, HookData = _classes(pkg)

    class JpegData(HookData):
        def train_dataloader(self):
            return DataLoader(dataset, batch_size=4, collate_fn=le.uint8_collate)

        def val_dataloader(self):
            return []

    decode = le.GPUDecode()
    model, dm = Net(), JpegData()
    trainer = pkg.Trainer(
        max_steps=2,
        limit_val_batches=0,
        logger=False,
        callbacks=[le.ChannelsLast(), le.GPUAugmentation(None), decode],
        **QUIET_KW,
    )
    trainer.fit(model, datamodule=dm)
    assert decode.batches_decoded == 2
    assert dm.hook_saw == [torch.uint8, torch.uint8]  # decoded before the user's hook, as with backend="pil"
    for images in model.train_images:
        assert images.dtype == torch.float32 and images.shape == (4, 3, 16, 16) and is_channels_last(images)


# ------------------------------------------------------------------------------------------- recipe() and the CLI


@PACKAGES
def test_recipe_builds_and_fits_a_trainer(pkg, tmp_path):
    monitor = pkg.callbacks.LearningRateMonitor()
    kwargs = le.recipe(
        accelerator="cpu",
        precision="32-true",
        augmentation="cifar",
        callbacks=[monitor],
        max_epochs=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        logger=pkg.loggers.CSVLogger(tmp_path),
    )
    assert [type(c) for c in kwargs["callbacks"]] == [
        type(monitor),
        le.GPUAugmentation,
        le.ChannelsLast,
        le.StepwiseLR,
        le.EfficiencyReport,
    ]
    Net, Data, _ = _classes(pkg)
    model = Net()
    trainer = pkg.Trainer(**kwargs)
    trainer.fit(model, datamodule=Data())
    report = next(c for c in trainer.callbacks if isinstance(c, le.EfficiencyReport))
    assert report.summary()["steps"] == BATCHES - report.skip_first
    assert all(is_channels_last(images) for images in model.train_images)
    assert is_channels_last(model.net[0].weight)
    with pytest.raises(TypeError, match="did you mean 'max_epochs'"):
        le.recipe(max_epoch=3)


CLI_CONFIG = {  # written as JSON, which YAML reads
    "seed_everything": 0,
    "trainer": {
        **QUIET_KW,
        "max_epochs": 1,
        "logger": False,
        "callbacks": [
            {"class_path": "lightning_efficient.GPUDecode"},
            {"class_path": "lightning_efficient.GPUAugmentation", "init_args": {"augmentation": "cifar", "seed": 0}},
            {"class_path": "lightning_efficient.StepwiseLR", "init_args": {"verbose": False}},
            {"class_path": "lightning_efficient.EfficiencyReport", "init_args": {"skip_first": 1, "verbose": False}},
        ],
    },
    "channels_last": {"five_d": "skip"},
}


@PACKAGES
def test_lightning_cli_configures_every_callback(pkg, tmp_path, monkeypatch):
    # Before: lightning.pytorch's LightningCLI refused our callbacks ("Cannot add arguments from: <class
    # ChannelsLast>. You should provide ... a subclass of: ... Callback"; `class_path` entries are type-checked too).
    pytest.importorskip("jsonargparse")
    cli_module = pytest.importorskip(f"{pkg.__name__}.cli")
    Net, _, HookData = _classes(pkg)

    class CLI(cli_module.LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_lightning_class_args(le.ChannelsLast, "channels_last")

    monkeypatch.setattr("sys.argv", ["cli"])  # LightningCLI warns when both `args` and pytest's argv are given
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(CLI_CONFIG))
    cli = CLI(Net, HookData, args=["--config", str(path)], run=False, save_config_callback=None)
    types = [type(c) for c in cli.trainer.callbacks]
    for cls in CALLBACKS:
        assert cls in types, (cls, types)
    cli.trainer.fit(cli.model, cli.datamodule)
    report = next(c for c in cli.trainer.callbacks if isinstance(c, le.EfficiencyReport))
    assert report.summary()["steps"] == BATCHES - 1  # the first skipped
    assert all(images.dtype == torch.float32 and is_channels_last(images) for images in cli.model.train_images)


# ------------------------------------------------------------------------------------------- Lightning's noise

LEAFSPEC = "isinstance(treespec, LeafSpec)"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _fit_and_listen(pkg, quiet: bool):
    """Build a Trainer and fit (the tip is logged at construction, the LeafSpec warning at fit); what came out."""
    from lightning_utilities.core import rank_zero

    from lightning_efficient.quiet import LIGHTNING_LOGGERS, quiet_lightning

    records = _Records()
    loggers = {logging.getLogger(n) for n in LIGHTNING_LOGGERS} | {rank_zero.log}
    for logger in loggers:
        logger.addHandler(records)
    Net, Data, _ = _classes(pkg)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with quiet_lightning() if quiet else warnings.catch_warnings():
                trainer = pkg.Trainer(
                    max_steps=1, logger=False, limit_val_batches=0, callbacks=[le.GPUAugmentation(None)], **QUIET_KW
                )
                trainer.fit(Net(), datamodule=Data())
                warnings.warn("a warning the user needs", UserWarning, stacklevel=2)
                rank_zero.rank_zero_info("a line the user needs")
    finally:
        for logger in loggers:
            logger.removeHandler(records)
    return [str(w.message) for w in caught], records.messages


@PACKAGES
def test_quiet_lightning_drops_tips_and_harmless_warnings_and_nothing_else(pkg):
    warned, logged = _fit_and_listen(pkg, quiet=False)  # what Lightning says: the noise exists
    assert any(LEAFSPEC in w for w in warned) and any(m.startswith("💡 Tip:") for m in logged), (warned, logged)

    warned, logged = _fit_and_listen(pkg, quiet=True)
    assert not any(LEAFSPEC in w for w in warned), warned
    assert not any("Tip:" in m for m in logged), logged
    assert "a warning the user needs" in warned and "a line the user needs" in logged


def test_the_demo_runs_its_trainers_quietly(monkeypatch):
    from lightning_utilities.core import rank_zero

    from lightning_efficient.app import runs

    def noisy_run(kind, cfg, train_idx, val_idx):
        warnings.warn(f"`{LEAFSPEC}` is deprecated, use ... instead.", FutureWarning, stacklevel=2)
        rank_zero.rank_zero_info("💡 Tip: For seamless cloud logging ...")
        warnings.warn("a warning the user needs", UserWarning, stacklevel=2)
        return {"kind": kind}

    monkeypatch.setattr(runs, "run_one", noisy_run)
    results: queue.Queue = queue.Queue()
    records = _Records()
    rank_zero.log.addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runs._child("efficient", None, [], [], results)
    finally:
        rank_zero.log.removeHandler(records)
    assert results.get_nowait() == ("ok", {"kind": "efficient"})
    assert [str(w.message) for w in caught] == ["a warning the user needs"]
    assert records.messages == []
