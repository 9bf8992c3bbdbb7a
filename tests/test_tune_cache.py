"""tune()'s reusable decisions (``tune_result.py``): a hit, a miss for each part of the fingerprint, a corrupt or
foreign file, the cache's place. The cache is a temporary folder per test (conftest); nothing is timed."""

from __future__ import annotations

import json
import warnings

import pytest
import pytorch_lightning as pl
import torch
from test_tuner import BATCH, NONE, Net, _images
from torch import nn
from torch.utils.data import DataLoader

import lightning_efficient as le
from lightning_efficient import tune_result


def _tune(model=None, loader=None, **kw):
    return le.tune(model or Net(), loader or DataLoader(_images(), batch_size=BATCH), **{**NONE, **kw})


def _files():
    return sorted(tune_result.cache_dir().glob("*.json"))


def test_a_second_tune_reuses_the_decision_without_a_fit(monkeypatch, capsys):
    first = _tune()
    assert first.reused_from is None and len(_files()) == 1
    monkeypatch.setattr(pl.Trainer, "fit", lambda *a, **k: pytest.fail("a reused decision needs no fit"))
    again = _tune(verbose=True)
    assert again.reused_from == str(_files()[0]) and again.chosen == first.chosen
    assert again.decisions == first.decisions and again.tuning_s < first.tuning_s
    assert f"reused from {_files()[0]}" in capsys.readouterr().out


class Wider(Net):
    def __init__(self) -> None:
        super().__init__()
        self.net[0] = nn.Conv2d(3, 4, 5, padding=2)


class Renamed(Net):
    def __init__(self) -> None:
        super().__init__()
        self.body = self.net
        del self.net

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.body(batch[0]), batch[1])


CHANGES = {
    "architecture": dict(model=Wider()),
    "parameter names": dict(model=Renamed()),
    "dataset length": dict(loader=DataLoader(_images(n=48), batch_size=BATCH)),
    "sample shape": dict(
        loader=DataLoader(
            torch.utils.data.TensorDataset(torch.randn(32, 3, 9, 9), torch.zeros(32).long()), batch_size=BATCH
        )
    ),
    "batch size": dict(loader=DataLoader(_images(), batch_size=8)),
    "num_workers": dict(loader=DataLoader(_images(), batch_size=BATCH, num_workers=1)),
    "pin_memory": dict(loader=DataLoader(_images(), batch_size=BATCH, pin_memory=True)),
    "callbacks": dict(callbacks=[le.GPUAugmentation("trivial_augment")]),
    "callback settings": dict(callbacks=[le.GPUAugmentation("rand_augment")]),
    "trainer arguments": dict(accumulate_grad_batches=2),
    "precision": dict(precision="bf16-mixed", precisions=["bf16-mixed"]),
    "candidates": dict(channels_last=False),
    "min_gain": dict(min_gain=0.05),
}


@pytest.mark.parametrize("part", list(CHANGES))
def test_a_change_of_any_part_of_the_fingerprint_measures_again(part):
    _tune(callbacks=[le.GPUAugmentation("trivial_augment")] if part == "callback settings" else None)
    changed = _tune(**CHANGES[part])
    assert changed.reused_from is None and len(_files()) == 2


def test_another_machine_or_software_version_measures_again(monkeypatch):
    _tune()
    info = le.doctor.machine_info()
    monkeypatch.setattr(tune_result, "machine_info", lambda: {**info, "torch": "9.9.9"})
    assert _tune().reused_from is None


def test_a_corrupt_or_foreign_file_warns_once_and_measures_again():
    _tune()
    (path,) = _files()
    path.write_text("{not json")
    with pytest.warns(UserWarning, match=r"ignoring the cache file .*JSONDecodeError.*measuring again") as seen:
        result = _tune()
    assert result.reused_from is None and len(seen) == 1
    data = json.loads(path.read_text())  # rewritten by that measurement
    data["fingerprint"]["trainer"]["devices"] = "7"  # another's file under this name
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="written for other settings"):
        assert _tune().reused_from is None


def test_cache_false_neither_reads_nor_writes():
    _tune(cache=False)
    assert _files() == []
    _tune()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _tune(cache=False).reused_from is None


def test_a_longer_plan_measures_what_the_shorter_one_could_not():
    short = _tune(max_epochs=1, max_seconds=60.0)  # a 1-epoch plan affords no pair
    assert "channels_last" in short.by_rule()
    assert _tune(max_epochs=1, max_seconds=60.0).reused_from is not None
    longer = _tune(max_epochs=10_000, max_seconds=60.0)  # a plan whose 5% affords every pair
    assert longer.reused_from is None and "channels_last" in longer.measured()


def test_the_environment_variable_moves_the_cache_and_xdg_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv(tune_result.ENV, str(tmp_path / "elsewhere"))
    _tune()
    assert len(list((tmp_path / "elsewhere" / "tune").glob("*.json"))) == 1
    monkeypatch.delenv(tune_result.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tune_result.cache_dir() == tmp_path / "xdg" / "lightning_efficient" / "tune"


def test_files_are_written_whole_and_nothing_else_is_left():
    _tune()
    (path,) = list(tune_result.cache_dir().iterdir())
    data = json.loads(path.read_text())
    assert data["format"] == tune_result.FORMAT and tune_result.TuneResult.from_dict(data["result"]).decisions


def test_results_round_trip_through_json():
    result = _tune()
    again = tune_result.TuneResult.from_dict(json.loads(result.to_json()))
    assert again == result or (again.to_dict() == result.to_dict())
