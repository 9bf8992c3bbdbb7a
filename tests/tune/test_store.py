"""tune()'s reusable decisions (``store.py``): a hit, a miss for each part of the fingerprint, a corrupt or
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
from lightning_efficient.tuning import store


def _tune(model=None, loader=None, **kw):
    loader = loader if loader is not None else DataLoader(_images(), batch_size=BATCH)
    return le.tune(model or Net(), loader, **{**NONE, **kw})


def _files():
    return sorted(store.cache_dir().glob("*.json"))


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
    monkeypatch.setattr(store, "machine_info", lambda: {**info, "torch": "9.9.9"})
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
    monkeypatch.setenv(store.ENV, str(tmp_path / "elsewhere"))
    _tune()
    assert len(list((tmp_path / "elsewhere" / "tune").glob("*.json"))) == 1
    monkeypatch.delenv(store.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert store.cache_dir() == tmp_path / "xdg" / "lightning_efficient" / "tune"


def test_files_are_written_whole_and_nothing_else_is_left():
    _tune()
    (path,) = list(store.cache_dir().iterdir())
    data = json.loads(path.read_text())
    assert data["format"] == store.FORMAT and store.TuneResult.from_dict(data["result"]).decisions


def test_results_round_trip_through_json():
    result = _tune()
    again = store.TuneResult.from_dict(json.loads(result.to_json()))
    assert again == result or (again.to_dict() == result.to_dict())


# ------------------------------------------------------------------------------ a store that never fails tune()


def _one_store_warning(seen, *words):
    texts = [str(w.message) for w in seen if "decision store" in str(w.message)]
    assert len(texts) == 1, texts
    for word in (*words, store.ENV, "cache=False"):
        assert word in texts[0], texts[0]


def test_a_cache_variable_naming_a_file_is_one_warning_and_the_result_is_returned(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv(store.ENV, str(tmp_path / "a-file"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = _tune()
    assert result.chosen is not None and result.reused_from is None
    _one_store_warning(seen, str(tmp_path / "a-file"))


def test_a_folder_that_cannot_be_written_is_one_warning_and_the_result_is_returned(tmp_path, monkeypatch):
    monkeypatch.delenv(store.ENV)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    mkdir = store.Path.mkdir

    def read_only(self, *args, **kwargs):  # as in a read-only home (the tests may run as root, who may write there)
        if str(self).startswith(str(tmp_path / "home")):
            raise PermissionError(13, "Permission denied", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(store.Path, "mkdir", read_only)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = _tune()
    assert result.decisions is not None and list(tmp_path.rglob("*.json")) == []
    _one_store_warning(seen, str(tmp_path / "home" / ".cache" / "lightning_efficient" / "tune"), "PermissionError")


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


WRONG = {
    "a list": lambda path: path.write_text("[]"),
    "null": lambda path: path.write_text("null"),
    "a text": lambda path: path.write_text('"fast"'),
    "a string where a number belongs": lambda path: _edit(
        path, lambda d: d["result"]["baseline"].update(step_s="fast")
    ),
    "ratios of text": lambda path: _edit(path, lambda d: d["result"]["decisions"][0].update(ratios=["a", "b"])),
    "a result of the wrong shape": lambda path: _edit(path, lambda d: d.update(result=[1, 2])),
    "the right shape, another format": lambda path: _edit(path, lambda d: d.update(format=1)),
    "decisions as text": lambda path: _edit(path, lambda d: d["result"].update(decisions="kept")),
    "a candidate of the wrong kind": lambda path: _edit(path, lambda d: d["result"]["chosen"].update(precision=16)),
}


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_file_that_is_no_decision_of_this_format_is_ignored_measured_again_and_replaced(kind):
    _tune()
    (path,) = _files()
    WRONG[kind](path)
    with pytest.warns(UserWarning, match=r"ignoring the cache file .*measuring again") as seen:
        result = _tune()
    assert result.reused_from is None and len([w for w in seen if "ignoring" in str(w.message)]) == 1
    assert json.loads(path.read_text())["format"] == store.FORMAT  # replaced by the new measurement
    assert _tune().reused_from == str(path)


def test_a_folder_where_the_file_should_be_warns_and_the_result_is_returned():
    _tune()
    (path,) = _files()
    path.unlink()
    path.mkdir()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = _tune()
    assert result.reused_from is None and path.is_dir()
    assert any("ignoring the cache file" in str(w.message) for w in seen)
    _one_store_warning(seen, str(path))


# ------------------------------------------------------------------------------ what a step costs, in the key


class Strided(Net):
    """The same parameters as Net, a stride of 2 in the conv: a quarter of the pixels after it."""

    def __init__(self) -> None:
        super().__init__()
        self.net[0].stride = (2, 2)


class Pooled(Net):
    """The same parameters as Net, a max-pooling after the conv."""

    def __init__(self) -> None:
        super().__init__()
        self.net.insert(1, nn.MaxPool2d(2))


class SameParameters(Net):
    """Another class with Net's parameters."""


