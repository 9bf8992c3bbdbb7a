"""``import lightning_efficient`` leaves Lightning as the user's own imports set it up.

* Where ``pytorch_lightning`` and ``lightning.pytorch`` are one module (an environment that aliases one to the other
  in ``sys.modules``), the package imports and its callbacks run: ``LIGHTNING_PACKAGES`` lists the package once and
  ``Callback`` subclasses its ``Callback`` once (listing it twice raised ``TypeError: duplicate base class``).
* Both packages re-point, on import, the rank-zero logger they share (``lightning_utilities.core.rank_zero.log``) at
  their own. After ``import lightning.pytorch``, importing this package (which imports ``pytorch_lightning``) must
  leave it as it was, or a user's logging set-up for ``lightning.pytorch`` stops receiving Lightning's messages, and
  Lightning's own tests of the "`Trainer.fit` stopped" messages fail with any of our callbacks in the Trainer.

Each check runs in a fresh interpreter (the import order is the point; this process imported whatever pytest
collected first). The ``ported_test_*`` functions at the end are Lightning's tests with one of our callbacks
added; pytest does not collect them here (they are not ``test_*``):
:func:`test_lightning_own_tests_of_the_fit_stopped_messages` runs them under pytest in an interpreter that imports
``lightning.pytorch`` before this module imports ours.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest.mock import Mock

import pytest

import lightning_efficient as le

if os.environ.get("CI"):  # CI installs the dev extra, which includes `lightning`: missing there is a failure
    import lightning.pytorch as unified
else:
    unified = pytest.importorskip(
        "lightning.pytorch", reason="the `lightning` package is not installed (pip install -e '.[dev]')"
    )

pytestmark = pytest.mark.slow  # each test starts an interpreter that imports torch and Lightning (~10 s)


def _python(code: str, cwd: Path, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter (in ``cwd``, so that ``lightning_efficient`` is the installed one, as
    for a user); its last line of output, JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------- one package, two names

ALIASED_FIT = """
import importlib, importlib.abc, importlib.util, json, sys

ALIASES = json.loads(sys.argv[1])  # {"pytorch_lightning": "lightning.pytorch", ...}: alias -> the real package


class Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # `import ALIAS` / `import ALIAS.x` give the module of the real package: one package under two names.
    def _real(self, name):
        for alias, real in ALIASES.items():
            if name == alias or name.startswith(alias + "."):
                return real + name[len(alias):]
        return None

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if self._real(name) else None

    def create_module(self, spec):
        return importlib.import_module(self._real(spec.name))

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, Alias())
import lightning.pytorch
import pytorch_lightning

assert pytorch_lightning is lightning.pytorch and pytorch_lightning.Callback is lightning.pytorch.Callback

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_efficient as le
from lightning_efficient.adapter import LIGHTNING_PACKAGES, Callback


class Net(pytorch_lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
        self.layouts = []

    def training_step(self, batch, batch_idx):
        images, targets = batch
        self.layouts.append(images.is_contiguous(memory_format=torch.channels_last))
        return nn.functional.cross_entropy(self.net(images), targets)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.rand(8, 3, 8, 8), torch.randint(0, 2, (8,))), batch_size=4)
