"""GPUAugmentation and input in other units: no silent double normalisation.

Reported: ``GPUAugmentation(..., mean=IMAGENET_MEAN, std=IMAGENET_STD)`` on batches the dataset had normalised
already (or on float noise) trained without a word, and ``mean=(123.675, ...), std=(58.395, ...)`` (0-255 units)
was accepted. Now the statistics are checked when the callback is built, and the first batch's value range once
(one host read); later batches are not read.
"""

from __future__ import annotations

import warnings

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainer_helpers import TRAINER_KW

from lightning_efficient.callbacks.gpu_augmentation import IMAGENET_MEAN, IMAGENET_STD, GPUAugmentation
from lightning_efficient.functional.augment import normalize

N, SIZE = 6, 12
IMAGENET_MEAN_255 = (123.675, 116.28, 103.53)
IMAGENET_STD_255 = (58.395, 57.12, 57.375)


def _unit_images() -> torch.Tensor:
    return torch.rand(N, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))


#: What a dataset may hand over, and whether GPUAugmentation should object.
INPUTS = {
    "uint8": (lambda: (_unit_images() * 255).round().to(torch.uint8), False),
    "unit_float": (_unit_images, False),
    "unit_bfloat16": (lambda: _unit_images().to(torch.bfloat16), False),
    "normalised": (lambda: normalize(_unit_images(), IMAGENET_MEAN, IMAGENET_STD), True),
    "normalised_half": (lambda: normalize(_unit_images(), IMAGENET_MEAN, IMAGENET_STD).half(), True),
    "float_0_255": (lambda: _unit_images() * 255, True),
    "noise": (lambda: torch.randn(N, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)), True),
}
#: GPUAugmentation settings under which [0, 1] is assumed (augmentation and/or normalisation).
SETTINGS = {
    "augment_and_normalise": dict(augmentation="trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD),
    "normalise_only": dict(augmentation=None, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    "augment_only": dict(augmentation="cifar"),
}


class Images(Dataset):
    def __init__(self, images: torch.Tensor) -> None:
        self.images = images

    def __len__(self) -> int:
        return N

    def __getitem__(self, i):
        return self.images[i], i


class Model(pl.LightningModule):
    def __init__(self, images: torch.Tensor) -> None:
        super().__init__()
        self.images = images
        self.w = nn.Parameter(torch.ones(()))

    def training_step(self, batch, batch_idx):
        return self.w * batch[0].float().mean()

    def validation_step(self, batch, batch_idx):
        pass

    def train_dataloader(self):
        return DataLoader(Images(self.images), batch_size=2)

    val_dataloader = train_dataloader

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _range_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "GPUAugmentation expects uint8 images" in str(w.message)]


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("given", sorted(INPUTS))
def test_float_input_outside_unit_range_gets_one_warning_naming_the_fix(given, setting):
    make, bad = INPUTS[given]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pl.Trainer(
            max_epochs=1, callbacks=[GPUAugmentation(seed=0, **SETTINGS[setting])], num_sanity_val_steps=1, **TRAINER_KW
        ).fit(Model(make()))  # 1 sanity + 3 training + 3 validation batches
    messages = _range_warnings(record)
    assert len(messages) == (1 if bad else 0), messages
    if bad:
        text = messages[0]
        assert "Fix:" in text and "normalised already" in text and "values in [" in text
        assert ("normalised a second time" in text) == ("mean" in SETTINGS[setting])
        assert ("augmented as if in [0, 1]" in text) == (SETTINGS[setting]["augmentation"] is not None)


def test_no_warning_when_the_callback_only_casts():
    """Without augmentation and normalisation nothing assumes [0, 1]: normalised input is the user's choice."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = GPUAugmentation(None).process((INPUTS["normalised"][0](), 0))
    assert _range_warnings(record) == [] and out[0].dtype == torch.float32


class HostReads(torch.Tensor):
    """A tensor that counts reads of its values by the host (``tolist``, ``item``, ``bool()``, ...): on a GPU
    each of them is a device synchronisation."""

    reads = 0
    _READS = {"tolist", "item", "__bool__", "__float__", "__int__", "__index__", "numpy", "__array__"}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in cls._READS:
            HostReads.reads += 1
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("given", ["unit_float", "normalised"])
def test_only_the_first_batch_is_read_back(given):
    cb = GPUAugmentation(None, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    images = INPUTS[given][0]()
    HostReads.reads = 0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = cb.process((images.as_subclass(HostReads), 0))
        assert HostReads.reads == 1  # the one range check
        for _ in range(3):
            later = cb.process((images.as_subclass(HostReads), 0))
    assert HostReads.reads == 1, "a later batch was read back to the host"
    assert len(_range_warnings(record)) == (given == "normalised")
    torch.testing.assert_close(first[0].as_subclass(torch.Tensor), later[0].as_subclass(torch.Tensor))


def test_uint8_batches_are_never_read_back():
    HostReads.reads = 0
    GPUAugmentation(None, mean=IMAGENET_MEAN, std=IMAGENET_STD).process(
        (INPUTS["uint8"][0]().as_subclass(HostReads), 0)
    )
    assert HostReads.reads == 0


def test_each_fit_checks_its_first_batch_again():
    cb = GPUAugmentation("cifar", seed=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            pl.Trainer(max_epochs=1, callbacks=[cb], num_sanity_val_steps=0, limit_val_batches=0, **TRAINER_KW).fit(
                Model(INPUTS["noise"][0]())
            )
    assert len(_range_warnings(record)) == 2


@pytest.mark.parametrize(
    "mean,std",
    [
        (IMAGENET_MEAN_255, IMAGENET_STD_255),
        (IMAGENET_MEAN, IMAGENET_STD_255),
        (IMAGENET_MEAN_255, IMAGENET_STD),
        ((127.5,), (127.5,)),
    ],
)
def test_statistics_in_0_255_units_are_rejected_naming_the_fix(mean, std):
    with pytest.raises(ValueError, match=r"look like 0-255 units.*Fix: divide them by 255") as err:
        GPUAugmentation("trivial_augment", mean=mean, std=std)
    if mean == IMAGENET_MEAN_255:
        assert "mean=(0.485, 0.456, 0.406)" in str(err.value)
    if std == IMAGENET_STD_255:
        assert "std=(0.229, 0.224, 0.225)" in str(err.value)


def test_statistics_in_unit_range_are_accepted():
    GPUAugmentation(mean=IMAGENET_MEAN, std=IMAGENET_STD)
    GPUAugmentation(mean=(0.5,), std=(0.5,))
    GPUAugmentation(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


def test_normalised_training_data_warns_even_after_a_clean_sanity_check():
    """The sanity check's validation batch (uint8 here) must not use up the check of the training batches."""

    class CleanVal(Model):
        def val_dataloader(self):
            return DataLoader(Images(INPUTS["uint8"][0]()), batch_size=2)

    cb = GPUAugmentation("trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD, seed=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer = pl.Trainer(max_epochs=1, callbacks=[cb], limit_val_batches=1, **TRAINER_KW)
        trainer.fit(CleanVal(INPUTS["normalised"][0]()))
    assert len(_range_warnings(record)) == 1
