"""The batch pipeline (``lightning_efficient.pipeline``): order, installation and removal, timing, and the whole
chain GPUDecode -> user hook -> GPUAugmentation -> ChannelsLast in a real ``Trainer.fit`` on the CPU."""

from __future__ import annotations

import types

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch import nn
from torch.utils.data import DataLoader
from trainer_helpers import TRAINER_KW

from lightning_efficient import ChannelsLast, FastImageFolder, GPUAugmentation, GPUDecode, uint8_collate
from lightning_efficient.data import EncodedImages
from lightning_efficient.functional.layout import is_channels_last
from lightning_efficient.pipeline import (
    STAGE_KINDS,
    BatchPipeline,
    add_stage,
    get_pipeline,
    hook_owner,
    overrides_hook,
)


class Plain(pl.LightningModule):
    """No hook of its own."""


class WithHook(pl.LightningModule):
    def on_after_batch_transfer(self, batch, dataloader_idx):
        return [*batch, "user"]


def _appender(tag):
    def fn(batch, dataloader_idx):
        return [*batch, tag]

    return fn


class Clock:
    def __init__(self):
        self.events: list[str] = []

    def start(self):
        self.events.append("start")

    def stop(self):
        self.events.append("stop")


# ------------------------------------------------------------------------------------------- unit level


def test_stages_run_by_kind_around_the_user_hook_whatever_the_order_added():
    model = WithHook()
    trainer = types.SimpleNamespace(datamodule=None)
    pipeline = add_stage(trainer, model, "layout", _appender("layout"), "layout")
    assert add_stage(trainer, model, "augment", _appender("augment"), "augment") is pipeline
    add_stage(trainer, model, "augment2", _appender("augment2"), "augment")
    add_stage(trainer, model, "decode", _appender("decode"), "decode")

    assert pipeline.names() == ["decode", "augment", "augment2", "layout"]
    assert model.on_after_batch_transfer([], 0) == ["decode", "user", "augment", "augment2", "layout"]
    # Lightning's override check sees the user's code through the wrapper (functools.wraps).
    assert is_overridden("on_after_batch_transfer", model) and overrides_hook(model)
    assert get_pipeline(model) is pipeline and get_pipeline(types.SimpleNamespace(lightning_module=model)) is pipeline

    text = pipeline.describe()
    lines = text.splitlines()
    assert lines[0] == "BatchPipeline on WithHook.on_after_batch_transfer:"
    order = [line.split()[1] for line in lines[1:6]]
    assert order == ["decode", "user", "augment", "augment", "layout"]
    assert "WithHook.on_after_batch_transfer" in lines[2] and "1 batches" in lines[-1]
    assert str(pipeline) == text and "stages=['decode', 'augment', 'augment2', 'layout']" in repr(pipeline)

    for name in ("decode", "augment", "augment2"):
        pipeline.remove(name)
        assert "on_after_batch_transfer" in model.__dict__
    pipeline.remove("layout")
    pipeline.remove("layout")  # idempotent
    assert "on_after_batch_transfer" not in model.__dict__ and get_pipeline(model) is None
    assert not pipeline.installed and model.on_after_batch_transfer([], 0) == ["user"]
    with pytest.raises(RuntimeError, match="uninstalled"):
        pipeline.add("late", _appender("late"), "layout")


def test_plain_module_stays_not_overridden_and_instance_attribute_is_restored():
    model = Plain()
    pipeline = add_stage(types.SimpleNamespace(datamodule=None), model, "x", _appender("x"), "layout")
    assert not is_overridden("on_after_batch_transfer", model) and not overrides_hook(model)
    assert model.on_after_batch_transfer([1], 0) == [1, "x"]
    assert "not overridden: identity" in pipeline.describe()
    pipeline.remove("x")

    own = _appender("instance")
    model = Plain()
    model.on_after_batch_transfer = own  # set by someone before us
    pipeline = add_stage(types.SimpleNamespace(datamodule=None), model, "x", _appender("x"), "layout")
    assert model.on_after_batch_transfer([], 0) == ["instance", "x"]
    pipeline.remove("x")
    assert model.__dict__["on_after_batch_transfer"] is own


