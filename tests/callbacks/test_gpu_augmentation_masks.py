"""GPUAugmentation with segmentation masks: masks leave the callback with the shape and dtype
they came in with, in training as in validation, whatever module augments them.

The report: ``GPUAugmentation(AugmentationSequential(..., data_keys=["input", "mask"]), mask_key=1)`` on
``(uint8 [2, 3, 8, 8], int64 [2, 8, 8])`` batches gave ``[2, 1, 8, 8]`` training masks (kornia#4750) but
``[2, 8, 8]`` validation masks, so an unchanged segmentation module crashed in ``cross_entropy``.
"""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainer_helpers import TRAINER_KW

from lightning_efficient.callbacks.gpu_augmentation import GPUAugmentation

N, SIZE, CLASSES = 4, 8, 3
MASK_DTYPES = [torch.int64, torch.uint8, torch.bool, torch.float32]
MASK_LAYOUTS = ["BHW", "B1HW"]


class Segmentation(Dataset):
    """``(uint8 [3, 8, 8], mask)`` pairs; the mask is ``[8, 8]`` (layout BHW) or ``[1, 8, 8]`` (B1HW)."""

    def __init__(self, dtype: torch.dtype, layout: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (N, 3, SIZE, SIZE), dtype=torch.uint8, generator=g)
        labels = torch.randint(0, 2 if dtype == torch.bool else CLASSES, (N, SIZE, SIZE), generator=g).to(dtype)
        self.masks = labels if layout == "BHW" else labels.unsqueeze(1)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i):
        return self.images[i], self.masks[i]


class Segmenter(pl.LightningModule):
    """An unchanged segmentation module: per-pixel ``cross_entropy`` against ``[B, H, W]`` integer targets."""

    def __init__(self, dtype: torch.dtype, layout: str) -> None:
        super().__init__()
        self.data = Segmentation(dtype, layout)
        self.layout = layout
        self.head = nn.Conv2d(3, CLASSES, 1)
        self.seen: dict[str, list[tuple[tuple[int, ...], torch.dtype]]] = {"train": [], "val": []}

    def _loss(self, batch, stage: str):
        x, masks = batch
        self.seen[stage].append((tuple(masks.shape), masks.dtype))
        target = masks.squeeze(1) if self.layout == "B1HW" else masks  # written for the dataset's own layout
        return nn.functional.cross_entropy(self.head(x), target.long())

    def training_step(self, batch, batch_idx):
        return self._loss(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._loss(batch, "val")

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=2)

    val_dataloader = train_dataloader

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _kornia_sequential():
    K = pytest.importorskip("kornia.augmentation")
    return K.AugmentationSequential(
        K.RandomHorizontalFlip(), K.RandomAffine(degrees=20, resample="nearest", p=1.0), data_keys=["input", "mask"]
    )


def _float_answer(images, masks):
    """A custom callable that answers float ``[B, 1, H, W]`` masks whatever it is given."""
    m = (masks if masks.ndim == 4 else masks.unsqueeze(1)).float()
    return images.flip(-1), m.flip(-1)


AUGMENTATIONS = {
    "kornia": _kornia_sequential,
    "float_answer": lambda: _float_answer,
    "trivial_augment": lambda: "trivial_augment",
    "cifar": lambda: "cifar",
}


def test_the_reported_batch_keeps_its_mask_shape_in_training():
    """The report, as given: Kornia sequential, uint8 [2, 3, 8, 8] images, int64 [2, 8, 8] masks, mask_key=1."""
    model = Segmenter(torch.int64, "BHW")
    pl.Trainer(
        max_epochs=1,
        callbacks=[GPUAugmentation(_kornia_sequential(), mask_key=1, seed=0)],
        num_sanity_val_steps=0,
        **TRAINER_KW,
    ).fit(model)  # crashed in cross_entropy before
    assert model.seen["train"] == [((2, SIZE, SIZE), torch.int64)] * 2
    assert model.seen["val"] == [((2, SIZE, SIZE), torch.int64)] * 2


@pytest.mark.parametrize("layout", MASK_LAYOUTS)
@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("augmentation", sorted(AUGMENTATIONS))
def test_masks_leave_with_the_shape_and_dtype_they_came_in_with(augmentation, dtype, layout):
    model = Segmenter(dtype, layout)
    cb = GPUAugmentation(AUGMENTATIONS[augmentation](), mask_key=1, seed=0)
    pl.Trainer(max_epochs=1, callbacks=[cb], num_sanity_val_steps=1, **TRAINER_KW).fit(model)
    expected = ((2, SIZE, SIZE) if layout == "BHW" else (2, 1, SIZE, SIZE), dtype)
    assert model.seen["train"] == [expected] * 2
    assert model.seen["val"] == [expected] * 3  # sanity check + 2 validation batches


def test_process_gives_masks_back_aligned_with_the_images():
    """Direct use: the Kornia answer is squeezed back and the labels still sit under the pixels they label."""
    g = torch.Generator().manual_seed(2)
    labels = torch.randint(0, CLASSES, (6, SIZE, SIZE), generator=g)
    images = (labels * 80).to(torch.uint8).unsqueeze(1).expand(-1, 3, -1, -1).contiguous()
    torch.manual_seed(0)
    x, masks = GPUAugmentation(_kornia_sequential(), mask_key=1, seed=0).process((images, labels))
    assert masks.shape == labels.shape and masks.dtype == torch.int64
    torch.testing.assert_close((x[:, 0] * 255 / 80).round().long(), masks, atol=0, rtol=0)


def test_a_custom_callable_that_breaks_the_mask_layout_is_named():
    images = torch.randint(0, 256, (2, 3, SIZE, SIZE), dtype=torch.uint8)
    masks = torch.zeros(2, SIZE, SIZE, dtype=torch.int64)
    three = GPUAugmentation(lambda x, m: (x, m.unsqueeze(1).expand(-1, 3, -1, -1)), mask_key=1)
    with pytest.raises(ValueError, match=r"returned masks of shape \(2, 3, 8, 8\) for masks of shape \(2, 8, 8\)"):
        three.process((images, masks))
