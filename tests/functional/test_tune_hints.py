"""EfficiencyReport points to tune() where a setting's effect depends on the model and hardware, and quotes what
tune() measured where it decided a setting."""

from __future__ import annotations

import math

import pytest

from lightning_efficient import EfficiencyReport, TuneResult, recipe
from lightning_efficient.functional.checklist import checklist
from lightning_efficient.functional.run_facts import RunFacts
from lightning_efficient.functional.tune_advice import tune_hints
from lightning_efficient.tuning.policy import Decision
from lightning_efficient.tuning.records import Candidate

CPU = dict(accelerator="cpu", recommended_precision="32-true")


def _result(*decisions: Decision) -> TuneResult:
    return TuneResult(Candidate(), Candidate(), list(decisions))


#: tune() found no gain in bf16-mixed, channels_last or more workers here.
NO_GAIN = _result(
    Decision("precision", "bf16-mixed", "32-true", "ruled out", (0.9, 0.92, 0.91)),
    Decision("channels_last", True, False, "ruled out", (0.95, 0.96, 0.94)),
    Decision("num_workers", 1, 0, "ruled out", (0.97, 0.98, 0.97)),
)


@pytest.mark.parametrize(
    ("facts", "share", "expect"),
    [
        (RunFacts(precision="bf16-mixed", **CPU), 0.0, "runs slower than '32-true'"),
        (RunFacts(precision="16-mixed", **CPU), 0.0, "runs slower than '32-true'"),
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
        RunFacts(precision="bf16-mixed", model_channels_last=1.0, tuned=NO_GAIN, **CPU),  # tune() measured it
    ],
    ids=["plain", "native-bf16", "on-a-gpu", "tuned"],
)
def test_nothing_in_doubt_gives_no_hint(facts):
    assert tune_hints(facts, 0.1) == []


def test_unknown_data_wait_is_not_called_data_bound():
    assert tune_hints(RunFacts(precision="32-true", num_workers=0, **CPU), math.nan) == []


def test_recipe_gives_its_report_the_tune_result():
    def report(kwargs):
        return next(c for c in kwargs["callbacks"] if isinstance(c, EfficiencyReport))

    assert report(recipe(tune=NO_GAIN)).tuned is NO_GAIN
    assert report(recipe()).tuned is None


def test_settings_tune_found_no_gain_in_are_information_with_the_measured_ratio():
    facts = dict(
        precision="32-true",
        accelerator="cpu",
        recommended_precision="bf16-mixed",
        model_channels_last=0.0,
        inputs_channels_last=False,
    )
    plain = {c.practice: c for c in checklist(RunFacts(**facts), 0.0)}
    tuned = {c.practice: c for c in checklist(RunFacts(**facts, tuned=NO_GAIN), 0.0)}
    for name in ("mixed precision", "model channels_last", "inputs channels_last"):
        assert plain[name].ok is False and "tune()" not in plain[name].detail
        assert (
            tuned[name].ok is None
            and "tune() measured " in tuned[name].detail
            and "x over 3 pairs" in tuned[name].detail
        )
    assert "precision='bf16-mixed' at 0.91x" in tuned["mixed precision"].detail
    # The setting tune() ruled out, used anyway: a failure, with the measured ratio and tune()'s choice.
    against = {c.practice: c for c in checklist(RunFacts(**{**facts, "precision": "bf16-mixed"}, tuned=NO_GAIN), 0.0)}
    assert (
        against["mixed precision"].ok is False
        and against["mixed precision"].advice == "use precision='32-true', as tune() chose"
    )


def test_a_data_bound_run_with_workers_tune_measured_is_not_told_to_raise_them():
    facts = dict(
        precision="32-true",
        accelerator="cpu",
        recommended_precision="32-true",
        num_workers=0,
        cpu_cores=2,
        suggested_workers=1,
    )
    plain = {c.practice: c for c in checklist(RunFacts(**facts), 0.8)}  # 80% of the step waiting for data
    tuned = {c.practice: c for c in checklist(RunFacts(**facts, tuned=NO_GAIN), 0.8)}
    assert plain["DataLoader workers"].ok is False and plain["DataLoader workers"].advice == "DataLoader(num_workers=1)"
    assert "raise num_workers to 1" in plain["input pipeline keeps up"].advice
    assert (
        tuned["DataLoader workers"].ok is None
        and "tune() measured num_workers=1 at 0.97x" in tuned["DataLoader workers"].detail
    )
    assert "raise num_workers" not in tuned["input pipeline keeps up"].advice


@pytest.mark.parametrize(
    ("cores", "share", "ok", "advice"), [(2, 0.8, False, 1), (2, 0.02, True, 0), (1, 0.8, True, 0)]
)
def test_cpu_training_keeps_no_workers_unless_it_waits_for_data(cores, share, ok, advice):
    # suggest_loader_kwargs() gives 0 workers for training on a 2-core CPU; a data-bound run still gets one worker
    # (it overlaps loading with the step) where the process has 2 cores or more
    facts = RunFacts(precision="32-true", num_workers=0, cpu_cores=cores, suggested_workers=0, **CPU)
    check = {c.practice: c for c in checklist(facts, share)}["DataLoader workers"]
    assert check.ok is ok and check.advice == f"DataLoader(num_workers={advice})"
