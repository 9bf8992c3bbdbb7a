"""GPUAugmentation under every Trainer precision (the ``precision_input_dtype`` rule).

The same draws must give the same geometry and values whatever ``precision=`` is: the callback augments in
float32 and casts last, to the dtype the precision plugin's ``convert_input`` gives model inputs. Under the
``*-true`` precisions Lightning casts float batches to the half dtype *before* the transfer hooks; the images
here are exact in every dtype (multiples of 1/256), so only the final cast may round.
"""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainer_helpers import TRAINER_KW

from lightning_efficient.callbacks.gpu_augmentation import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    GPUAugmentation,
)
from lightning_efficient.precision import precision_input_dtype

N, SIZE = 6, 24

#: precision string -> the dtype of the images the module receives (``*-mixed``: float32, autocast casts later;
#: "16-mixed" on CPU becomes "bf16-mixed" with a warning).
PRECISIONS = {
    "32-true": torch.float32,
    "32": torch.float32,
    "16-mixed": torch.float32,
    "16": torch.float32,
    "bf16-mixed": torch.float32,
    "bf16": torch.float32,
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
    "64-true": torch.float64,
    "64": torch.float64,
}
#: One precision per plugin (the others are aliases) for the runs through a Trainer.
PLUGIN_PRECISIONS = ["32-true", "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true"]


class Pairs(Dataset):
    """``(image, int64 mask [H, W])``; images ``uint8`` or float multiples of 1/256 (exact in every dtype)."""

    def __init__(self, kind: str) -> None:
        g = torch.Generator().manual_seed(0)
        codes = torch.randint(0, 256, (N, 3, SIZE, SIZE), generator=g)
        self.images = codes.to(torch.uint8) if kind == "uint8" else codes.float() / 256.0
        self.masks = torch.randint(0, 4, (N, SIZE, SIZE), generator=g)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i):
        return self.images[i], self.masks[i]


class Recorder(pl.LightningModule):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.w = nn.Parameter(torch.ones(()))
        self.batches: dict[str, list] = {"train": [], "val": []}

    def _record(self, batch, stage):
        x, masks = batch
        self.batches[stage].append((x.detach().clone(), masks.clone()))
        return (self.w * x.mean()).float()

    def training_step(self, batch, batch_idx):
        return self._record(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._record(batch, "val")

    def train_dataloader(self):
        return DataLoader(Pairs(self.kind), batch_size=3)

    val_dataloader = train_dataloader

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _run(precision: str, augmentation: str, kind: str) -> Recorder:
    model = Recorder(kind)
    kwargs = {"size": 16} if augmentation == "imagenet" else {}
    cb = GPUAugmentation(augmentation, mean=IMAGENET_MEAN, std=IMAGENET_STD, mask_key=1, seed=0, **kwargs)
    pl.Trainer(max_epochs=1, precision=precision, callbacks=[cb], num_sanity_val_steps=0, **TRAINER_KW).fit(model)
    return model


_REFERENCE: dict[tuple[str, str], Recorder] = {}


def _reference(augmentation: str, kind: str) -> Recorder:
    if (augmentation, kind) not in _REFERENCE:
        _REFERENCE[augmentation, kind] = _run("32-true", augmentation, kind)
    return _REFERENCE[augmentation, kind]


@pytest.mark.filterwarnings("ignore:.*16-mixed.*:UserWarning")
@pytest.mark.parametrize("kind", ["uint8", "float"])
@pytest.mark.parametrize("augmentation", ["trivial_augment", "imagenet"])
@pytest.mark.parametrize("precision", PLUGIN_PRECISIONS)
def test_every_precision_gets_the_float32_batches_in_its_input_dtype(precision, augmentation, kind):
    ref = _reference(augmentation, kind)
    model = _run(precision, augmentation, kind)
    dtype = PRECISIONS[precision]
    for stage in ("train", "val"):
        assert len(model.batches[stage]) == len(ref.batches[stage]) == 2
        for (x, masks), (x_ref, masks_ref) in zip(model.batches[stage], ref.batches[stage], strict=False):
            assert x.dtype == dtype and masks.dtype == torch.int64 and masks.shape == masks_ref.shape
            assert torch.equal(x, x_ref.to(dtype)), f"{precision} {stage}: other values than float32's"
            assert torch.equal(masks, masks_ref)  # the same geometry: masks identical, images aligned with them


@pytest.mark.filterwarnings("ignore:.*16-mixed.*:UserWarning")
@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_precision_input_dtype_of_every_precision_plugin(precision):
    # (transformer-engine precisions need NVIDIA's transformer_engine package; not installed in CI.)
    expected = PRECISIONS[precision]
    plugin = pl.Trainer(precision=precision, **TRAINER_KW).precision_plugin
    assert precision_input_dtype(plugin) == expected
