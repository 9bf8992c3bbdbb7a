"""Every callback with state: a checkpoint written with it resumes without it, and the reverse.

StepwiseLR's scheduler families are covered in ``test_stepwise_lr_state.py``; here GPUAugmentation (generator
states) and the whole ``recipe()`` set: the resumed run must continue from the checkpoint's epoch and step with the
optimizer state of the checkpoint, and a callback that comes back must continue its random stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
from trainer_helpers import TRAINER_KW, TinyClassifier

import lightning_efficient as le

# Resuming into another run's folder is the point here; Lightning says so each time.
pytestmark = pytest.mark.filterwarnings("ignore:The dirpath has changed")


class Net(TinyClassifier):
    def __init__(self) -> None:
        super().__init__(width=4)
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[0].detach().clone())
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8, generator=g), torch.randint(0, 2, (16,), generator=g)
    )
    return DataLoader(data, batch_size=4)


def _callbacks(kind: str) -> list:
    if kind == "plain":
        return [le.GPUAugmentation(None)]  # uint8 -> float only: the same inputs without augmentation state
    if kind == "augment":
        return [le.GPUAugmentation("trivial_augment", seed=0)]
    return le.recipe(augmentation=le.GPUAugmentation("trivial_augment", seed=0), precision="32-true")["callbacks"]


def _fit(kind: str, epochs: int, tmp_path: Path, ckpt: Path | None = None) -> tuple[Net, pl.Trainer]:
    model = Net()
    saver = ModelCheckpoint(tmp_path / kind, filename="{epoch}", save_top_k=-1)
    kw = {**TRAINER_KW, "enable_checkpointing": True, "num_sanity_val_steps": 0}
    trainer = pl.Trainer(max_epochs=epochs, callbacks=[*_callbacks(kind), saver], **kw)
    trainer.fit(model, _loader(), ckpt_path=ckpt)
    return model, trainer


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
@pytest.mark.parametrize(
    ("first", "second"), [("augment", "plain"), ("plain", "augment"), ("recipe", "plain"), ("plain", "recipe")]
)
def test_resume_with_and_without_the_callbacks(first: str, second: str, tmp_path: Path) -> None:
    pl.seed_everything(0)
    _, trainer = _fit(first, 1, tmp_path)
    ckpt = tmp_path / first / "epoch=0.ckpt"
    saved = torch.load(ckpt, weights_only=False)
    resumed, trainer = _fit(second, 2, tmp_path, ckpt=ckpt)
    assert trainer.current_epoch == 2 and trainer.global_step == 8  # continued from epoch 1, step 4
    assert len(resumed.seen) == 4  # only the second epoch ran
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 2  # StepLR continued, not restarted
    momentum = trainer.optimizers[0].state[next(iter(resumed.parameters()))]["momentum_buffer"]
    assert momentum is not None and saved["optimizer_states"][0]["state"]  # optimizer state came back


def test_augmentation_stream_continues_after_resume(tmp_path: Path) -> None:
    pl.seed_everything(0)
    straight, _ = _fit("augment", 2, tmp_path / "a")
    pl.seed_everything(0)
    _fit("augment", 1, tmp_path / "b")
    pl.seed_everything(0)
    resumed, _ = _fit("augment", 2, tmp_path / "c", ckpt=tmp_path / "b" / "augment" / "epoch=0.ckpt")
    for a, b in zip(straight.seen[4:], resumed.seen, strict=False):
        assert torch.equal(a, b)  # the second epoch's augmented batches are the same as without the interruption