def test_bad_stage_installs_nothing():
    model = Plain()
    trainer = types.SimpleNamespace(datamodule=None)
    with pytest.raises(ValueError, match="kind must be one of"):
        add_stage(trainer, model, "x", _appender("x"), "normalize")
    with pytest.raises(TypeError, match="callable"):
        add_stage(trainer, model, "x", "not callable", "layout")
    assert get_pipeline(model) is None and "on_after_batch_transfer" not in model.__dict__
    assert STAGE_KINDS == ("decode", "resize", "augment", "layout")


def test_same_name_replaces():
    model = Plain()
    trainer = types.SimpleNamespace(datamodule=None)
    pipeline = add_stage(trainer, model, "x", _appender("old"), "layout")
    add_stage(trainer, model, "y", _appender("y"), "layout")
    add_stage(trainer, model, "x", _appender("new"), "layout")
    assert model.on_after_batch_transfer([], 0) == ["y", "new"]
    pipeline.remove("x")
    pipeline.remove("y")


def test_clocks_and_seconds():
    model = WithHook()
    trainer = types.SimpleNamespace(datamodule=None)
    pipeline = add_stage(trainer, model, "layout", _appender("layout"), "layout")
    clock = Clock()
    pipeline.add_clock(clock)
    pipeline.add_clock(clock)  # once only
    model.on_after_batch_transfer([], 0)
    assert clock.events == ["start", "stop"]  # only stages after the user's hook: one interval

    add_stage(trainer, model, "decode", _appender("decode"), "decode")
    model.on_after_batch_transfer([], 0)
    assert clock.events[2:] == ["start", "stop", "start", "stop"]  # before and after the user's hook

    def boom(batch, dataloader_idx):
        raise RuntimeError("stage failed")

    add_stage(trainer, model, "boom", boom, "augment")
    with pytest.raises(RuntimeError, match="stage failed"):
        model.on_after_batch_transfer([], 0)
    assert clock.events[-2:] == ["start", "stop"]  # stopped although the stage raised
    assert pipeline.batches == 3 and pipeline.seconds > 0

    pipeline.remove_clock(clock)
    pipeline.remove("boom")
    before = len(clock.events)
    model.on_after_batch_transfer([], 0)
    assert len(clock.events) == before
    with pytest.raises(TypeError, match="start"):
        pipeline.add_clock(object())  # type: ignore[arg-type]
    pipeline.remove("decode")
    pipeline.remove("layout")


def test_owner_is_the_datamodule_that_overrides_the_hook_for_either_lightning_package():
    class DM(pl.LightningDataModule):
        def on_after_batch_transfer(self, batch, dataloader_idx):
            return batch

    model = Plain()
    assert hook_owner(types.SimpleNamespace(datamodule=DM()), model) is not model
    assert hook_owner(types.SimpleNamespace(datamodule=pl.LightningDataModule()), model) is model
    assert hook_owner(types.SimpleNamespace(datamodule=None), model) is model

    # The unified `lightning` package has its own DataHooks class (`lightning.pytorch.core.hooks`); the check
    # must not need `pytorch_lightning` classes (Lightning's `is_overridden` raises "Expected a parent" there).
    base = type("DataHooks", (), {"__module__": "lightning.pytorch.core.hooks"})

    def identity(self, batch, dataloader_idx):
        return batch

    identity.__qualname__ = "DataHooks.on_after_batch_transfer"
    identity.__module__ = "lightning.pytorch.core.hooks"
    base.on_after_batch_transfer = identity
    other_package_dm = type("LightningDataModule", (base,), {})
    user_dm = type("UserDM", (other_package_dm,), {"on_after_batch_transfer": lambda self, b, i: b})
    assert not overrides_hook(other_package_dm()) and overrides_hook(user_dm())
    with pytest.raises(ValueError, match="Expected a parent"):
        is_overridden("on_after_batch_transfer", user_dm())
    assert hook_owner(types.SimpleNamespace(datamodule=other_package_dm()), model) is model
    dm = user_dm()
    assert hook_owner(types.SimpleNamespace(datamodule=dm), model) is dm
    assert not overrides_hook(None) and not overrides_hook(object())


# ------------------------------------------------------------------------------- the chain in a Trainer


