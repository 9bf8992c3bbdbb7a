"""Applying a TuneResult: ``prepare_model`` (compile), ``dataloader`` (workers) and ``recipe(tune=...)``. Compiling
uses dynamo's ``eager`` backend (no C++ compiler needed); nothing is timed."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_efficient as le
from lightning_efficient.tuning.records import Candidate
from lightning_efficient.tuning.result import TuneResult, compile_submodules


class _Net(nn.Module):
    """Weights in ``model``; ``loss`` holds none; ``training_step`` calls ``self.model`` as Lightning modules do."""

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 2))
        self.loss = nn.Identity()

    def training_step(self, x: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model(x))


def _result(**chosen) -> TuneResult:
    return TuneResult(current=Candidate(), chosen=Candidate(**chosen), decisions=[])


def _compiled(module: nn.Module) -> bool:
    return getattr(module, "_compiled_call_impl", None) is not None


def test_prepare_model_compiles_the_children_that_hold_weights_only_when_chosen():
    model = _Net()
    keys = list(model.state_dict())
    assert _result().prepare_model(model) is model and not _compiled(model.model)
    assert _result(compile=True).prepare_model(model) is model
    assert _compiled(model.model) and not _compiled(model.loss) and not _compiled(model)
    assert list(model.state_dict()) == keys  # in place: no "_orig_mod." prefix in checkpoints


def test_compile_submodules_goes_through_the_compiled_call_from_training_step():
    import torch._dynamo

    torch._dynamo.reset()
    model = _Net()
    reference = copy.deepcopy(model.model)
    assert compile_submodules(model, backend="eager") == ["model"]
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    x = torch.randn(2, 3, 8, 8)
    assert torch.allclose(model.training_step(x), reference(x))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > before  # dynamo traced the weights' call
    bare = nn.Linear(2, 2)  # no children with weights: the module itself
    assert compile_submodules(bare, backend="eager") == [] and _compiled(bare)


def test_dataloader_is_rebuilt_only_for_another_worker_count():
    loader = DataLoader(TensorDataset(torch.arange(8)), batch_size=2)
    assert _result().dataloader(loader) is loader  # None: the loader's own
    assert _result(num_workers=0).dataloader(loader) is loader
    rebuilt = _result(num_workers=2).dataloader(loader)
    assert rebuilt is not loader and rebuilt.num_workers == 2 and rebuilt.dataset is loader.dataset
    assert rebuilt.batch_sampler is loader.batch_sampler and loader.num_workers == 0  # same batches, same order


def test_recipe_takes_precision_and_channels_last_from_the_result_and_explicit_arguments_win():
    def channels_last(kwargs):
        return any(isinstance(c, le.ChannelsLast) for c in kwargs["callbacks"])

    tuned = le.recipe(tune=_result(precision="bf16-mixed", channels_last=False))
    assert tuned["precision"] == "bf16-mixed" and not channels_last(tuned)
    explicit = le.recipe(
        tune=_result(precision="bf16-mixed", channels_last=False), precision="32-true", channels_last=True
    )
    assert explicit["precision"] == "32-true" and channels_last(explicit)
    report = next(c for c in tuned["callbacks"] if isinstance(c, le.EfficiencyReport))
    assert report.tuned is not None  # the report compares what it sees with what tune() measured


def test_recipe_rejects_what_is_not_a_tune_result():
    with pytest.raises(TypeError, match="expected the TuneResult that tune\\(\\) returns, got dict"):
        le.recipe(tune={"precision": "bf16-mixed"})


def test_only_settings_one_fit_can_switch_between_share_a_fit():
    """Layout and a rebuildable loader's workers switch in one fit; precision, compile and DDP need separate fits."""
    from dataclasses import replace

    from lightning_efficient.tuning.fits import Trials
    from lightning_efficient.tuning.records import Request

    trials = object.__new__(Trials)  # switchable() reads only these two
    trials.world_size, trials.loader = 1, DataLoader(TensorDataset(torch.arange(8)), batch_size=2)
    old = Candidate(num_workers=0)

    def switchable(**new) -> bool:
        return trials.switchable(Request("pair", replace(old, **new), old))

    assert switchable(channels_last=True) and switchable(num_workers=1)
    assert not switchable(precision="bf16-mixed") and not switchable(compile=True)
    trials.loader = DataLoader(_Stream(), batch_size=2)  # an IterableDataset cannot be rebuilt
    assert switchable(channels_last=True) and not switchable(num_workers=1)
    trials.world_size = 2
    assert not switchable(channels_last=True)


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(8))


def test_public_names():
    assert le.TuneResult is TuneResult and callable(le.tune) and {"tune", "TuneResult"} <= set(le.__all__)
