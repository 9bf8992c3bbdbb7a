"""ChannelsLast callback in real (tiny) Trainers: what the steps receive, composition, numerics, DDP, compile."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainer_helpers import TRAINER_KW, ddp_script_env

from lightning_efficient.callbacks.channels_last import ChannelsLast, ChannelsLastReport
from lightning_efficient.functional.layout import is_channels_last
from lightning_efficient.pipeline import add_stage, get_pipeline

# Several tests train without a val_dataloader on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")


class Images(Dataset):
    """Dict samples: float image [3, 8, 8], int64 label, uint8 mask [1, 8, 8], float vector [5]."""

    def __init__(self, n: int = 8) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 8, 8, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.mask = torch.randint(0, 2, (n, 1, 8, 8), generator=g, dtype=torch.uint8)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return {"image": self.x[i], "label": self.y[i], "mask": self.mask[i], "vec": self.x[i, 0, 0, :5]}


def _loader() -> DataLoader:
    return DataLoader(Images(), batch_size=4)


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 4),
        )
        self.seen: dict[str, list[dict]] = defaultdict(list)
        self.losses: list[torch.Tensor] = []
        self.grads: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def _record(self, batch, stage: str) -> None:
        self.seen[stage].append(
            {
                "image_cl": is_channels_last(batch["image"]),
                "mask_stride": batch["mask"].stride(),
                "mask_dtype": batch["mask"].dtype,
                "label_dtype": batch["label"].dtype,
                "vec_stride": batch["vec"].stride(),
            }
        )

    def training_step(self, batch, batch_idx):
        self._record(batch, "train")
        loss = nn.functional.cross_entropy(self(batch["image"]), batch["label"])
        self.losses.append(loss.detach().float())
        return loss

    def on_after_backward(self) -> None:
        if not self.grads:
            self.grads = {n: p.grad.detach().clone() for n, p in self.named_parameters()}

    def validation_step(self, batch, batch_idx):
        self._record(batch, "validate")

    def test_step(self, batch, batch_idx):
        self._record(batch, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self._record(batch, "predict")
        return self(batch["image"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def _check_seen(records: list[dict]) -> None:
    assert records, "the step was not called"
    nchw_mask_stride = torch.zeros(4, 1, 8, 8).stride()
    for r in records:
        assert r["image_cl"]
        assert r["mask_dtype"] == torch.uint8 and r["mask_stride"] == nchw_mask_stride  # integer: untouched
        assert r["label_dtype"] == torch.long
        assert r["vec_stride"] == (5, 1)


class Contiguous(pl.Callback):
    """Mimics Kornia: an "augment" stage of the batch pipeline that returns NCHW images."""

    def setup(self, trainer, pl_module, stage):
        def to_nchw(batch, dataloader_idx):
            return {**batch, "image": batch["image"].contiguous() * 1.0}

        self.pipeline = add_stage(trainer, pl_module, "augment", to_nchw, "augment")

    def teardown(self, trainer, pl_module, stage):
        self.pipeline.remove("augment")


# --------------------------------------------------------------------------------------------- all stages


def test_every_stage_receives_channels_last():
    model = _net()
    callback = ChannelsLast()
    trainer = pl.Trainer(max_steps=2, limit_val_batches=1, num_sanity_val_steps=1, callbacks=[callback], **TRAINER_KW)
    trainer.fit(model, _loader(), _loader())
    trainer.test(model, _loader(), verbose=False)
    predictions = trainer.predict(model, _loader())

    for stage in ("train", "validate", "test", "predict"):
        _check_seen(model.seen[stage])
    assert len(predictions) == 2 and all(p.shape == (4, 4) for p in predictions)
    assert all(is_channels_last(m.weight) for m in model.modules() if isinstance(m, nn.Conv2d))
    # Teardown removed the transform and restored the module's own hook.
    assert get_pipeline(model) is None and "on_after_batch_transfer" not in model.__dict__

    report = callback.report()
    assert isinstance(report, ChannelsLastReport)
    # 2 train + 1 sanity + 1 val + 2 test + 2 predict batches, one float 4-D tensor each.
    assert report.batches == 8 and report.batch_tensors_converted == 8 and report.batch_tensors_already == 0
    # The second and third setup found the weights already converted.
    assert report.model.converted == () and set(report.model.already) == {"model.0.weight", "model.3.weight"}
    assert "batches: 8" in report.summary()


def test_model_converted_in_setup_before_optimizer_and_device_move():
    seen = {}

    class Probe(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            optimizer_params = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
            seen["opt_has_same_params"] = optimizer_params == {id(p) for p in pl_module.parameters()}
            seen["weights_cl"] = [is_channels_last(pl_module.model[i].weight) for i in (0, 3)]

    model = _net()
    ids_before = [id(p) for p in model.parameters()]
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[Probe(), ChannelsLast()], **TRAINER_KW)
    trainer.fit(model, _loader())
    assert seen == {"opt_has_same_params": True, "weights_cl": [True, True]}
    assert [id(p) for p in model.parameters()] == ids_before


@pytest.mark.parametrize("augment_first", [True, False])
def test_composes_with_nchw_augmentation_in_either_callback_order(augment_first):
    model = _net()
    callbacks = [Contiguous(), ChannelsLast()] if augment_first else [ChannelsLast(), Contiguous()]
    trainer = pl.Trainer(max_steps=2, limit_val_batches=1, num_sanity_val_steps=0, callbacks=callbacks, **TRAINER_KW)
    trainer.fit(model, _loader(), _loader())
    _check_seen(model.seen["train"])
    _check_seen(model.seen["validate"])
    assert "on_after_batch_transfer" not in model.__dict__


@pytest.mark.parametrize("augment_first", [True, False])
def test_composes_with_real_gpu_augmentation(augment_first):
    """uint8 images: GPUAugmentation makes them float (NCHW, from Kornia's warp); the model gets channels_last."""
    from lightning_efficient.callbacks.gpu_augmentation import GPUAugmentation

    class Uint8Images(Images):
        def __getitem__(self, i: int):
            sample = super().__getitem__(i)
            sample["image"] = (sample["image"].clamp(-2, 2) * 60 + 128).to(torch.uint8)
            return sample

    augmentation = GPUAugmentation("cifar", image_key="image", seed=0)
    model = _net()
    callbacks = [augmentation, ChannelsLast()] if augment_first else [ChannelsLast(), augmentation]
    trainer = pl.Trainer(max_steps=2, limit_val_batches=1, num_sanity_val_steps=0, callbacks=callbacks, **TRAINER_KW)
    trainer.fit(model, DataLoader(Uint8Images(), batch_size=4), DataLoader(Uint8Images(), batch_size=4))
    _check_seen(model.seen["train"])
    _check_seen(model.seen["validate"])
    # GPUAugmentation hands over NCHW float batches (uint8 -> float keeps NCHW, Kornia returns NCHW): all converted.
    assert callbacks[int(augment_first)].report().batch_tensors_converted == 3


def test_runs_after_user_hook_and_datamodule_hook():
    class UserHookNet(Net):
        def on_after_batch_transfer(self, batch, dataloader_idx):
            batch["image"] = batch["image"].contiguous() + 0.0  # user code producing NCHW
            return batch

    class DM(pl.LightningDataModule):
        def train_dataloader(self):
            return _loader()

        def on_after_batch_transfer(self, batch, dataloader_idx):
            batch["image"] = batch["image"].contiguous() + 0.0
            return batch

    model = UserHookNet()
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[ChannelsLast()], **TRAINER_KW)
    trainer.fit(model, _loader())
    _check_seen(model.seen["train"])

    model, dm = _net(), DM()
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[ChannelsLast()], **TRAINER_KW)
    trainer.fit(model, datamodule=dm)
    _check_seen(model.seen["train"])
    assert "on_after_batch_transfer" not in dm.__dict__