model, report, layout = Net(), le.EfficiencyReport(log_every_n_steps=1, skip_first=0, verbose=False), le.ChannelsLast()
trainer = lightning.pytorch.Trainer(
    max_steps=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False, callbacks=[layout, report],
)
trainer.fit(model, data)
print(json.dumps({
    "packages": [p.__name__ for p in LIGHTNING_PACKAGES],
    "bases": [f"{c.__module__}.{c.__qualname__}" for c in Callback.__bases__],
    "is_callback": isinstance(layout, lightning.pytorch.Callback) and layout in trainer.callbacks,
    "steps": report.summary()["steps"],
    "layouts": model.layouts,
}))
"""


@pytest.mark.parametrize(
    ("aliases", "real"),
    [
        ({"pytorch_lightning": "lightning.pytorch", "lightning_fabric": "lightning.fabric"}, "lightning.pytorch"),
        ({"lightning.pytorch": "pytorch_lightning", "lightning.fabric": "lightning_fabric"}, "pytorch_lightning"),
    ],
    ids=["pytorch_lightning-is-lightning.pytorch", "lightning.pytorch-is-pytorch_lightning"],
)
def test_the_package_imports_and_fits_where_both_lightning_names_are_one_module(aliases, real, tmp_path):
    # Before: `import lightning_efficient` raised "TypeError: duplicate base class Callback" (base.py listed the one
    # package twice and subclassed its Callback twice).
    out = _python(ALIASED_FIT, tmp_path, json.dumps(aliases))
    assert out["packages"] == [real]
    assert out["bases"] == [f"{real}.callbacks.callback.Callback"]
    assert out["is_callback"] is True
    assert out["steps"] == 2 and out["layouts"] == [True, True]


# ------------------------------------------------------------------------------------------- Lightning's logging

LOGGING_STATE = """
import importlib, json, logging, sys, warnings

first = sys.argv[1]  # the Lightning package the user imports before ours ("" for none)
if first:
    importlib.import_module(first)
from lightning_utilities.core import rank_zero


def lightning_loggers():  # Lightning's loggers (either package) and their set-up
    return {
        name: [logger.level, [id(h) for h in logger.handlers], logger.propagate, [id(f) for f in logger.filters]]
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.startswith(("lightning", "pytorch_lightning"))
    }


def state():
    category = rank_zero.rank_zero_deprecation_category
    return {
        "log": rank_zero.log.name,
        "deprecation_category": f"{category.__module__}.{category.__qualname__}",
        "rank": getattr(rank_zero.rank_zero_only, "rank", None),
        "lightning_loggers": lightning_loggers(),
        "root": [logging.root.level, [id(h) for h in logging.root.handlers]],
    }


before, filters = state(), list(warnings.filters)
import lightning_efficient

