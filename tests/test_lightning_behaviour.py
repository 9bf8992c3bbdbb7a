"""Lightning behaviours the package relies on that are not public API (ARCHITECTURE.md's table): each test fails
loudly when Lightning changes one of them. Both Lightning packages where installed."""

from __future__ import annotations

import importlib

import pytest
import pytorch_lightning
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from trainer_helpers import TRAINER_KW

from lightning_efficient.adapter import LIGHTNING_PACKAGES
from lightning_efficient.fetch_timing import FETCH_ACTION, watch_fetch

PACKAGES = pytest.mark.parametrize("pl", LIGHTNING_PACKAGES, ids=lambda p: p.__name__)


def _module(pl, scheduler=None):
    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            events.append(("step", batch_idx))
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return opt if scheduler is None else {"optimizer": opt, "lr_scheduler": scheduler(opt)}

    return Net()


events: list = []


class Listener:
    def fetch_started(self):
        events.append("fetch started")

    def fetch_stopped(self):
        events.append("fetch stopped")


class Stream(IterableDataset):
    def __iter__(self):
        return iter([(torch.ones(2), torch.ones(1))] * 4)


@PACKAGES
@pytest.mark.parametrize("sized", [True, False])
def test_the_training_loop_profiles_each_fetch_under_one_action_name(pl, sized):
    """``watch_fetch`` wraps ``trainer.profiler.start/stop`` for actions ending in FETCH_ACTION: one fetch per
    training batch; for a sized loader it happens after the previous step (no prefetch), unsized one ahead."""
    data = TensorDataset(torch.ones(4, 2), torch.ones(4, 1)) if sized else Stream()
    trainer = pl.Trainer(**TRAINER_KW, max_epochs=1)
    original = trainer.profiler.start
    remove = watch_fetch(trainer, Listener())
    events.clear()
    trainer.fit(_module(pl), DataLoader(data, batch_size=None if not sized else 1))
    fetches = events.count("fetch started")
    assert fetches == events.count("fetch stopped") and fetches >= 4
    steps = [i for i, e in enumerate(events) if isinstance(e, tuple)]
    assert len(steps) == 4
    if sized:  # each step's batch was fetched right before it, after the previous step
        assert all(events[i - 1] == "fetch stopped" and events[i - 2] == "fetch started" for i in steps)
    remove()
    assert trainer.profiler.start == original and "start" not in trainer.profiler.__dict__
    assert FETCH_ACTION == "train_dataloader_next"


@PACKAGES
def test_clearing_the_strategys_scheduler_configs_at_fit_start_leaves_schedulers_unstepped(pl):
    """tune()'s measuring fits set ``trainer.strategy.lr_scheduler_configs = []`` in ``on_fit_start``: a scheduler
    monitoring a validation metric then fails no epoch end."""

    class Clear(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            trainer.strategy.lr_scheduler_configs = []

    plateau = lambda opt: {"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt), "monitor": "val_loss"}  # noqa: E731
    loader = DataLoader(TensorDataset(torch.ones(2, 2), torch.ones(2, 1)), batch_size=1)
    with pytest.raises(Exception, match="val_loss"):  # control: without clearing, Lightning fails at the epoch end
        pl.Trainer(**TRAINER_KW, max_epochs=2).fit(_module(pl, plateau), loader)
    trainer = pl.Trainer(**TRAINER_KW, max_epochs=2, callbacks=[Clear()])
    trainer.fit(_module(pl, plateau), loader)
    assert trainer.current_epoch == 2 and trainer.lr_scheduler_configs == []


@PACKAGES
def test_the_dummy_logger_lives_where_tune_imports_it(pl):
    logger = importlib.import_module(f"{pl.__name__}.loggers.logger").DummyLogger()
    logger.log_metrics({"a": 1.0}, step=0)
    logger.experiment.add_scalar("a", 1.0)  # any call on its experiment is a no-op


def test_the_packages_are_listed_once_each():
    assert LIGHTNING_PACKAGES[0] is pytorch_lightning and len(set(map(id, LIGHTNING_PACKAGES))) == len(
        LIGHTNING_PACKAGES
    )