def _one_step(model: Net, callbacks, precision: str = "32-true") -> Net:
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, precision=precision, callbacks=callbacks, **TRAINER_KW)
    trainer.fit(model, _loader())
    return model


@pytest.mark.parametrize(
    ("precision", "rtol", "atol"), [("32-true", 1e-5, 1e-6), ("bf16-mixed", 3e-2, 3e-2)], ids=["fp32", "bf16-mixed"]
)
def test_loss_and_gradients_match_nchw(precision, rtol, atol):
    reference = _net()
    candidate = copy.deepcopy(reference)
    _one_step(reference, [], precision)
    _one_step(candidate, [ChannelsLast()], precision)

    assert is_channels_last(candidate.model[0].weight.grad)
    assert not is_channels_last(reference.model[0].weight)
    torch.testing.assert_close(candidate.losses[0], reference.losses[0], rtol=rtol, atol=atol)
    assert candidate.grads.keys() == reference.grads.keys()
    for name, grad in candidate.grads.items():
        assert torch.isfinite(grad).all(), name
        torch.testing.assert_close(grad, reference.grads[name], rtol=rtol, atol=atol, msg=name)
    for (name, p), q in zip(candidate.named_parameters(), reference.parameters(), strict=False):
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=name)


# ------------------------------------------------------------------------------------------ options, errors