class GrowingImages(torch.utils.data.IterableDataset):
    def __init__(self, side: int) -> None:
        self.side = side

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(40):
            yield torch.randn(3, self.side, self.side, generator=g), torch.tensor(1)


def _batch_sampler(size: int) -> DataLoader:
    data = _images()
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(data), size, drop_last=False)
    return DataLoader(data, batch_sampler=sampler)


STEP_COST = {
    "batch size through batch_sampler": (dict(loader=_batch_sampler(4)), dict(loader=_batch_sampler(8))),
    "an IterableDataset's image size": (
        dict(loader=DataLoader(GrowingImages(8), batch_size=BATCH)),
        dict(loader=DataLoader(GrowingImages(16), batch_size=BATCH)),
    ),
    "a stride, the same parameters": (dict(), dict(model=Strided())),
    "a pooling, the same parameters": (dict(), dict(model=Pooled())),
    "another class, the same parameters": (dict(), dict(model=SameParameters())),
    "detect_anomaly": (dict(), dict(detect_anomaly=True)),
}


@pytest.mark.parametrize("part", list(STEP_COST))
def test_what_changes_a_steps_cost_measures_again(part):
    before, after = STEP_COST[part]
    _tune(**before)
    changed = _tune(**after)
    assert changed.reused_from is None and len(_files()) == 2


def test_the_reused_decision_quotes_the_batch_size_it_measured():
    _tune(loader=_batch_sampler(4))
    assert _tune(loader=_batch_sampler(8)).baseline.batch_size == 8


#: A value for every Trainer argument that changes a step's cost, other than its default.
NON_DEFAULT = {
    "accelerator": "cpu",
    "devices": 2,
    "num_nodes": 2,
    "strategy": "ddp",
    "precision": "bf16-mixed",
    "plugins": [pl.plugins.precision.MixedPrecision("bf16-mixed", "cpu")],
    "accumulate_grad_batches": 4,
    "gradient_clip_val": 1.0,
    "gradient_clip_algorithm": "value",
    "detect_anomaly": True,
    "deterministic": True,
    "benchmark": True,
    "sync_batchnorm": True,
}


def test_every_step_cost_argument_is_listed_and_tested():
    assert set(NON_DEFAULT) == set(store.STEP_COST_ARGS)


@pytest.mark.parametrize("name", store.STEP_COST_ARGS)
def test_every_trainer_argument_that_changes_a_steps_cost_is_in_the_fingerprint(name):
    model, loader = Net(), DataLoader(_images(), batch_size=BATCH)
    plain, _ = store.fingerprint(model, loader, [], {}, None)
    changed, _ = store.fingerprint(model, loader, [], {name: NON_DEFAULT[name]}, None)
    assert store.Store(plain).path != store.Store(changed).path


def test_torchs_threads_are_in_the_fingerprint():
    threads = torch.get_num_threads()
    try:
        first, _ = store.fingerprint(Net(), DataLoader(_images(), batch_size=BATCH), [], {}, None)
        torch.set_num_threads(max(1, threads - 1) if threads > 1 else 2)
        second, _ = store.fingerprint(Net(), DataLoader(_images(), batch_size=BATCH), [], {}, None)
    finally:
        torch.set_num_threads(threads)
    assert first["machine"] != second["machine"]


def test_looking_at_the_first_batch_leaves_the_loaders_shuffling_as_it_was():
    loader = DataLoader(_images(), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(3))
    expected = [
        b[1].tolist()
        for b in DataLoader(_images(), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(3))
    ]
    store.fingerprint(Net(), loader, [], {}, None)
    assert [b[1].tolist() for b in loader] == expected


def test_a_part_that_cannot_be_read_measures_and_stores_nothing_and_the_notes_say_which(monkeypatch):
    def broken(loader):
        raise OSError("the share went away")

    monkeypatch.setattr(store, "first_batch", broken)
    first = _tune()
    assert first.reused_from is None and _files() == []
    assert any("the data (its first batch could not be loaded: OSError: the share went away)" in n for n in first.notes)
    assert _tune().reused_from is None
