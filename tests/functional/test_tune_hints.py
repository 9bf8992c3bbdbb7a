"""EfficiencyReport points to tune() where a setting's effect depends on the model and hardware (issue #13)."""

from __future__ import annotations

import math

import pytest

from lightning_efficient import EfficiencyReport, recipe
from lightning_efficient.functional.efficiency import RunFacts, tune_hints

CPU = dict(accelerator="cpu", recommended_precision="32-true")


@pytest.mark.parametrize(
    ("facts", "share", "expect"),
    [
        (RunFacts(precision="bf16-mixed", **CPU), 0.0, "runs emulated"),
        (RunFacts(precision="16-mixed", **CPU), 0.0, "runs emulated"),
        (RunFacts(precision="32-true", model_channels_last=1.0, **CPU), 0.0, "channels_last on a CPU"),
        (RunFacts(precision="32-true", num_workers=1, **CPU), 0.5, "data-bound with num_workers=1"),
    ],
    ids=["bf16-emulated", "fp16-emulated", "channels-last-cpu", "data-bound"],
)
def test_each_questionable_setting_gets_a_hint_and_the_pointer(facts, share, expect):
    hints = tune_hints(facts, share)
    assert len(hints) == 2 and expect in hints[0]
    assert "lightning_efficient.tune(model, train_loader" in hints[-1] and "lightning-efficient tune" in hints[-1]


@pytest.mark.parametrize(
    "facts",
    [
        RunFacts(precision="32-true", model_channels_last=0.0, num_workers=1, **CPU),  # plain fp32 NCHW, compute-bound
        RunFacts(precision="bf16-mixed", accelerator="cpu", recommended_precision="bf16-mixed"),  # native bf16
        RunFacts(
            precision="bf16-mixed", accelerator="cuda", recommended_precision="bf16-mixed", model_channels_last=1.0
        ),
        RunFacts(precision="bf16-mixed", model_channels_last=1.0, tuned=True, **CPU),  # chosen by tune(): no hint
    ],
    ids=["plain", "native-bf16", "on-a-gpu", "tuned"],
)
def test_nothing_in_doubt_gives_no_hint(facts):
    assert tune_hints(facts, 0.1) == []


def test_unknown_data_wait_is_not_called_data_bound():
    assert tune_hints(RunFacts(precision="32-true", num_workers=0, **CPU), math.nan) == []


def test_recipe_marks_its_report_as_tuned_only_with_a_tune_result():
    class Result:  # the two members recipe() reads
        chosen = None

        @staticmethod
        def recipe_kwargs():
            return {"precision": "32-true", "channels_last": False}

    def report(kwargs):
        return next(c for c in kwargs["callbacks"] if isinstance(c, EfficiencyReport))

    assert report(recipe(tune=Result())).tuned is True
    assert report(recipe()).tuned is False


def test_settings_kept_by_tune_are_information_not_failures():
    from lightning_efficient.functional.efficiency import checklist

    facts = dict(
        precision="32-true",
        accelerator="cpu",
        recommended_precision="bf16-mixed",
        model_channels_last=0.0,
        inputs_channels_last=False,
    )
    plain = {c.practice: c for c in checklist(RunFacts(**facts), 0.0)}
    tuned = {c.practice: c for c in checklist(RunFacts(**facts, tuned=True), 0.0)}
    for name in ("mixed precision", "model channels_last", "inputs channels_last"):
        assert plain[name].ok is False and "tune()" not in plain[name].detail
        assert tuned[name].ok is None and "kept by tune()" in tuned[name].detail


def test_a_data_bound_run_with_tuned_workers_is_not_told_to_raise_them():
    from lightning_efficient.functional.efficiency import checklist

    facts = dict(
        precision="32-true",
        accelerator="cpu",
        recommended_precision="32-true",
        num_workers=0,
        cpu_cores=2,
        suggested_workers=1,
    )
    plain = {c.practice: c for c in checklist(RunFacts(**facts), 0.8)}  # 80% of the step waiting for data
    tuned = {c.practice: c for c in checklist(RunFacts(**facts, tuned=True), 0.8)}
    assert plain["DataLoader workers"].ok is False and plain["DataLoader workers"].advice == "DataLoader(num_workers=1)"
    assert "raise num_workers to 1" in plain["input pipeline keeps up"].advice
    assert (
        tuned["DataLoader workers"].ok is None and "tune() measures num_workers" in tuned["DataLoader workers"].detail
    )
    assert "raise num_workers" not in tuned["input pipeline keeps up"].advice