def _write_jpegs(root, n: int = 8, size: int = 16) -> list:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        folder = root / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        # Smooth content: JPEG decoders then agree up to rounding.
        x = np.linspace(0, 1, size)
        base = rng.uniform(0, 255, 3)
        rgb = np.stack([base[c] * (0.5 + 0.5 * np.add.outer(x, x) / 2) for c in range(3)], axis=-1)
        path = folder / f"img{i}.jpg"
        Image.fromarray(rgb.astype(np.uint8), "RGB").save(path, quality=95)
        paths.append(path)
    return paths


class ChainNet(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
        self.user_saw: list = []
        self.step_saw: list = []
        self.stage_order: list = []

    def on_after_batch_transfer(self, batch, dataloader_idx):
        images, targets = batch
        self.user_saw.append((type(images), images.dtype, tuple(images.shape), images.clone()))
        return images, targets

    def training_step(self, batch, batch_idx):
        images, targets = batch
        self.step_saw.append((images.dtype, tuple(images.shape), is_channels_last(images), images.detach().clone()))
        self.stage_order = get_pipeline(self.trainer).names()
        return nn.functional.cross_entropy(self.net(images), targets)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.filterwarnings("ignore:GPUDecode. the model is on cpu")
@pytest.mark.parametrize("augment", [False, True], ids=["augmentation-off", "cifar"])
def test_decode_augment_layout_chain_in_trainer_fit(tmp_path, augment):
    paths = _write_jpegs(tmp_path)
    dataset = FastImageFolder(tmp_path, 16, train=False, eval_resize=16, backend="nvjpeg")
    loader = DataLoader(dataset, batch_size=4, shuffle=False, collate_fn=uint8_collate)
    model = ChainNet()
    augmentation = GPUAugmentation("cifar" if augment else None, seed=0)
    decode = GPUDecode()
    # Listed in reverse: the pipeline decides the order, not the callbacks list.
    trainer = pl.Trainer(
        max_steps=2, limit_val_batches=0, callbacks=[ChannelsLast(), augmentation, decode], **TRAINER_KW
    )
    trainer.fit(model, loader)

    assert model.stage_order == ["gpu_decode", "gpu_augmentation", "channels_last"]
    assert get_pipeline(model) is None and "on_after_batch_transfer" not in model.__dict__  # restored
    assert decode.batches_decoded == 2 and len(model.user_saw) == 2 and len(model.step_saw) == 2
    # The user's hook sees decoded uint8 tensors (decode runs before it), never EncodedImages.
    for kind, dtype, shape, _ in model.user_saw:
        assert kind is torch.Tensor and kind is not EncodedImages
        assert dtype == torch.uint8 and shape == (4, 3, 16, 16)
    # training_step gets float32 in [0, 1], channels_last (augmentation returns NCHW, layout runs after it).
    for dtype, shape, channels_last, images in model.step_saw:
        assert dtype == torch.float32 and shape == (4, 3, 16, 16) and channels_last
        assert 0.0 <= images.min() and images.max() <= 1.0
    if augment:
        return
    # Without augmentation: the decoded images equal Pillow's decode up to rounding, and the float images equal
    # the uint8 ones / 255.
    decoded = torch.cat([u[3] for u in model.user_saw])
    for k, path in enumerate(sorted(paths, key=lambda p: (p.parent.name, p.name))):
        with Image.open(path) as img:
            pil = torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)
        diff = (decoded[k].int() - pil.int()).abs()
        assert diff.float().mean() < 1.0 and diff.max() <= 3, (str(path), diff.float().mean(), diff.max())
    floats = torch.cat([s[3] for s in model.step_saw])
    torch.testing.assert_close(floats, decoded.float() / 255, rtol=0, atol=1e-6)


def test_print_the_pipeline_of_a_trainer_during_fit():
    seen = {}

    class Probe(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            pipeline = get_pipeline(trainer)
            seen["type"] = type(pipeline)
            seen["text"] = str(pipeline)

    model = ChainNet()
    data = [(torch.rand(3, 8, 8), 0), (torch.rand(3, 8, 8), 1)]
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[Probe(), ChannelsLast()], **TRAINER_KW)
    trainer.fit(model, DataLoader(data, batch_size=2))
    assert seen["type"] is BatchPipeline
    assert "1. user" in seen["text"] and "2. layout  channels_last" in seen["text"]
