"""recommended_precision, explain_precision and recipe()."""

from __future__ import annotations

import json

import pytest
import pytorch_lightning as pl
import torch

import lightning_efficient as le
from lightning_efficient import precision as prec


def test_cpu_choice_follows_cpu_flags(monkeypatch):
    monkeypatch.setattr(prec, "cpu_bf16_speedup", lambda: 1.6)
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert le.recommended_precision("cpu") == "bf16-mixed"
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"amx_bf16", "amx_tile"}))
    choice = le.explain_precision("cpu")
    assert choice.precision == "bf16-mixed" and "1.60x" in choice.reason
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"avx2"}))
    choice = le.explain_precision("cpu")
    assert choice.precision == "32-true"
    assert "emulated" in choice.reason


@pytest.mark.parametrize(
    "speedup, expected", [(0.6, "32-true"), (0.89, "32-true"), (0.9, "bf16-mixed"), (2.0, "bf16-mixed")]
)
def test_native_bf16_measured_slower_trains_in_fp32(monkeypatch, speedup, expected):
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    monkeypatch.setattr(prec, "cpu_bf16_speedup", lambda: speedup)
    choice = le.explain_precision("cpu")
    assert choice.precision == expected
    assert f"{speedup:.2f}x" in choice.reason
    assert ("fp32 is faster" in choice.reason) == (expected == "32-true")


def test_bf16_probe_is_a_positive_ratio():
    speedup = prec.probe_cpu_bf16(rounds=3, batch=2, size=8, channels=8)
    assert 0 < speedup < float("inf")


def test_bf16_speedup_is_measured_once_per_machine_and_stored(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTNING_EFFICIENT_CACHE", str(tmp_path))
    monkeypatch.setattr(prec, "_SPEEDUPS", {})
    calls = []
    monkeypatch.setattr(prec, "probe_cpu_bf16", lambda: calls.append(1) or 0.75)
    assert prec.cpu_bf16_speedup() == 0.75
    assert prec.cpu_bf16_speedup() == 0.75 and len(calls) == 1  # remembered by the process
    prec._SPEEDUPS.clear()
    assert prec.cpu_bf16_speedup() == 0.75 and len(calls) == 1  # read back from the file
    stored = tmp_path / "bf16-probe.json"
    record = json.loads(stored.read_text())
    assert record["speedup"] == 0.75 and record["machine"]["threads"] == torch.get_num_threads()
    record["machine"]["torch"] = "0.0"  # another torch: measured again
    stored.write_text(json.dumps(record))
    prec._SPEEDUPS.clear()
    assert prec.cpu_bf16_speedup() == 0.75 and len(calls) == 2
    stored.write_text("{not json")  # unreadable: measured again and rewritten
    prec._SPEEDUPS.clear()
    assert prec.cpu_bf16_speedup() == 0.75 and len(calls) == 3
    assert json.loads(stored.read_text())["speedup"] == 0.75


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
    faster = prec.cpu_has_native_bf16() and prec.cpu_bf16_speedup() >= prec.BF16_SLOWER
    expected = "bf16-mixed" if faster else "32-true"
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
