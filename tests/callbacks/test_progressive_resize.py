"""ProgressiveResize in real fits: the sizes a model sees by position, at epoch boundaries, after a resume and an
epoch that ended early, validation at the final size, masks, the batch pipeline with the other callbacks, DDP
ranks, and the shapes a compiled model sees. Nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import TRAINER_KW, ddp_script_env

import lightning_efficient as le
from lightning_efficient.functional.resize import ResizeSchedule

SIDE, BATCHES = 32, 4


class Net(pl.LightningModule):
    """Records the image side of every training and validation batch (class-level: copies append here)."""

    seen: list[tuple[str, int, int, int]] = []

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
        self.fail_at = fail_at

    def on_train_batch_start(self, batch, batch_idx):
        return -1 if self.fail_at is not None and batch_idx == self.fail_at else None

    def training_step(self, batch, batch_idx):
        Net.seen.append(("train", self.current_epoch, batch_idx, batch[0].shape[-1]))
        return nn.functional.cross_entropy(self.net(batch[0].float()), batch[1])

    def validation_step(self, batch, batch_idx):
        Net.seen.append(("val", self.current_epoch, batch_idx, batch[0].shape[-1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(n: int = BATCHES * 2, side: int = SIDE) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.rand(n, 3, side, side, generator=g), torch.randint(0, 2, (n,))), batch_size=2)


def _fit(model, epochs=10, callbacks=(), val=None, **kw) -> pl.Trainer:
    Net.seen = [] if not kw.pop("keep", False) else Net.seen
    trainer = pl.Trainer(
        **{**TRAINER_KW, **kw},
        max_epochs=epochs,
        callbacks=[le.ProgressiveResize(min_side=0), *callbacks],
        limit_val_batches=1 if val else 0,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, _loader(), val, ckpt_path=kw.get("ckpt_path"))
    return trainer


def _expected(epochs: int = 10, batches: int = BATCHES) -> list[int]:
    return [
        ResizeSchedule(min_side=0).side(SIDE, e + b / batches, epochs) for e in range(epochs) for b in range(batches)
    ]


def test_every_training_batch_has_the_scheduled_side_and_epoch_boundaries_are_exact():
    _fit(Net())
    sides = [side for kind, _, _, side in Net.seen if kind == "train"]
    assert sides == _expected()
    by_epoch_start = {e: side for kind, e, b, side in Net.seen if kind == "train" and b == 0}
    assert by_epoch_start == {e: ResizeSchedule(min_side=0).side(SIDE, e, 10) for e in range(10)}
    assert by_epoch_start[0] == 16 and by_epoch_start[9] == SIDE and set(sides) == {16, 24, SIDE}


def test_validation_runs_at_the_final_size():
    _fit(Net(), epochs=2, val=_loader(2))
    assert {side for kind, *_, side in Net.seen if kind == "val"} == {SIDE}
    assert 16 in {side for kind, *_, side in Net.seen if kind == "train"}


def test_a_resumed_run_continues_at_the_size_of_an_uninterrupted_one(tmp_path):
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    _fit(Net(), epochs=6, callbacks=[ckpt], enable_checkpointing=True, default_root_dir=tmp_path)
    Net.seen = []
    model = Net()
    trainer = pl.Trainer(
        **{**TRAINER_KW, "enable_checkpointing": True},
        max_epochs=10,
        default_root_dir=tmp_path,
        callbacks=[le.ProgressiveResize(min_side=0)],
        limit_val_batches=0,
    )
    trainer.fit(model, _loader(), ckpt_path=str(tmp_path / "last.ckpt"))
    assert [side for *_, side in Net.seen] == _expected()[6 * BATCHES :]


def test_a_resume_with_another_schedule_warns(tmp_path):
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    _fit(Net(), epochs=1, callbacks=[ckpt], enable_checkpointing=True, default_root_dir=tmp_path)
    trainer = pl.Trainer(
        **{**TRAINER_KW, "enable_checkpointing": True},
        max_epochs=2,
        default_root_dir=tmp_path,
        callbacks=[le.ProgressiveResize(start_scale=0.25, min_side=0)],
        limit_val_batches=0,
    )
    with pytest.warns(UserWarning, match=r"checkpoint was trained with the schedule \[0.5, 0.5, 0.2, 8, 0, 1.0\]"):
        trainer.fit(Net(), _loader(), ckpt_path=str(tmp_path / "last.ckpt"))


def test_an_epoch_that_ends_early_is_followed_by_the_next_integer_position():
    _fit(Net(fail_at=2))  # 2 of 4 batches run per epoch
    seen = [(e, b, side) for kind, e, b, side in Net.seen if kind == "train"]
    assert seen == [
        (e, b, ResizeSchedule(min_side=0).side(SIDE, e + b / BATCHES, 10)) for e in range(10) for b in range(2)
    ]


def test_masks_are_resized_to_the_images_size_with_nearest_neighbours():
    got = []

    class Masked(Net):
        def training_step(self, batch, batch_idx):
            got.append((batch["image"].shape, batch["mask"].shape, batch["mask"].unique().tolist()))
            return nn.functional.cross_entropy(self.net(batch["image"]), torch.zeros(2, dtype=torch.long))

    data = [{"image": torch.rand(3, SIDE, SIDE), "mask": torch.randint(0, 3, (SIDE, SIDE))} for _ in range(4)]
    trainer = pl.Trainer(
        **TRAINER_KW,
        max_epochs=1,
        limit_val_batches=0,
        callbacks=[le.ProgressiveResize(image_key="image", mask_key="mask", min_side=0)],
    )
    trainer.fit(Masked(), DataLoader(data, batch_size=2))
    assert all(img[-2:] == mask[-2:] == (16, 16) and set(vals) <= {0, 1, 2} for img, mask, vals in got)


def test_it_runs_before_augmentation_and_layout_on_uint8_image_folder_batches(tmp_path):
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(4):
            Image.new("RGB", (40, 40), (60 * i, 90, 200 if c == "a" else 20)).save(tmp_path / c / f"{i}.jpg")
    loader = DataLoader(le.FastImageFolder(tmp_path, size=SIDE, train=True), batch_size=2, collate_fn=le.uint8_collate)
    seen = []

    class Spy(Net):
        def training_step(self, batch, batch_idx):
            x = batch[0]
            seen.append((x.dtype, x.shape[-1], x.is_contiguous(memory_format=torch.channels_last)))
            return super().training_step(batch, batch_idx)

    callbacks = [
        le.ChannelsLast(),
        le.GPUAugmentation("trivial_augment", mean=le.IMAGENET_MEAN, std=le.IMAGENET_STD),
        le.ProgressiveResize(total_epochs=10, min_side=0),
    ]
    trainer = pl.Trainer(**TRAINER_KW, max_epochs=2, limit_val_batches=0, callbacks=callbacks)
    trainer.fit(Spy(), loader)
    assert seen and all(dtype == torch.float32 and side == 16 and cl for dtype, side, cl in seen)


def test_the_pipeline_order_puts_resize_after_the_user_hook_and_before_augmentation():
    from lightning_efficient.pipeline import BEFORE_USER_HOOK, STAGE_KINDS

    assert STAGE_KINDS.index("decode") < STAGE_KINDS.index("resize") < STAGE_KINDS.index("augment")
    assert "resize" not in BEFORE_USER_HOOK


def test_a_compiled_model_sees_no_more_shapes_than_the_schedule_has_sides():
    compiles = []

    def counting(gm, example_inputs):  # a torch.compile backend that counts compilations, runs eagerly
        compiles.append(tuple(example_inputs[0].shape) if example_inputs else ())
        return gm.forward

    class Compiled(Net):
        def __init__(self):
            super().__init__()
            self.net = torch.compile(self.net, backend=counting, dynamic=False)

    _fit(Compiled())
    sides = ResizeSchedule(min_side=0).sides(SIDE, 10)
    assert 0 < len(compiles) <= len(sides)


def test_recipe_adds_it_only_when_asked_and_the_report_shows_the_sides():
    assert not any(isinstance(c, le.ProgressiveResize) for c in le.recipe()["callbacks"])
    kw = le.recipe(progressive_resize=le.ProgressiveResize(min_side=0), stepwise_lr=False, channels_last=False)
    assert any(isinstance(c, le.ProgressiveResize) for c in kw["callbacks"])
    with pytest.raises(TypeError, match="progressive_resize='yes'"):
        le.recipe(progressive_resize="yes")
    report = next(c for c in kw["callbacks"] if isinstance(c, le.EfficiencyReport))
    report.verbose = False
    _fit(Net(), epochs=10, callbacks=[report])
    line = next(c for c in report.checks if c.practice == "progressive resizing")
    assert line.detail.startswith(f"now {SIDE} px; images/s by side: 16 px ") and "24 px" in line.detail


def test_a_run_without_a_length_is_an_error_naming_the_fix():
    trainer = pl.Trainer(**TRAINER_KW, max_epochs=-1, limit_val_batches=0, callbacks=[le.ProgressiveResize(min_side=0)])
    with pytest.raises(ValueError, match=r"no length.*ProgressiveResize\(total_epochs=...\)"):
        trainer.fit(Net(), _loader())


@pytest.mark.ddp
def test_every_ddp_rank_trains_at_the_same_size(tmp_path):
    script = Path(__file__).with_name("ddp_resize_script.py")
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=ddp_script_env(),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    expected = [ResizeSchedule(min_side=0).side(SIDE, e + b / 2, 4) for e in range(4) for b in range(2)]
    assert ranks[0] == ranks[1] == expected and len(set(expected)) > 1


def _image_tree(root: Path, side: int = 40, per_class: int = 8) -> Path:
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (side, side), (30 * i, 90, 200 if c == "a" else 20)).save(root / c / f"{i}.png")
    return root


def test_image_folder_items_follow_the_scheduled_size_one_size_per_batch(tmp_path):
    train = le.FastImageFolder(_image_tree(tmp_path), size=SIDE, train=True)
    val = le.FastImageFolder(tmp_path, size=SIDE, train=False)
    assert train[0][0].shape == (3, SIDE, SIDE) and train.scheduled_size.tolist() == [0, 0]
    for data in (train, val):
        data.scheduled_size.copy_(torch.tensor([16, 24]))
    assert train[0][0].shape == (3, 16, 24) and val[0][0].shape == (3, SIDE, SIDE)  # evaluation keeps its size
    assert {x.shape for x, _ in train.__getitems__([0, 3, 5])} == {(3, 16, 24)}
    subset = torch.utils.data.Subset(train, [1, 2])
    assert [x.shape[-1] for x, _ in subset.__getitems__([0, 1])] == [24, 24]


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_workers_started_before_a_change_decode_at_the_new_size(tmp_path, start):
    data = le.FastImageFolder(_image_tree(tmp_path), size=SIDE, train=True)
    kw = dict(num_workers=1, persistent_workers=True, multiprocessing_context=start, collate_fn=le.uint8_collate)
    loader = DataLoader(data, batch_size=4, **kw)
    assert next(iter(loader))[0].shape[-1] == SIDE  # the worker is started (and persists)
    data.scheduled_size.copy_(torch.tensor([16, 16]))
    assert {x.shape[-1] for x, _ in loader} == {16}


def test_image_folder_data_is_decoded_at_the_scheduled_size_and_the_model_sees_the_schedule(tmp_path):
    arrived, seen = [], []

    class Spy(Net):
        def on_after_batch_transfer(self, batch, dataloader_idx):
            if self.trainer.training:  # before the resize stage: the size the loader decoded at
                arrived.append(batch[0].shape[-1])
            return batch

        def training_step(self, batch, batch_idx):
            seen.append(batch[0].shape[-1])
            return nn.functional.cross_entropy(self.net(batch[0].float()), batch[1])

    data = le.FastImageFolder(_image_tree(tmp_path), size=SIDE, train=True)  # 16 images: 8 batches of 2
    loader = DataLoader(data, batch_size=2, shuffle=True, num_workers=1, collate_fn=le.uint8_collate)
    trainer = pl.Trainer(**TRAINER_KW, max_epochs=4, limit_val_batches=0, callbacks=[le.ProgressiveResize(min_side=0)])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="ProgressiveResize")  # never upscaled
        trainer.fit(Spy(), loader)
    assert seen == [ResizeSchedule(min_side=0).side(SIDE, e + b / 8, 4) for e in range(4) for b in range(8)]
    assert all(a >= s for a, s in zip(arrived, seen, strict=True)) and min(arrived) == 16 < SIDE
    assert data.scheduled_size.tolist() == [0, 0]  # after the run: the full size again


def test_without_decode_at_size_the_data_stays_at_its_size(tmp_path):
    arrived = []

    class Spy(Net):
        def on_after_batch_transfer(self, batch, dataloader_idx):
            arrived.append(batch[0].shape[-1])
            return batch

    loader = DataLoader(le.FastImageFolder(_image_tree(tmp_path), size=SIDE), batch_size=4, collate_fn=le.uint8_collate)
    callbacks = [le.ProgressiveResize(decode_at_size=False, min_side=0)]
    pl.Trainer(**TRAINER_KW, max_epochs=2, limit_val_batches=0, callbacks=callbacks).fit(Spy(), loader)
    assert set(arrived) == {SIDE}


def test_min_side_keeps_small_images_from_shrinking_and_says_so():
    _fit(Net(), epochs=10, callbacks=[])  # min_side=0: down to half the side
    assert min(side for *_, side in Net.seen) == SIDE // 2
    for min_side, smallest in ((24, 24), (20, 24), (64, SIDE)):  # rounded up to a multiple of 8; at most the final
        Net.seen = []
        trainer = pl.Trainer(
            **TRAINER_KW, max_epochs=10, limit_val_batches=0, callbacks=[le.ProgressiveResize(min_side=min_side)]
        )
        if smallest == SIDE:  # the default: 32 px images keep their size, and a warning says so
            assert le.ProgressiveResize().schedule.min_side == 64
            with pytest.warns(UserWarning, match=r"\(32x32 px\) are not larger than min_side=64"):
                trainer.fit(Net(), _loader())
        else:
            trainer.fit(Net(), _loader())
        assert min(side for *_, side in Net.seen) == smallest


def test_trivial_augments_translations_follow_the_scheduled_side(monkeypatch):
    from lightning_efficient.functional.augment import presets

    scales: list[tuple[int, float]] = []
    original = presets.PRESETS["trivial_augment"]

    def spy(images, *, pixel_scale=1.0, **kw):
        scales.append((images.shape[-1], pixel_scale))
        return original(images, pixel_scale=pixel_scale, **kw)

    monkeypatch.setitem(presets.PRESETS, "trivial_augment", spy)
    _fit(Net(), epochs=10, callbacks=[le.GPUAugmentation("trivial_augment")])
    assert {side: scale for side, scale in scales} == {16: 0.5, 24: 0.75, SIDE: 1.0}


def test_the_batch_size_finder_tries_its_sizes_at_the_final_side():
    class Sized(Net):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 2

        def training_step(self, batch, batch_idx):
            Net.seen.append(("finder" if not self.trainer.callbacks else "train", 0, batch_idx, batch[0].shape[-1]))
            return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def train_dataloader(self):
            data = TensorDataset(torch.rand(16, 3, SIDE, SIDE), torch.randint(0, 2, (16,)))
            return DataLoader(data, batch_size=self.batch_size)

        def val_dataloader(self):
            return []

    Net.seen = []
    finder = pl.callbacks.BatchSizeFinder(steps_per_trial=1, max_trials=2)
    trainer = pl.Trainer(
        **TRAINER_KW, max_epochs=10, callbacks=[finder, le.ProgressiveResize(min_side=0)], limit_val_batches=0
    )
    trainer.fit(Sized())
    sides = {kind: {side for k, *_, side in Net.seen if k == kind} for kind in ("finder", "train")}
    assert sides["finder"] == {SIDE}  # the batch size found holds for the largest images of the run
    assert 16 in sides["train"]  # and the run itself starts small