def test_options_exclude_batch_only_model_only():
    model = _net()
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[ChannelsLast(exclude="model.3")], **TRAINER_KW)
    trainer.fit(model, _loader())
    assert is_channels_last(model.model[0].weight) and not is_channels_last(model.model[3].weight)

    model = _net()
    callback = ChannelsLast(convert_model=False)
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[callback], **TRAINER_KW)
    trainer.fit(model, _loader())
    _check_seen(model.seen["train"])
    assert not is_channels_last(model.model[0].weight) and callback.report().model is None

    model = _net()  # Composer's behaviour: model only
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[ChannelsLast(convert_batch=False)], **TRAINER_KW)
    trainer.fit(model, _loader())
    assert not model.seen["train"][0]["image_cl"] and is_channels_last(model.model[0].weight)


def test_bad_arguments():
    with pytest.raises(ValueError, match="five_d"):
        ChannelsLast(five_d="3d")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="module names"):
        ChannelsLast(exclude=(1.5,))
    with pytest.raises(ValueError, match="do nothing"):
        ChannelsLast(convert_model=False, convert_batch=False)
    with pytest.raises(TypeError, match="bool"):
        ChannelsLast(convert_batch="yes")  # type: ignore[arg-type]
    trainer = pl.Trainer(max_steps=1, callbacks=[ChannelsLast(exclude="modle.fc")], **TRAINER_KW)
    with pytest.raises(ValueError, match="modle.fc"):
        trainer.fit(_net(), _loader())


def test_warns_when_model_has_nothing_to_convert():
    class Mlp(Net):
        def __init__(self):
            super().__init__()
            self.model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))

    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[ChannelsLast()], **TRAINER_KW)
    with pytest.warns(UserWarning, match="no floating-point 4-D"):
        trainer.fit(Mlp(), _loader())


# --------------------------------------------------------------------------------------- compile and DDP


def _has_cpp_compiler() -> bool:
    return any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++"))