after = state()
new_filters = [repr(f) for f in warnings.filters if f not in filters]
# the loggers that existed before (those of the package imported now are new)
after["lightning_loggers"] = {k: v for k, v in after["lightning_loggers"].items() if k in before["lightning_loggers"]}
print(json.dumps({"before": before, "after": after, "new_filters": new_filters}))
"""


@pytest.mark.parametrize("first", ["lightning.pytorch", "pytorch_lightning"])
def test_importing_the_package_leaves_lightning_logging_as_it_was(first, tmp_path):
    # Before, with `lightning.pytorch` imported first: the shared logger became `pytorch_lightning.utilities.rank_zero`
    # and the deprecation category pytorch_lightning's (lightning_fabric's LightningDeprecationWarning).
    out = _python(LOGGING_STATE, tmp_path, first)
    assert out["before"]["log"] == f"{first}.utilities.rank_zero"
    assert out["after"] == out["before"]
    # What else importing the other package changes globally: it sets up its own loggers (new ones: the loggers
    # that existed are compared above), and adds one warnings filter, for its own LightningDeprecationWarning class,
    # which matches no warning of the package imported first.
    fabric = {"lightning.pytorch": "lightning.fabric", "pytorch_lightning": "lightning_fabric"}[first]
    assert not any(f"'{fabric}." in f for f in out["new_filters"]), out["new_filters"]


def test_a_process_that_imported_no_lightning_gets_pytorch_lightning_logging(tmp_path):
    # Nothing of the user's to keep: the state is that of `import pytorch_lightning`, the package of the README.
    out = _python(LOGGING_STATE, tmp_path, "")
    assert out["before"]["log"] == "lightning_utilities.core.rank_zero"
    assert out["after"]["log"] == "pytorch_lightning.utilities.rank_zero"
    assert out["after"]["deprecation_category"] == "lightning_fabric.utilities.rank_zero.LightningDeprecationWarning"


def test_lightning_own_tests_of_the_fit_stopped_messages(tmp_path):
    # Before: the three `raise_debug_msg=True` cases of test_should_stop_early_stopping_conditions_met and
    # test_fit_loop_done_log_messages failed (Lightning's debug messages went to pytorch_lightning's logger, not to
    # the "lightning.pytorch.utilities.rank_zero" logger their caplog listens to).
    args = ["-q", "-p", "no:cacheprovider", "-o", "python_functions=ported_test_*", __file__]
    code = f"import sys, lightning.pytorch, pytest; sys.exit(pytest.main({args!r}))"
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0 and "7 passed" in proc.stdout, proc.stdout[-6000:] + proc.stderr[-2000:]


# ------------------------------------------------------------------------------------------- Lightning's tests
# Ported from Lightning-AI/pytorch-lightning, tests/tests_pytorch/loops/test_training_loop.py
# (test_fit_loop_done_log_messages, test_should_stop_early_stopping_conditions_met), Apache-2.0, Copyright The
# Lightning AI team. Changed: one of this package's callbacks is in the Trainer. Collected only by
# test_lightning_own_tests_of_the_fit_stopped_messages (pytest's `-o python_functions=ported_test_*`).


def ported_test_fit_loop_done_log_messages(caplog):
    from lightning.pytorch.loops import _FitLoop

    trainer = Mock(spec=unified.Trainer)
    trainer.callbacks = [le.EfficiencyReport(verbose=False)]
    fit_loop = _FitLoop(trainer, max_epochs=1)

    trainer.should_stop = False
    fit_loop.max_batches = 5
    assert not fit_loop.done
    assert not caplog.messages

    fit_loop.max_batches = 0
    assert fit_loop.done
    assert "No training batches" in caplog.text
    caplog.clear()
    fit_loop.max_batches = 5

    epoch_loop = Mock()
    epoch_loop.global_step = 10
    fit_loop.epoch_loop = epoch_loop
    epoch_loop.max_steps = 10
    assert fit_loop.done
    assert "max_steps=10` reached" in caplog.text
    caplog.clear()
    epoch_loop.max_steps = 20

    fit_loop.epoch_progress.current.processed = 3
    fit_loop.max_epochs = 3
    trainer.should_stop = True
    assert fit_loop.done
    assert "max_epochs=3` reached" in caplog.text
    caplog.clear()
    fit_loop.max_epochs = 5

    fit_loop.epoch_loop.min_steps = 0
    with caplog.at_level(level=logging.DEBUG, logger="lightning.pytorch.utilities.rank_zero"):
        assert fit_loop.done
    assert "should_stop` was set" in caplog.text

    fit_loop.epoch_loop.min_steps = 100
    assert not fit_loop.done


@pytest.mark.parametrize(
    ("min_epochs", "min_steps", "current_epoch", "early_stop", "fit_loop_done", "raise_debug_msg"),
    [
        (4, None, 100, True, True, False),
        (4, None, 3, False, False, False),
        (4, 10, 3, False, False, False),
        (None, 10, 4, True, True, True),
        (4, None, 4, True, True, True),
        (4, 10, 4, True, True, True),
    ],
)
def ported_test_should_stop_early_stopping_conditions_met(
    caplog, min_epochs, min_steps, current_epoch, early_stop, fit_loop_done, raise_debug_msg
):
    """Test that checks that debug message is logged when users sets `should_stop` and min conditions are met."""
    trainer = unified.Trainer(
        min_epochs=min_epochs, min_steps=min_steps, limit_val_batches=0, max_epochs=100, callbacks=[le.ChannelsLast()]
    )
    trainer.fit_loop.max_batches = 10
    trainer.should_stop = True
    trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed = (
        current_epoch * trainer.num_training_batches
    )
    trainer.fit_loop.epoch_loop.batch_progress.current.ready = 10
    trainer.fit_loop.epoch_progress.current.processed = current_epoch

    message = "`Trainer.fit` stopped: `trainer.should_stop` was set."
    with caplog.at_level(level=logging.DEBUG, logger="lightning.pytorch.utilities.rank_zero"):
        assert trainer.fit_loop.done is fit_loop_done

    assert (message in caplog.text) is raise_debug_msg
    assert trainer.fit_loop._can_stop_early is early_stop
