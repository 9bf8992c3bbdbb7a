"""GPUAugmentation callback in a tiny Trainer: which batches are augmented, dtypes, no parameter leaks, hooks."""

from __future__ import annotations

import logging
from collections import namedtuple

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger, Logger
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainer_helpers import TRAINER_KW, DestroyProcessGroupAtExit

from lightning_efficient.callbacks.gpu_augmentation import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    GPUAugmentation,
)
from lightning_efficient.functional.augment import normalize
from lightning_efficient.pipeline import get_pipeline
from lightning_efficient.precision import precision_input_dtype

N_IMAGES, SIZE = 12, 16


def _images() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (N_IMAGES, 3, SIZE, SIZE), dtype=torch.uint8, generator=g)


class TupleData(Dataset):
    def __init__(self, kind: str = "tuple") -> None:
        self.images = _images()
        self.kind = kind

    def __len__(self) -> int:
        return N_IMAGES

    def __getitem__(self, i):
        if self.kind == "dict":
            return {"image": self.images[i], "mask": (self.images[i, 0] // 64).long(), "idx": i}
        return self.images[i], i


class Recorder(pl.LightningModule):
    """Tiny conv net recording the batches its steps receive."""

    def __init__(self, kind: str = "tuple") -> None:
        super().__init__()
        self.kind = kind
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
        self.train_batches: list = []
        self.val_batches: list = []
        self.user_hook_calls = 0

    def _split(self, batch):
        if self.kind == "dict":
            return batch["image"], batch["idx"], batch
        return batch[0], batch[1], batch

    def training_step(self, batch, batch_idx):
        x, idx, _ = self._split(batch)
        self.train_batches.append((x.detach().clone(), idx.clone(), batch))
        return self.net(x).float().sum()

    def validation_step(self, batch, batch_idx):
        x, idx, _ = self._split(batch)
        self.val_batches.append((x.detach().clone(), idx.clone(), batch))

    def train_dataloader(self):
        return DataLoader(TupleData(self.kind), batch_size=5)  # partial last batch of 2

    def val_dataloader(self):
        return DataLoader(TupleData(self.kind), batch_size=5)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(cb, **kwargs) -> pl.Trainer:
    defaults = dict(TRAINER_KW, max_epochs=1, num_sanity_val_steps=1)
    defaults.update(kwargs)
    return pl.Trainer(callbacks=[cb] if cb is not None else [], **defaults)


def _plain(idx: torch.Tensor) -> torch.Tensor:
    """What an un-augmented, converted and normalised batch of these indices looks like."""
    return normalize(_images()[idx].float() / 255.0, IMAGENET_MEAN, IMAGENET_STD)


def test_training_batches_augmented_validation_only_converted():
    model = Recorder()
    cb = GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD, seed=0)
    _trainer(cb).fit(model)
    assert len(model.train_batches) == 3 and len(model.val_batches) == 1 + 3  # sanity check + validation
    sizes = [x.shape[0] for x, _, _ in model.train_batches]
    assert sizes == [5, 5, 2]
    changed = 0
    for x, idx, _ in model.train_batches:
        assert x.dtype == torch.float32 and x.shape[1:] == (3, SIZE, SIZE)
        # range of normalised [0, 1] values
        lo = (0 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
        hi = (1 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
        assert (x.amin((0, 2, 3)) >= lo - 1e-5).all() and (x.amax((0, 2, 3)) <= hi + 1e-5).all()
        plain = _plain(idx)
        changed += sum(not torch.allclose(x[i], plain[i], atol=1e-5) for i in range(x.shape[0]))
    assert changed >= 8  # 12 images, 1/14 chance each of Identity
    for x, idx, _ in model.val_batches:  # including the sanity-check batch
        assert x.dtype == torch.float32
        torch.testing.assert_close(x, _plain(idx), atol=1e-6, rtol=0)


def test_no_augmentation_state_leaks_into_model_or_optimizer():
    kornia_aug = pytest.importorskip("kornia.augmentation")
    policy = kornia_aug.auto.TrivialAugment()
    model = Recorder()
    n_params = len(list(model.parameters()))
    keys = set(model.state_dict())
    trainer = _trainer(GPUAugmentation(policy), num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(model)
    assert len(list(model.parameters())) == n_params and set(model.state_dict()) == keys
    opt_params = [p for group in trainer.optimizers[0].param_groups for p in group["params"]]
    assert len(opt_params) == n_params
    assert not any(p.requires_grad for p in policy.parameters())
    assert all(x.dtype == torch.float32 for x, _, _ in model.train_batches)


def test_user_hook_still_runs_and_is_restored():
    class WithHook(Recorder):
        def on_after_batch_transfer(self, batch, dataloader_idx):
            self.user_hook_calls += 1
            x, y = batch
            return x, y  # user code sees uint8 (runs before the callback)

    model = WithHook()
    seen: list = []
    original = WithHook.on_after_batch_transfer

    def spy(self, batch, dataloader_idx):
        seen.append(batch[0].dtype)
        return original(self, batch, dataloader_idx)

    WithHook.on_after_batch_transfer = spy
    try:
        cb = GPUAugmentation("cifar", seed=0)
        trainer = _trainer(cb, num_sanity_val_steps=0)
        trainer.fit(model)
    finally:
        WithHook.on_after_batch_transfer = original
    assert model.user_hook_calls == 6 and set(seen) == {torch.uint8}
    assert all(x.dtype == torch.float32 for x, _, _ in model.train_batches)
    assert "on_after_batch_transfer" not in model.__dict__ and get_pipeline(model) is None


def test_datamodule_override_and_dict_batches_with_masks():
    class DM(pl.LightningDataModule):
        calls = 0

        def train_dataloader(self):
            return DataLoader(TupleData("dict"), batch_size=6)

        def val_dataloader(self):
            return DataLoader(TupleData("dict"), batch_size=6)

        def on_after_batch_transfer(self, batch, dataloader_idx):
            DM.calls += 1
            batch["from_dm"] = True
            return batch

    model = Recorder("dict")
    dm = DM()
    cb = GPUAugmentation("trivial_augment", image_key="image", mask_key="mask", seed=1)
    _trainer(cb, num_sanity_val_steps=0).fit(model, datamodule=dm)
    assert DM.calls == 4 and "on_after_batch_transfer" not in dm.__dict__
    for x, _, batch in model.train_batches:
        assert batch["from_dm"] is True and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
        assert batch["mask"].dtype == torch.int64 and set(batch["mask"].unique().tolist()) <= {0, 1, 2, 3}
    for x, idx, batch in model.val_batches:
        torch.testing.assert_close(x, _images()[idx].float() / 255.0)
        torch.testing.assert_close(batch["mask"], (_images()[idx, 0] // 64).long())


def _run_seeded(seed: int) -> list[torch.Tensor]:
    pl.seed_everything(seed, verbose=False)
    model = Recorder()
    _trainer(GPUAugmentation("rand_augment", num_ops=2, magnitude=15), num_sanity_val_steps=0, limit_val_batches=0).fit(
        model
    )
    return [x for x, _, _ in model.train_batches]


def test_reproducible_under_seed_everything_and_global_rng_untouched():
    a, b, c = _run_seeded(7), _run_seeded(7), _run_seeded(8)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=False))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=False))
    # identical images in a batch come out different
    cb = GPUAugmentation("trivial_augment", seed=3)
    same = _images()[:1].expand(32, -1, -1, -1)
    out = cb.process((same, None))[0]
    assert len({o.flatten().tolist().__str__() for o in out}) > 10
    # the callback's generator, not the global RNG, drives presets
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    cb.process((same, None))
    torch.testing.assert_close(torch.rand(3), before)


def test_rank_offsets_the_seed():
    cb = GPUAugmentation("trivial_augment", seed=5)

    class FakeTrainer:
        def __init__(self, rank):
            self.global_rank = rank
            self.datamodule = None

    outs = []
    for rank in (0, 1):
        model = Recorder()
        cb.setup(FakeTrainer(rank), model, "fit")
        outs.append(cb.process((_images(), None))[0])
        cb.teardown(FakeTrainer(rank), model, "fit")
    assert not torch.equal(outs[0], outs[1])


def test_true_half_precision_output_dtype():
    model = Recorder()
    _trainer(
        GPUAugmentation("cifar", mean=IMAGENET_MEAN, std=IMAGENET_STD),
        precision="bf16-true",
        num_sanity_val_steps=0,
        limit_train_batches=1,
        limit_val_batches=1,
    ).fit(model)
    assert model.train_batches[0][0].dtype == torch.bfloat16
    assert model.val_batches[0][0].dtype == torch.bfloat16


def test_output_dtype_is_what_the_precision_plugin_gives_inputs():
    """The dtype comes from the plugin's public ``convert_input`` (what Lightning feeds the model), not a table."""
    from pytorch_lightning.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision

    assert precision_input_dtype(Precision()) == torch.float32
    assert precision_input_dtype(MixedPrecision("bf16-mixed", "cpu")) == torch.float32  # autocast casts later
    assert precision_input_dtype(HalfPrecision("bf16-true")) == torch.bfloat16
    assert precision_input_dtype(HalfPrecision("16-true")) == torch.float16
    assert precision_input_dtype(DoublePrecision()) == torch.float64


def test_unknown_precision_plugin_warns_instead_of_a_silent_float32():
    from pytorch_lightning.plugins.precision import Precision

    class Forgetful(Precision):  # claims bf16 but does not cast inputs
        precision = "bf16-true"

    class Broken(Precision):
        def convert_input(self, data):
            raise RuntimeError("no inputs today")

    class Integer(Precision):
        def convert_input(self, data):
            return data.long()

    for plugin, match in [
        (Forgetful(), "'bf16-true' but its convert_input leaves float32"),
        (Broken(), "raised RuntimeError: no inputs today"),
        (Integer(), "torch.int64"),
    ]:
        with pytest.warns(UserWarning, match=match) as record:
            assert precision_input_dtype(plugin) == torch.float32
        assert type(plugin).__name__ in str(record[0].message) and "Fix:" in str(record[0].message)


def test_64_true_batches_are_float64():
    model = Recorder()
    _trainer(
        GPUAugmentation("cifar", seed=0),
        precision="64-true",
        num_sanity_val_steps=0,
        limit_train_batches=1,
        limit_val_batches=1,
    ).fit(model)
    assert model.train_batches[0][0].dtype == torch.float64 and model.val_batches[0][0].dtype == torch.float64


def test_process_batch_structures_and_grayscale():
    cb = GPUAugmentation("imagenet", size=8, seed=0)
    gray = torch.randint(0, 256, (3, 1, 12, 10), dtype=torch.uint8)
    assert cb.process(gray).shape == (3, 1, 8, 8)
    Batch = namedtuple("Batch", ["x", "y"])
    out = cb.process(Batch(gray, torch.arange(3)))
    assert isinstance(out, Batch) and out.x.shape == (3, 1, 8, 8) and torch.equal(out.y, torch.arange(3))
    assert isinstance(cb.process([gray, 1]), list)
    conv = cb.process((gray, 1), augment=False)
    torch.testing.assert_close(conv[0], gray.float() / 255)  # eval: converted only, size unchanged


def test_constructor_and_batch_errors():
    with pytest.raises(ValueError, match="both `mean` and `std`"):
        GPUAugmentation(mean=IMAGENET_MEAN)
    with pytest.raises(ValueError, match="positive"):
        GPUAugmentation(mean=(0.5,), std=(0.0,))
    with pytest.raises(ValueError, match="Unknown augmentation preset"):
        GPUAugmentation("auto_augment")
    with pytest.raises(ValueError, match="Unknown option"):
        GPUAugmentation("trivial_augment", size=3)
    cb = GPUAugmentation(image_key="image")
    with pytest.raises(ValueError, match="no 'image'"):
        cb.process({"img": torch.zeros(1, 3, 4, 4)})
    with pytest.raises(ValueError, match="image tensor"):
        GPUAugmentation().process((torch.zeros(3, 4, 4), 1))
    with pytest.raises(ValueError, match="channels"):
        GPUAugmentation(mean=IMAGENET_MEAN, std=IMAGENET_STD).process((torch.zeros(2, 1, 4, 4), 1), augment=False)


def test_batch_lookup_errors_name_the_option_to_fix():
    x = torch.zeros(2, 3, 4, 4)
    with pytest.raises(ValueError, match=r"GPUAugmentation: `image_key=3` is not a valid index.*set `image_key=`"):
        GPUAugmentation(image_key=3).process((x, 1))
    with pytest.raises(ValueError, match="GPUAugmentation: cannot find `image_key=0` in a batch of type int"):
        GPUAugmentation().process(5)
    with pytest.raises(ValueError, match="cannot find `mask_key=1` in a batch of type Tensor"):
        GPUAugmentation(mask_key=1).process(x)
    with pytest.raises(ValueError, match=r"no 'mask'.*set `mask_key=`"):
        GPUAugmentation(image_key="image", mask_key="mask").process({"image": x})


def test_state_dict_resumes_the_random_stream():
    cb = GPUAugmentation("trivial_augment", seed=0)
    x = (_images(), None)
    cb.process(x)
    state = cb.state_dict()
    expected = cb.process(x)[0]
    fresh = GPUAugmentation("trivial_augment", seed=0)
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.process(x)[0], expected)


class _ImageLogger(Logger):
    """A logger whose experiment has TensorBoard's ``add_image`` signature (tensorboard is not installed here)."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list = []
        outer = self

        class Experiment:
            def add_image(self, tag, img_tensor, global_step=None):
                outer.images.append((tag, img_tensor, global_step))

        self._experiment = Experiment()

    @property
    def experiment(self):
        return self._experiment

    name = "images"
    version = 0

    def log_hyperparams(self, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        pass


def test_log_images_grid_once_and_skip_for_csv(tmp_path, caplog):
    logger = _ImageLogger()
    model = Recorder()
    _trainer(
        GPUAugmentation("cifar", log_images=True, mean=IMAGENET_MEAN, std=IMAGENET_STD),
        logger=logger,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        log_every_n_steps=1,
    ).fit(model)
    assert len(logger.images) == 1
    tag, img, step = logger.images[0]
    assert tag == "gpu_augmentation/train_batch" and img.dtype == torch.uint8 and step == 0
    assert img.shape == (3, SIZE + 4, 5 * (SIZE + 2) + 2)  # 5 images in one row of make_grid
    with caplog.at_level(logging.INFO):
        _trainer(
            GPUAugmentation("cifar", log_images=True),
            logger=CSVLogger(tmp_path),
            num_sanity_val_steps=0,
            limit_val_batches=0,
            limit_train_batches=1,
            log_every_n_steps=1,
        ).fit(Recorder())
    assert "cannot log images" in caplog.text


# DDP: two CPU processes (gloo) with the same global seed must still draw different augmentations.
class SameImages(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i):
        return _images()[0], i


class SaveBatches(Recorder):
    def __init__(self, out_dir: str) -> None:
        super().__init__()
        self.out_dir = out_dir

    def training_step(self, batch, batch_idx):
        torch.save(batch[0], f"{self.out_dir}/rank{self.global_rank}_step{batch_idx}.pt")
        return self.net(batch[0]).float().sum()

    def train_dataloader(self):
        return DataLoader(SameImages(), batch_size=4)


@pytest.mark.ddp
def test_ddp_ranks_draw_different_augmentations(tmp_path):
    """DDP (ddp_spawn, 2 CPU processes, gloo): identical inputs on both ranks come out differently augmented."""
    pl.seed_everything(0, verbose=False)
    model = SaveBatches(str(tmp_path))
    trainer = _trainer(
        GPUAugmentation("trivial_augment"), devices=2, strategy="ddp_spawn", num_sanity_val_steps=0, limit_val_batches=0
    )
    trainer.callbacks.append(DestroyProcessGroupAtExit())
    trainer.fit(model)
    r0 = torch.load(tmp_path / "rank0_step0.pt")
    r1 = torch.load(tmp_path / "rank1_step0.pt")
    assert r0.shape == r1.shape == (4, 3, SIZE, SIZE)
    assert not torch.equal(r0, r1)