class Tiny(pl.LightningModule):
    """One graph for the compiler: conv, ReLU (a generated C++ kernel on NHWC data), pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch["image"])


@pytest.mark.skipif(not _has_cpp_compiler(), reason="torch.compile (inductor) on CPU needs a C++ compiler")
def test_torch_compile_predict_matches_eager():
    """A compiled model fed by ChannelsLast gives the eager NCHW predictions (forward only, to stay fast)."""
    torch.manual_seed(0)
    eager = Tiny()
    expected = pl.Trainer(**TRAINER_KW).predict(eager, _loader())

    model = copy.deepcopy(eager)
    callback = ChannelsLast()
    torch._dynamo.reset()
    try:
        got = pl.Trainer(callbacks=[callback], **TRAINER_KW).predict(torch.compile(model), _loader())
    finally:
        torch._dynamo.reset()

    assert callback.report().batch_tensors_converted == 2
    assert is_channels_last(model.model[0].weight)
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected, strict=False):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.ddp
def test_ddp_two_processes(tmp_path):
    """DDP, 2 CPU processes, gloo (script: tests/callbacks/ddp_channels_last_script.py)."""
    script = Path(__file__).with_name("ddp_channels_last_script.py")
    env = ddp_script_env()
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for result in results:
        assert result["world_size"] == 2
        assert result["seen"] and all(result["seen"])  # every train/val batch channels_last on each rank
        assert result["wrapped_weights_cl"] == [True, True, True]  # DDP-wrapped model, conv weights NHWC
        assert result["final_weights_cl"] == [True, True]
    # Gradients were all-reduced correctly: both ranks end with identical parameters.
    assert results[0]["checksum"] == results[1]["checksum"]


# --------------------------------------------------------------- NCHW-only code: `.view` after the convs


class FlattenNet(pl.LightningModule):
    """conv(3->8, 3x3, pad 1) -> relu -> flatten -> Linear(512, 2), the flatten written as ``flatten``:
    ``"view"`` (``h.view(h.size(0), -1)``, NCHW-only), ``"kernel"`` (a custom op that requires
    ``is_contiguous()``), or the fixes ``"flatten"`` (``torch.flatten(h, 1)``) and ``"reshape"``."""

    def __init__(self, flatten: str = "view") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(512, 2)
        self.flatten = flatten

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        if self.flatten == "view":
            h = h.view(h.size(0), -1)
        elif self.flatten == "kernel":
            if not h.is_contiguous():
                raise RuntimeError("my_cuda_op: input must be contiguous")
            h = h.view(h.size(0), -1)
        elif self.flatten == "flatten":
            h = torch.flatten(h, 1)
        else:
            h = h.reshape(h.size(0), -1)
        return self.fc(h)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.losses = [*getattr(self, "losses", []), loss.detach()]
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def predict_step(self, batch, batch_idx):
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _pairs() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 2, (8,), generator=g))
    return DataLoader(data, batch_size=4)


def _run(stage: str, model: pl.LightningModule, callbacks: list) -> Any:
    trainer = pl.Trainer(max_steps=2, num_sanity_val_steps=0, callbacks=callbacks, **TRAINER_KW)
    if stage == "fit":
        return trainer.fit(model, _pairs())
    if stage == "validate":
        return trainer.validate(model, _pairs(), verbose=False)
    if stage == "test":
        return trainer.test(model, _pairs(), verbose=False)
    return trainer.predict(model, _pairs())


STAGES = ("fit", "validate", "test", "predict")
# Either half of the conversion makes the conv output channels_last: the input, or the weight.
OPTIONS = ({}, {"convert_model": False}, {"convert_batch": False})


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "batch-only", "model-only"])
@pytest.mark.parametrize("stage", STAGES)
def test_view_after_convs_error_names_channels_last_and_the_fixes(stage, options):
    _run(stage, FlattenNet("view"), [])  # trains without the callback
    with pytest.raises(RuntimeError, match="view size is not compatible") as info:
        _run(stage, FlattenNet("view"), [ChannelsLast(**options)])
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1, notes
    assert "ChannelsLast" in notes[0] and "torch.flatten(h, 1)" in notes[0] and ".reshape(" in notes[0]


@pytest.mark.parametrize("stage", STAGES)
def test_contiguity_check_error_names_channels_last_and_contiguous(stage):
    _run(stage, FlattenNet("kernel"), [])
    with pytest.raises(RuntimeError, match="input must be contiguous") as info:
        _run(stage, FlattenNet("kernel"), [ChannelsLast()])
    (note,) = info.value.__notes__
    assert "ChannelsLast" in note and ".contiguous()" in note


def test_unrelated_errors_get_no_note():
    class Broken(FlattenNet):
        def training_step(self, batch, batch_idx):
            raise ValueError("boom: a bug of the user's own")

    with pytest.raises(ValueError, match="boom") as info:
        _run("fit", Broken("flatten"), [ChannelsLast()])
    assert not getattr(info.value, "__notes__", [])


def test_note_is_added_once():
    err = RuntimeError("view size is not compatible with input tensor's size and stride (...)")
    callback = ChannelsLast()
    callback.on_exception(None, None, err)  # type: ignore[arg-type]
    callback.on_exception(None, None, err)  # type: ignore[arg-type]
    assert len(err.__notes__) == 1


@pytest.mark.parametrize("flatten", ["flatten", "reshape"])
def test_the_suggested_fixes_train_with_the_same_losses(flatten):
    plain, fast = FlattenNet(flatten), FlattenNet(flatten)
    _run("fit", plain, [])
    _run("fit", fast, [ChannelsLast()])
    assert is_channels_last(fast.conv.weight)
    torch.testing.assert_close(torch.stack(fast.losses), torch.stack(plain.losses), rtol=1e-5, atol=1e-6)
    # and predictions equal those of the NCHW `.view` model with the same weights
    reference = FlattenNet("view")
    reference.load_state_dict({k: v.contiguous() for k, v in fast.state_dict().items()})
    x = torch.randn(4, 3, 8, 8)
    torch.testing.assert_close(fast(x.to(memory_format=torch.channels_last)), reference(x), rtol=1e-5, atol=1e-6)


def test_happy_path_adds_no_per_step_work():
    """The explanation lives in `on_exception` only: no other Lightning hook than setup/teardown is overridden."""
    overridden = sorted(
        name
        for name in dir(pl.Callback)
        if name.startswith("on_") and getattr(ChannelsLast, name) is not getattr(pl.Callback, name)
    )
    assert overridden == ["on_exception"]
