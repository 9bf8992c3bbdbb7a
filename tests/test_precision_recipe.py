"""recommended_precision, explain_precision and recipe()."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

import lightning_efficient as le
from lightning_efficient import precision as prec


def test_cpu_choice_follows_cpu_flags(monkeypatch):
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert le.recommended_precision("cpu") == "bf16-mixed"
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"amx_bf16", "amx_tile"}))
    assert le.recommended_precision("cpu") == "bf16-mixed"
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"avx2"}))
    choice = le.explain_precision("cpu")
    assert choice.precision == "32-true"
    assert "emulated" in choice.reason


@pytest.mark.parametrize(
    "capability, expected",
    [
        ((9, 0), "bf16-mixed"),
        ((8, 0), "bf16-mixed"),
        ((8, 6), "bf16-mixed"),
        ((7, 5), "16-mixed"),
        ((7, 0), "16-mixed"),
        ((6, 1), "32-true"),
    ],
)
def test_cuda_choice_follows_compute_capability(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    choice = le.explain_precision("auto")
    assert choice.accelerator == "cuda"
    assert choice.precision == expected
    assert f"sm_{capability[0]}{capability[1]}" in str(choice)
    if expected == "bf16-mixed":
        assert any("set_float32_matmul_precision" in a for a in choice.advice)


def test_auto_on_this_machine_matches_its_flags():
    if torch.cuda.is_available():
        pytest.skip("this test describes a CPU-only machine")
    expected = "bf16-mixed" if prec.cpu_has_native_bf16() else "32-true"
    assert le.recommended_precision() == expected


def test_recommended_precision_is_accepted_by_lightning():
    trainer = pl.Trainer(
        precision=le.recommended_precision(),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    assert str(trainer.precision) == le.recommended_precision()


@pytest.mark.parametrize("bad", ["tpu", "CUDAX", 3, None])
def test_bad_accelerator_names_the_choices(bad):
    with pytest.raises(ValueError, match="expected one of"):
        le.recommended_precision(bad)


def test_cuda_requested_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA device"):
        le.recommended_precision("cuda")


def test_recipe_contents_and_order():
    mine = pl.callbacks.LearningRateMonitor()
    kw = le.recipe(max_epochs=3, callbacks=[mine])
    assert kw["precision"] == le.recommended_precision()
    assert kw["max_epochs"] == 3
    types = [type(c) for c in kw["callbacks"]]
    assert types == [pl.callbacks.LearningRateMonitor, le.ChannelsLast, le.StepwiseLR, le.EfficiencyReport]
    assert kw["callbacks"][0] is mine
    assert not any(isinstance(c, le.GPUAugmentation) for c in kw["callbacks"])  # opt-in


def test_recipe_switches():
    kw = le.recipe(
        precision="32-true",
        channels_last=False,
        stepwise_lr=False,
        efficiency_report=False,
        augmentation="trivial_augment",
    )
    assert kw["precision"] == "32-true"
    assert [type(c) for c in kw["callbacks"]] == [le.GPUAugmentation]
    aug = le.GPUAugmentation("trivial_augment")
    assert le.recipe(augmentation=aug)["callbacks"][0] is aug


def test_a_callback_of_ours_given_replaces_the_copy_recipe_would_add():
    mine = le.StepwiseLR(steps_per_epoch=5)
    cbs = le.recipe(callbacks=[mine])["callbacks"]
    assert [type(c) for c in cbs] == [le.StepwiseLR, le.ChannelsLast, le.EfficiencyReport] and cbs[0] is mine
    trainer = pl.Trainer(**le.recipe(accelerator="cpu", logger=False, callbacks=[mine, le.EfficiencyReport()]))
    assert sum(isinstance(c, le.EfficiencyReport) for c in trainer.callbacks) == 1  # Lightning refuses duplicates


def test_callbacks_not_in_a_list_name_the_fix():
    with pytest.raises(TypeError, match=r"expected a list of callbacks, e.g. recipe\(callbacks=\[StepwiseLR"):
        le.recipe(callbacks=le.StepwiseLR())


def test_recipe_rejects_unknown_trainer_arguments():
    with pytest.raises(TypeError, match="did you mean 'max_epochs'"):
        le.recipe(max_epoch=3)
    with pytest.raises(TypeError, match=r"neither recipe\(\) nor Trainer takes argument .*did you mean 'progressive_r"):
        le.recipe(progresive_resize=True)


def test_recipe_builds_a_trainer():
    trainer = pl.Trainer(
        **le.recipe(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    )
    assert str(trainer.precision) == le.recommended_precision("cpu")
    assert any(isinstance(c, le.ChannelsLast) for c in trainer.callbacks)
