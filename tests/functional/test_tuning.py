"""The pure core of ``tune()``: ``lightning_efficient.functional.tuning`` (no Trainer, no clock).

Every measurement here is scripted: a fake ``measure(candidate, stage)`` looks the candidate's images/s up in a
table, so the tests check the decisions (noise rule, greedy search, confirmation, compile amortisation), the cost
of the search and the result's output, never a speed.
"""

from __future__ import annotations

import json
import copy
import math
from dataclasses import replace
from typing import Any, Callable, Optional

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

import lightning_efficient as le
from lightning_efficient.functional.tuning import (
    FACTORS,
    MIN_GAIN,
    Candidate,
    Measurement,
    TuneResult,
    PairedGain,
    beats,
    compile_submodules,
    paired_gain,
    pool_pairs,
    search,
    workers_bound,
)

CURRENT = Candidate()  # 32-true, no channels_last, no compile, the loader's workers


def _m(rates, candidate: Candidate = CURRENT, stage: str = "current", **kw: Any) -> Measurement:
    return Measurement(candidate, stage, window_images_per_s=tuple(rates), **kw)


class Bench:
    """A scripted ``measure``: images/s from ``speed(candidate, stage)``; ``None`` means the fit raised.

    Each measurement has three windows ``rate * (1 - noise), rate, rate * (1 + noise)`` (spread ``2 * noise``).
    Every call is recorded in ``calls``.
    """

    def __init__(
        self,
        speed: Callable[[Candidate, str], Optional[float]],
        noise: float | Callable[[Candidate, str], float] = 0.0,
        compile_s: float = math.nan,
    ) -> None:
        self.speed, self.noise, self.compile_s = speed, noise, compile_s
        self.calls: list[tuple[Candidate, str]] = []

    def __call__(self, candidate: Candidate, stage: str) -> Measurement:
        self.calls.append((candidate, stage))
        rate = self.speed(candidate, stage)
        if rate is None:
            return Measurement(candidate, stage, error="RuntimeError: boom")
        n = self.noise(candidate, stage) if callable(self.noise) else self.noise
        return Measurement(
            candidate,
            stage,
            window_images_per_s=(rate * (1 - n), rate, rate * (1 + n)),
            peak_memory_mb=100.0,
            warmup_s=0.5,
            compile_s=self.compile_s if candidate.compile else math.nan,
        )

    @property
    def stages(self) -> list[str]:
        return [s for _, s in self.calls]


def _separable(multipliers: dict[str, dict[Any, Optional[float]]], base: float = 100.0):
    """Speed = base x the product of one multiplier per factor value (missing values: 1.0; ``None``: fails)."""

    def speed(c: Candidate, stage: str) -> Optional[float]:
        rate = base
        for factor, table in multipliers.items():
            m = table.get(getattr(c, factor), 1.0)
            if m is None:
                return None
            rate *= m
        return rate

    return speed


class PairBench:
    """A scripted ``measure_pair``: ``ratios(stage)`` gives the new/old ratio of each pair of windows (old: 100
    images/s in every window); ``None`` from ``ratios`` means the paired fit raised; ``pairable=False``: returns
    ``None`` (the caller must measure apart). Every call is recorded in ``calls``."""

    def __init__(self, ratios: Callable[[str], Optional[list[float]]], pairable: bool = True) -> None:
        self.ratios, self.pairable = ratios, pairable
        self.calls: list[tuple[Candidate, Candidate, str]] = []

    def __call__(self, new: Candidate, old: Candidate, stage: str):
        self.calls.append((new, old, stage))
        if not self.pairable:
            return None
        ratios = self.ratios(stage)
        if ratios is None:
            return (
                Measurement(new, f"{stage} (paired)", error="NotImplementedError: view on channels_last"),
                Measurement(old, f"{stage} (paired baseline)", skipped="not measured"),
            )
        return (
            _m([100.0 * r for r in ratios], new, f"{stage} (paired)", data_wait=0.0),
            _m([100.0] * len(ratios), old, f"{stage} (paired baseline)", data_wait=0.0),
        )


# ------------------------------------------------------------------------------------------------ paired windows
finite_ratio = st.floats(0.5, 2.0)


@given(st.lists(finite_ratio, min_size=2, max_size=10), st.floats(10.0, 1000.0))
def test_paired_gain_is_the_geometric_mean_of_the_pair_ratios_and_its_bound_lies_below(ratios, level):
    new = _m([level * r for r in ratios], Candidate(channels_last=True), "channels_last (paired)")
    old = _m([level] * len(ratios), CURRENT, "channels_last (paired baseline)")
    g = paired_gain(new, old)
    assert g.ratios == pytest.approx(ratios)
    assert g.gain == pytest.approx(math.exp(sum(math.log(r) for r in ratios) / len(ratios)))
    assert g.lower <= g.gain * (1 + 1e-9) and g.gain <= g.upper * (1 + 1e-9)
    assert not (g.kept and g.undecided)
    # Swapping the sides inverts the gain; a level common to both windows of a pair cancels.
    assert paired_gain(old, new).gain == pytest.approx(1 / g.gain)
    assert paired_gain(old, new).upper == pytest.approx(1 / g.lower)
    drifting = _m([level * r * (1 + i) for i, r in enumerate(ratios)], new.candidate, new.stage)
    drifting_old = _m([level * (1 + i) for i in range(len(ratios))], CURRENT, old.stage)
    assert paired_gain(drifting, drifting_old).gain == pytest.approx(g.gain)
    assert paired_gain(drifting, drifting_old).lower == pytest.approx(g.lower)


@given(st.floats(1.03, 2.0), st.integers(2, 10))
def test_a_steady_gain_above_min_gain_is_kept_and_no_gain_never_is(gain, n):
    new = _m([100.0 * gain] * n, Candidate(channels_last=True), "p")
    old = _m([100.0] * n, CURRENT, "p")
    assert paired_gain(new, old).kept and paired_gain(new, old).lower == pytest.approx(gain)
    assert paired_gain(new, old).upper == pytest.approx(gain)
    assert not paired_gain(old, old).kept and not paired_gain(old, old).undecided


def test_a_gain_that_varies_across_pairs_is_undecided_and_small_gains_do_not_count():
    cl = Candidate(channels_last=True)
    # Pairs of 0.9x to 1.4x: a mean gain above 2% but a lower bound below 1.
    g = paired_gain(_m([140.0, 90.0, 130.0, 92.0], cl, "p"), _m([100.0] * 4, CURRENT, "p"))
    assert g.gain > 1.02 and g.lower < 1.0 and g.undecided and not g.kept
    # 1.5% in every pair: shown beyond the noise, but below the 2% that counts.
    g = paired_gain(_m([101.5] * 4, cl, "p"), _m([100.0] * 4, CURRENT, "p"))
    assert g.lower > 1.0 and not g.kept and not g.undecided
    assert "1.01x in 4 pairs of adjacent windows" in g.describe()


def test_paired_gain_of_unpaired_or_failed_measurements():
    cl = Candidate(channels_last=True)
    with pytest.raises(ValueError, match="3 windows of 32-true, channels_last but 2 of 32-true"):
        paired_gain(_m([1.0, 2.0, 3.0], cl, "p"), _m([1.0, 2.0], CURRENT, "p"))
    failed = paired_gain(Measurement(cl, "p", error="boom"), _m([1.0], CURRENT, "p"))
    assert failed.ratios == () and not failed.kept and not failed.undecided
    assert failed.describe() == "no pair of windows measured"
    one = paired_gain(_m([120.0], cl, "p"), _m([100.0], CURRENT, "p"))
    assert one.gain == pytest.approx(1.2) and math.isnan(one.lower) and one.undecided


def test_pool_pairs_joins_the_windows_of_both_runs_in_order():
    cl = Candidate(channels_last=True)
    first = (_m([110.0, 120.0], cl, "p"), _m([100.0, 100.0], CURRENT, "p"))
    second = (_m([130.0], cl, "p"), _m([100.0], CURRENT, "p"))
    new, old = pool_pairs(first, second)
    assert new.window_images_per_s == (110.0, 120.0, 130.0) and old.window_images_per_s == (100.0,) * 3
    assert pool_pairs(first, (Measurement(cl, "p", error="x"), second[1])) == first


# ------------------------------------------------------------------------------------------------ workers bound
def test_workers_bound_skips_more_workers_only_when_the_data_wait_leaves_nothing_to_gain():
    base = _m([100.0] * 3, Candidate(num_workers=0), data_wait=0.005)
    why = workers_bound(base, 1)
    assert why is not None and "0.5% of the time" in why and "1.005x" in why
    assert workers_bound(base, 0) is None  # not more workers
    assert workers_bound(_m([100.0], Candidate(num_workers=2), data_wait=0.0), 1) is None  # fewer: measured
    assert workers_bound(_m([100.0], Candidate(num_workers=0), data_wait=0.05), 1) is None  # up to 1.05x possible
    assert workers_bound(_m([100.0], Candidate(num_workers=0)), 1) is None  # data wait not measured
    assert workers_bound(_m([100.0], Candidate(num_workers=None), data_wait=0.0), 1) is None


def test_search_does_not_measure_more_workers_when_the_data_wait_bounds_their_gain():
    bench = Bench(lambda c, s: 100.0)
    start = Candidate(num_workers=0)

    def measure(c: Candidate, stage: str) -> Measurement:
        return replace(bench(c, stage), data_wait=0.001)

    chosen, table, reasons = search(start, {"num_workers": [0, 1, 2]}, measure)
    assert chosen == start and bench.stages == ["current"]
    assert [(m.candidate.num_workers, m.skipped is not None) for m in table] == [(0, False), (1, True), (2, True)]
    assert reasons[0].startswith("num_workers=1: not measured, with workers=0 the training step waited for data 0.1%")
    # Worker counts the user listed are measured whatever the data wait (tune() passes bound_workers=False).
    bench.calls.clear()
    search(start, {"num_workers": [0, 1, 2]}, measure, bound_workers=False)
    assert bench.stages == ["current", "num_workers", "num_workers"]


# ------------------------------------------------------------------------------------------------ paired search
CL = Candidate(channels_last=True)


def test_search_keeps_channels_last_on_a_paired_gain_without_measuring_it_apart():
    bench, pairs = Bench(lambda c, s: 100.0, noise=0.2), PairBench(lambda s: [1.12, 1.15, 1.10, 1.14])
    chosen, table, reasons = search(CURRENT, {"channels_last": [False, True]}, bench, measure_pair=pairs)
    assert chosen == CL and bench.stages == ["current"]  # the windows' 20% spread apart does not matter
    assert pairs.calls == [(CL, CURRENT, "channels_last")]
    assert [m.stage for m in table] == ["current", "channels_last (paired)", "channels_last (paired baseline)"]
    assert reasons[0].startswith(
        "channels_last=True: kept, 1.13x in 4 pairs of adjacent windows (pairs 1.10-1.15x; "
        "one-sided 95% bounds: lower 1."
    )
    result = TuneResult(current=CURRENT, chosen=chosen, measurements=table, reasons=reasons)
    assert result.speedup == pytest.approx(paired_gain(table[1], table[2]).gain)


def test_an_undecided_paired_gain_is_measured_in_pairs_again_and_decided_on_all_pairs():
    # First run: 1.30, 0.95, 1.25, 0.97 (undecided); second run: steady 1.15 -> pooled: kept.
    runs = {"channels_last": [1.30, 0.95, 1.25, 0.97], "channels_last, again": [1.15, 1.16, 1.14, 1.15]}
    pairs = PairBench(lambda s: runs[s])
    chosen, table, reasons = search(
        CURRENT, {"channels_last": [False, True]}, Bench(lambda c, s: 100.0), measure_pair=pairs
    )
    assert [s for _, _, s in pairs.calls] == ["channels_last", "channels_last, again"]
    assert chosen == CL and [m.stage for m in table[1:]] == [
        "channels_last (paired)",
        "channels_last (paired baseline)",
        "channels_last, again (paired)",
        "channels_last, again (paired baseline)",
    ]
    assert "against 32-true, undecided, so measured in pairs again: " in reasons[0]
    assert reasons[0].endswith("over both runs.") and "in 8 pairs" in reasons[0]
    result = TuneResult(current=CURRENT, chosen=chosen, measurements=table, reasons=reasons)
    assert str(result).startswith("tune(): chose 32-true, channels_last (1.1")
    assert "the current 32-true, measured in pairs)" in str(result).splitlines()[0]
    # The same without a second run: the simpler settings stay.
    chosen, _, reasons = search(
        CURRENT,
        {"channels_last": [False, True]},
        Bench(lambda c, s: 100.0),
        measure_pair=PairBench(lambda s: runs[s]),
        remeasure=False,
    )
    assert chosen == CURRENT and reasons[0].endswith("a gain not shown beyond the noise.")


def test_no_gain_measured_too_noisily_to_rule_one_out_is_measured_again():
    # 1.00x, but pairs from 0.90x to 1.10x: the upper bound allows a gain that counts -> a second run.
    runs = {"channels_last": [0.90, 1.10, 0.95, 1.05], "channels_last, again": [1.0, 1.01, 0.99, 1.0]}
    pairs = PairBench(lambda s: runs[s])
    chosen, _, reasons = search(
        CURRENT, {"channels_last": [False, True]}, Bench(lambda c, s: 100.0), measure_pair=pairs
    )
    g = paired_gain(_m([100.0 * r for r in runs["channels_last"]], CL, "p"), _m([100.0] * 4, CURRENT, "p"))
    assert g.gain < 1.02 < g.upper and g.undecided
    assert len(pairs.calls) == 2 and chosen == CURRENT and reasons[0].endswith(": no gain above 2%.")


def test_a_paired_fit_without_gain_or_that_fails_keeps_the_current_settings():
    chosen, table, reasons = search(
        CURRENT,
        {"channels_last": [False, True]},
        Bench(lambda c, s: 100.0),
        measure_pair=PairBench(lambda s: [1.0, 0.99, 1.01, 1.0]),
    )
    assert chosen == CURRENT and reasons[0].endswith(": no gain above 2%.")
    chosen, table, reasons = search(
        CURRENT, {"channels_last": [False, True]}, Bench(lambda c, s: 100.0), measure_pair=PairBench(lambda s: None)
    )
    assert chosen == CURRENT and table[1].error and table[2].skipped
    assert reasons[0] == "channels_last=True: not chosen, it failed (NotImplementedError: view on channels_last)."


def test_candidates_that_cannot_be_paired_are_measured_apart():
    bench = Bench(_separable({"channels_last": {True: 1.3}}))
    pairs = PairBench(lambda s: [2.0] * 4, pairable=False)
    chosen, _, _ = search(CURRENT, {"channels_last": [False, True]}, bench, measure_pair=pairs)
    assert chosen == CL and len(pairs.calls) == 1 and bench.stages == ["current", "channels_last"]
    # Compiled candidates are never paired (a layout switch would recompile); nor factors outside `paired`.
    start = Candidate(compile=True)
    bench = Bench(lambda c, s: 100.0)
    pairs = PairBench(lambda s: [2.0] * 4)
    search(start, {"channels_last": [False, True], "num_workers": [None]}, bench, measure_pair=pairs)
    assert pairs.calls == [] and bench.stages == ["current", "channels_last"]
    bench, pairs = Bench(lambda c, s: 100.0), PairBench(lambda s: [2.0] * 4)
    search(CURRENT, {"channels_last": [False, True]}, bench, measure_pair=pairs, paired=())
    assert pairs.calls == [] and bench.stages == ["current", "channels_last"]


W0, W1 = Candidate(num_workers=0), Candidate(num_workers=1)


def test_num_workers_is_measured_in_pairs_and_a_combination_is_confirmed_in_pairs():
    # Current: workers=1. channels_last gains 1.10x, workers=0 1.05x on top: both kept from pairs, then the
    # combination is measured in pairs against the current settings (no separate fit after "current").
    runs = {
        "channels_last": [1.10, 1.11, 1.09, 1.10],
        "num_workers": [1.05, 1.06, 1.04, 1.05],
        "confirm": [1.15, 1.16, 1.14, 1.16],
    }
    pairs = PairBench(lambda s: runs[s])
    bench = Bench(lambda c, s: 100.0, noise=0.2)
    start = W1
    chosen, table, reasons = search(
        start, {"channels_last": [False, True], "num_workers": [0, 1]}, bench, measure_pair=pairs
    )
    both = Candidate(channels_last=True, num_workers=0)
    assert chosen == both and bench.stages == ["current"]
    assert pairs.calls == [
        (replace(W1, channels_last=True), W1, "channels_last"),
        (both, replace(W1, channels_last=True), "num_workers"),
        (both, W1, "confirm"),
    ]
    assert reasons[2].startswith("confirmed: 32-true, channels_last, workers=0 is 1.15x in 4 pairs")
    result = TuneResult(current=start, chosen=chosen, measurements=table, reasons=reasons)
    assert result.speedup == pytest.approx(paired_gain(table[-2], table[-1]).gain)  # the confirming pairs
    assert "measured in pairs" in str(result).splitlines()[0]


def test_a_combination_not_confirmed_in_pairs_keeps_the_current_settings():
    runs = {"channels_last": [1.10] * 4, "num_workers": [1.05] * 4, "confirm": [1.0, 0.99, 1.01, 1.0]}
    pairs = PairBench(lambda s: runs[s])
    chosen, table, reasons = search(
        W1, {"channels_last": [False, True], "num_workers": [0, 1]}, Bench(lambda c, s: 100.0), measure_pair=pairs
    )
    assert chosen == W1 and [s for _, _, s in pairs.calls][-1] == "confirm"
    assert reasons[2].startswith("not confirmed: 32-true, channels_last, workers=0 measured 1.00x in 4 pairs")
    assert reasons[2].endswith("no gain shown beyond the noise; keeping the current settings.")
    # A combination that includes a factor measured apart (precision) is confirmed in separate fits.
    bench = Bench(_separable({"precision": {"bf16-mixed": 1.5}}))
    chosen, _, reasons = search(
        W1,
        {"precision": ["32-true", "bf16-mixed"], "channels_last": [False, True]},
        bench,
        measure_pair=PairBench(lambda s: [1.10] * 4),
    )
    assert chosen == Candidate("bf16-mixed", True, num_workers=1) and bench.stages[-2:] == ["confirm", "confirm"]


# ------------------------------------------------------------------------------------------------ Measurement
def test_measurement_median_spread_and_ok():
    m = _m([90.0, 110.0, 100.0])
    assert m.ok and m.images_per_s == 100.0 and m.spread == pytest.approx(0.2)
    assert _m([80.0, 120.0]).images_per_s == 100.0  # even count: mean of the middle two
    assert _m([42.0]).spread == 0.0
    for bad in (
        _m([]),
        Measurement(CURRENT, "current", error="X: y"),
        Measurement(CURRENT, "precision", skipped="emulated"),
    ):
        assert not bad.ok and math.isnan(bad.images_per_s) and math.isnan(bad.spread)


def test_amortised_charges_compile_seconds_to_the_planned_run():
    m = _m([100.0, 100.0], Candidate(compile=True), "compile", compile_s=10.0)
    # 1000 images at 100 images/s: 10 s of steady state + 10 s of compilation -> half the rate.
    assert m.amortised(1000).window_images_per_s == pytest.approx((50.0, 50.0))
    # 1e6 images: 10 000 s + 10 s.
    assert m.amortised(1e6).images_per_s == pytest.approx(100.0 * 10_000 / 10_010)
    assert m.amortised(1000).compile_s == 10.0 and m.window_images_per_s == (100.0, 100.0)  # not modified
    assert m.amortised(None) is m and m.amortised(0) is m
    assert replace(m, compile_s=math.nan).amortised(1000).window_images_per_s == (100.0, 100.0)
    assert replace(m, compile_s=-3.0).amortised(1000).window_images_per_s == pytest.approx((100.0, 100.0))
    failed = Measurement(Candidate(compile=True), "compile", error="X: y", compile_s=10.0)
    assert failed.amortised(1000) is failed


# ------------------------------------------------------------------------------------------------ beats
WINDOWS = st.lists(st.floats(1.0, 1e5, allow_nan=False), min_size=1, max_size=5)
GAINS = st.floats(0.0, 0.5)


@given(WINDOWS, GAINS)
def test_a_measurement_never_beats_itself(w, min_gain):
    assert not beats(_m(w), _m(w, stage="confirm"), min_gain)


@given(WINDOWS, WINDOWS, GAINS)
def test_beats_is_antisymmetric(a, b, min_gain):
    assert not (beats(_m(a), _m(b), min_gain) and beats(_m(b), _m(a), min_gain))


@given(WINDOWS, WINDOWS, GAINS, st.floats(1e-3, 3.0))
def test_scaling_new_beyond_the_noise_beats(old_w, new_w, min_gain, margin):
    old = _m(old_w)
    shape = _m(new_w)  # the spread of `new` is that of these windows whatever the scale
    gain = max(min_gain, old.spread, shape.spread)
    factor = old.images_per_s / shape.images_per_s * (1 + gain) * (1 + margin)
    new = _m([x * factor for x in new_w], Candidate(channels_last=True), "channels_last")
    assert beats(new, old, min_gain)


@given(WINDOWS, GAINS, st.floats(0.0, 0.99))
def test_a_gain_within_the_noise_does_not_beat(w, min_gain, fraction):
    old = _m(w)
    gain = max(min_gain, old.spread)
    new = _m([x * (1 + fraction * gain) for x in w], Candidate(channels_last=True), "channels_last")
    assert not beats(new, old, min_gain)


@given(WINDOWS, st.sampled_from(["error", "skipped", "empty"]), GAINS)
def test_failed_or_skipped_never_beat_nor_are_beaten(w, kind, min_gain):
    bad = {
        "error": Measurement(CURRENT, "precision", error="RuntimeError: boom"),
        "skipped": Measurement(CURRENT, "precision", skipped="emulated"),
        "empty": Measurement(CURRENT, "precision"),
    }[kind]
    for ok in (_m(w), _m([x * 1000 for x in w]), _m([x / 1000 for x in w])):
        assert not beats(bad, ok, min_gain) and not beats(ok, bad, min_gain)
    # ... even when the failed measurement carries windows.
    loud = replace(_m([x * 1000 for x in w]), error="RuntimeError: boom")
    assert not beats(loud, _m(w), min_gain) and not beats(_m(w), loud, min_gain)


def test_beats_uses_the_larger_of_min_gain_and_both_spreads():
    old = _m([100.0, 100.0])
    assert beats(_m([103.0, 103.0]), old) and not beats(_m([101.5, 101.5]), old)  # MIN_GAIN = 2%
    assert MIN_GAIN == 0.02
    assert not beats(_m([103.0, 103.0]), old, min_gain=0.05)
    noisy_new = _m([100.0, 112.0, 125.0])  # 1.12x, spread 22%
    assert not beats(noisy_new, old)
    noisy_old = _m([90.0, 100.0, 110.0])  # spread 20%
    assert not beats(_m([115.0] * 3), noisy_old) and beats(_m([125.0] * 3), noisy_old)


# ------------------------------------------------------------------------------------------------ search
def test_search_picks_the_fastest_value_of_each_factor_and_confirms_the_combination():
    speed = _separable(
        {
            "precision": {"bf16-mixed": 1.5, "16-mixed": 1.2},
            "channels_last": {True: 1.3},
            "num_workers": {0: 1.0, 1: 1.2, 2: 1.6, 3: 1.1},
        }
    )
    bench = Bench(speed, noise=0.01)
    options = {
        "precision": ["32-true", "bf16-mixed", "16-mixed"],
        "channels_last": [False, True],
        "num_workers": [0, 1, 2, 3],
        "compile": [False, True],
    }
    current = Candidate(num_workers=0)
    chosen, table, reasons = search(current, options, bench)
    assert chosen == Candidate("bf16-mixed", True, False, 2)
    assert bench.stages == [
        "current",
        "precision",
        "precision",
        "channels_last",
        "num_workers",
        "num_workers",
        "num_workers",
        "compile",
        "confirm",
        "confirm",
    ]
    assert [m.candidate for m in table[-2:]] == [current, chosen]  # the confirmation: current, then the choice
    assert [(c, s) for c, s in bench.calls] == [(m.candidate, m.stage) for m in table]
    assert any(r.startswith("confirmed:") for r in reasons)
    assert reasons[-1].startswith("chosen: bf16-mixed, channels_last, workers=2")
    # Every later factor was measured with the best settings so far.
    assert (Candidate("bf16-mixed", True, False, 1), "num_workers") in bench.calls


def test_search_keeps_the_current_settings_when_gains_are_within_noise():
    # 1.5% faster with no noise: below MIN_GAIN.
    bench = Bench(_separable({"channels_last": {True: 1.015}, "precision": {"bf16-mixed": 1.01}}))
    chosen, table, reasons = search(
        CURRENT, {"precision": ["32-true", "bf16-mixed"], "channels_last": [False, True]}, bench
    )
    assert chosen == CURRENT and "confirm" not in bench.stages
    assert reasons[-1] == "chosen: the current settings (32-true)."
    assert sum("a gain within the noise (2%)" in r for r in reasons) == 2
    # 10% faster, but the windows spread by 20%: not told apart from noise in one round.
    noisy = Bench(_separable({"channels_last": {True: 1.10}}), noise=0.1)
    assert search(CURRENT, {"channels_last": [False, True]}, noisy, remeasure=False)[0] == CURRENT
    # The same 10% with quiet windows is kept.
    quiet = Bench(_separable({"channels_last": {True: 1.10}}), noise=0.01)
    assert search(CURRENT, {"channels_last": [False, True]}, quiet)[0] == Candidate(channels_last=True)


def test_an_undecided_gain_is_measured_again_in_reverse_order_and_kept_only_if_it_holds():
    options = {"channels_last": [False, True]}
    # 10% faster in both rounds, windows spread by 20%: the second round confirms it.
    steady = Bench(_separable({"channels_last": {True: 1.10}}), noise=0.1)
    chosen, table, reasons = search(CURRENT, options, steady)
    assert chosen == Candidate(channels_last=True)
    assert steady.calls == [
        (CURRENT, "current"),
        (Candidate(channels_last=True), "channels_last"),
        (Candidate(channels_last=True), "channels_last, again"),
        (CURRENT, "channels_last, again (baseline)"),
    ]
    assert [(m.candidate, m.stage) for m in table] == steady.calls
    assert "1.10x then 1.10x" in reasons[0] and "the second round showed a gain" in reasons[0]
    # A gain that the second round does not show (the first was the machine's noise) is not kept.
    fluke = Bench(lambda c, stage: 110.0 if c.channels_last and stage == "channels_last" else 100.0, noise=0.1)
    chosen, table, reasons = search(CURRENT, options, fluke)
    assert chosen == CURRENT and len(table) == 4
    assert "then 1.00x when measured again" in reasons[0] and "no gain shown" in reasons[0]
    # A second round that fails keeps the current settings.
    broken = Bench(
        lambda c, stage: None if stage.endswith("again") and c.channels_last else (110.0 if c.channels_last else 100.0),
        noise=0.1,
    )
    chosen, _, reasons = search(CURRENT, options, broken)
    assert chosen == CURRENT and "the second round failed (RuntimeError: boom)" in reasons[0]
    # Gains within MIN_GAIN, slower values, and gains beyond the noise are never measured again.
    for mult in (1.015, 0.8, 1.5):
        bench = Bench(_separable({"channels_last": {True: mult}}), noise=0.01)
        search(CURRENT, options, bench)
        assert len(bench.calls) == 2


def test_a_measurement_too_noisy_to_decide_on_is_measured_again():
    options = {"channels_last": [False, True]}

    # Round 1: no gain, but windows spread by 40% (> NOISY_SPREAD); round 2, quieter (spread 10%): 1.10x. Kept
    # (pooled 1.07x: the median of 80, 100, 120, 104.5, 110, 115.5 over that of 80, 100, 120, 95, 100, 105).
    def speed(c: Candidate, stage: str) -> float:
        return 110.0 if c.channels_last and stage.endswith("again") else 100.0

    def calming(c: Candidate, stage: str) -> float:
        return 0.05 if "again" in stage else 0.2

    bench = Bench(speed, noise=calming)
    chosen, table, reasons = search(CURRENT, options, bench)
    assert chosen == Candidate(channels_last=True) and len(table) == 4
    assert "1.00x then 1.10x" in reasons[0] and "(1.07x pooled)" in reasons[0]
    # The same gain in a second round as noisy as the first (spread 40%) says nothing either: not kept.
    still_noisy = Bench(speed, noise=0.2)
    chosen, table, reasons = search(CURRENT, options, still_noisy)
    assert chosen == CURRENT and len(table) == 4
    assert "1.10x when measured again (1.05x pooled), with windows spread by 40%, too noisy to decide on" in reasons[0]
    # The same noise with no gain in either round: measured again, not kept.
    flat = Bench(lambda c, stage: 100.0, noise=0.2)
    assert search(CURRENT, options, flat)[0] == CURRENT and len(flat.calls) == 4
    # Slower beyond even that noise: decided, not measured again.
    slow = Bench(lambda c, stage: 50.0 if c.channels_last else 100.0, noise=0.2)
    assert search(CURRENT, options, slow)[0] == CURRENT and len(slow.calls) == 2
    # Spread at most noisy_spread: a ratio of 1.00 is decided at once.
    assert len(search(CURRENT, options, Bench(lambda c, s: 100.0, noise=0.1))[1]) == 2


def test_later_factors_are_compared_with_the_fresher_measurement_after_a_second_round():
    # channels_last: undecided (1.10x), then not confirmed; the machine is 10% slower from the second round on.
    # The workers round must compare with the fresh baseline (90 images/s), not the first one (100).
    def speed(c: Candidate, stage: str) -> float:
        machine = 1.0 if stage in ("current", "channels_last") else 0.9
        if c.channels_last:
            return machine * (110.0 if stage == "channels_last" else 100.0)
        return machine * 100.0 * (1.06 if c.num_workers == 1 else 1.0)

    bench = Bench(speed, noise=0.1)
    chosen, _, reasons = search(
        Candidate(num_workers=0), {"channels_last": [False, True], "num_workers": [0, 1]}, bench
    )
    assert "not kept" in reasons[0]
    # Against the fresh baseline workers=1 is 1.06x within 20% noise, then again 1.06x: kept (against the stale
    # one it would have looked 0.95x).
    assert chosen == Candidate(num_workers=1)
    assert "1.06x then 1.06x" in reasons[1]


def test_search_never_picks_a_failing_candidate():
    bench = Bench(_separable({"precision": {"bf16-mixed": None, "16-mixed": 1.2}, "channels_last": {True: None}}))
    chosen, table, reasons = search(
        CURRENT, {"precision": ["32-true", "bf16-mixed", "16-mixed"], "channels_last": [False, True]}, bench
    )
    assert chosen == Candidate(precision="16-mixed")
    failed = [m for m in table if m.error]
    assert [m.candidate for m in failed] == [Candidate("bf16-mixed"), Candidate("16-mixed", True)]
    assert sum("failed (RuntimeError: boom)" in r for r in reasons) == 2


def test_search_records_skipped_candidates_first_and_never_measures_or_chooses_them():
    skipped = Measurement(Candidate("bf16-mixed"), "precision", skipped="bf16 is emulated on this CPU")
    bench = Bench(_separable({"channels_last": {True: 1.5}}))
    chosen, table, _ = search(CURRENT, {"channels_last": [False, True]}, bench, skipped=[skipped])
    assert table[0] is skipped and len(table) == 3 and chosen == Candidate(channels_last=True)
    assert Candidate("bf16-mixed") not in [c for c, _ in bench.calls]


def _two_gains(c: Candidate) -> float:
    """1.3x for bf16-mixed and 1.3x for channels_last, separately (1.69x together)."""
    return 100.0 * (1.3 if c.channels_last else 1.0) * (1.3 if c.precision == "bf16-mixed" else 1.0)


TWO_FACTORS = {"precision": ["32-true", "bf16-mixed"], "channels_last": [False, True]}
COMBINATION = Candidate("bf16-mixed", True)


def test_search_falls_back_to_the_current_settings_when_the_confirmation_fails():
    # Measured back to back with the current settings, the combination is no faster, in both rounds.
    bench = Bench(lambda c, stage: 100.0 if stage.startswith("confirm") else _two_gains(c))
    chosen, table, reasons = search(CURRENT, TWO_FACTORS, bench)
    assert chosen == CURRENT
    # No gain but not slower beyond the noise contradicts the rounds before: measured again, the combination first.
    assert bench.calls[-4:] == [
        (CURRENT, "confirm"),
        (COMBINATION, "confirm"),
        (COMBINATION, "confirm, again"),
        (CURRENT, "confirm, again (baseline)"),
    ]
    assert [(m.candidate, m.stage) for m in table] == bench.calls
    not_confirmed = [r for r in reasons if r.startswith("not confirmed:")]
    assert len(not_confirmed) == 1 and "1.00x" in not_confirmed[0]
    assert "then 1.00x when measured again (1.00x pooled)" in not_confirmed[0]
    assert reasons[-1] == "chosen: the current settings (32-true)."
    # remeasure=False decides on the first confirmation.
    once = Bench(lambda c, stage: 100.0 if stage.startswith("confirm") else _two_gains(c))
    assert search(CURRENT, TWO_FACTORS, once, remeasure=False)[0] == CURRENT
    assert once.stages[-2:] == ["confirm", "confirm"]


def test_a_confirmation_slower_beyond_the_noise_is_not_measured_again():
    bench = Bench(
        lambda c, stage: (80.0 if c == COMBINATION else 100.0) if stage == "confirm" else _two_gains(c), noise=0.05
    )
    chosen, _, reasons = search(CURRENT, TWO_FACTORS, bench)
    assert chosen == CURRENT and bench.stages[-2:] == ["confirm", "confirm"]
    assert "again" not in " ".join(bench.stages)
    assert any(r.startswith("not confirmed: measured again, bf16-mixed, channels_last was 0.80x") for r in reasons)


def test_a_confirmation_within_the_noise_that_the_second_round_contradicts_keeps_the_combination():
    # The machine is slow for the first confirmation only (the combination 0.99x, windows spread by 20%); in the
    # reverse order the combination is 1.69x again: both rounds pooled show the gain, so it is kept.
    def speed(c: Candidate, stage: str) -> float:
        if stage == "confirm":
            return 99.0 if c == COMBINATION else 100.0
        return _two_gains(c)

    bench = Bench(speed, noise=0.1)
    chosen, table, reasons = search(CURRENT, TWO_FACTORS, bench)
    assert chosen == COMBINATION
    assert bench.stages[-4:] == ["confirm", "confirm", "confirm, again", "confirm, again (baseline)"]
    confirmed = [r for r in reasons if r.startswith("confirmed:")]
    assert len(confirmed) == 1 and "0.99x" in confirmed[0] and "then 1.69x in the reverse order" in confirmed[0]
    result = TuneResult(CURRENT, chosen, table, reasons)
    # The speedup pools both rounds' windows: the median of (89.1, 99, 108.9) + (152.1, 169, 185.9) over 100.
    assert result.speedup == pytest.approx((108.9 + 152.1) / 2 / 100.0)
    # A second round that fails keeps the current settings.
    broken = Bench(lambda c, stage: None if stage == "confirm, again" else speed(c, stage), noise=0.1)
    chosen, _, reasons = search(CURRENT, TWO_FACTORS, broken)
    assert chosen == CURRENT
    assert any("the second round failed (RuntimeError: boom)" in r for r in reasons if r.startswith("not confirmed"))


def test_search_falls_back_when_the_confirmation_of_the_combination_raises():
    def speed(c: Candidate, stage: str) -> Optional[float]:
        if stage == "confirm" and c != CURRENT:
            return None
        return 100.0 * (1.3 if c.channels_last else 1.0) * (1.3 if c.precision == "bf16-mixed" else 1.0)

    chosen, table, _ = search(
        CURRENT, {"precision": ["32-true", "bf16-mixed"], "channels_last": [False, True]}, Bench(speed)
    )
    assert chosen == CURRENT and table[-1].error


def test_no_confirmation_when_only_one_factor_changed():
    bench = Bench(_separable({"channels_last": {True: 1.5}, "precision": {"bf16-mixed": 0.5}}))
    chosen, _, reasons = search(
        CURRENT, {"precision": ["32-true", "bf16-mixed"], "channels_last": [False, True]}, bench
    )
    assert chosen == Candidate(channels_last=True) and "confirm" not in bench.stages
    assert reasons[-1] == "chosen: 32-true, channels_last (changed: channels_last)."


def test_search_raises_when_the_current_settings_fail():
    bench = Bench(lambda c, s: None)
    with pytest.raises(RuntimeError, match=r"current settings \(32-true\) fail to train: RuntimeError: boom"):
        search(CURRENT, {"channels_last": [False, True]}, bench)
    assert bench.stages == ["current"]


def test_search_rejects_unknown_factors():
    with pytest.raises(ValueError, match="batch_size"):
        search(CURRENT, {"batch_size": [8, 16]}, Bench(lambda c, s: 1.0))


def test_compile_is_chosen_only_when_its_compile_time_pays_off_over_the_planned_run():
    options = {"compile": [False, True]}
    bench = Bench(_separable({"compile": {True: 2.0}}), compile_s=30.0)  # 2x per step, 30 s to compile
    few, table, reasons = search(CURRENT, options, bench, planned_images=1000)  # 5 s of steady state
    assert few == CURRENT and "not kept" in reasons[0]
    assert table[-1].images_per_s == 200.0  # the table keeps the measured (not amortised) rate
    assert search(CURRENT, options, bench, planned_images=1e6)[0] == Candidate(compile=True)
    assert search(CURRENT, options, bench, planned_images=None)[0] == Candidate(compile=True)


def test_compile_amortisation_applies_to_the_confirmation_too():
    def speed(c: Candidate, stage: str) -> float:
        if stage.startswith("confirm"):  # measured again, the combination is only 1.1x the current settings
            return 110.0 if c.compile else 100.0
        return 100.0 * (1.5 if c.channels_last else 1.0) * (2.0 if c.compile else 1.0)

    bench = Bench(speed, compile_s=30.0)
    options = {"channels_last": [False, True], "compile": [False, True]}
    # Not amortised: 110 beats 100 by more than 2%, the combination is confirmed.
    assert search(CURRENT, options, bench)[0] == Candidate(channels_last=True, compile=True)
    # 3e4 images: the compile stage, 300 images/s for 100 s + 30 s of compilation (231 vs 150), is kept; the
    # confirmation, 110 images/s for 273 s + 30 s (99 vs 100), is not.
    chosen, _, reasons = search(CURRENT, options, bench, planned_images=3e4)
    assert chosen == CURRENT and any(r.startswith("not confirmed:") for r in reasons)
    assert any(r.startswith("compile=True: kept") for r in reasons)
    # 2e3 images: the compile stage itself is charged 30 s against 6.7 s of steady state: not kept.
    assert search(CURRENT, options, bench, planned_images=2e3)[0] == Candidate(channels_last=True)


@st.composite
def _search_case(draw):
    """Options of several sizes (the current value among them, anywhere), distinct clear multipliers per value,
    some values failing; the current values never fail."""
    pools = {
        "precision": ["32-true", "bf16-mixed", "16-mixed", "64-true"],
        "channels_last": [False, True],
        "num_workers": [0, 1, 2, 3, 4, 5],
        "compile": [False, True],
    }
    current = Candidate(
        precision=draw(st.sampled_from(pools["precision"])),
        channels_last=draw(st.booleans()),
        compile=draw(st.booleans()),
        num_workers=draw(st.sampled_from(pools["num_workers"])),
    )
    options, multipliers = {}, {}
    for factor in FACTORS:
        now = getattr(current, factor)
        others = draw(st.lists(st.sampled_from([v for v in pools[factor] if v != now]), unique=True))
        values = draw(st.permutations([now] + others))
        if draw(st.booleans()) or others:
            options[factor] = values
        gains = draw(st.permutations([1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0][: len(values)]))
        table: dict[Any, Optional[float]] = dict(zip(values, gains))
        for v in others:
            if draw(st.integers(0, 3)) == 0:
                table[v] = None  # fails
        multipliers[factor] = table
    return current, options, multipliers


@settings(max_examples=200, deadline=None)
@given(_search_case())
def test_search_cost_is_linear_and_it_finds_the_best_value_of_each_factor(case):
    current, options, multipliers = case
    bench = Bench(_separable(multipliers))
    chosen, table, reasons = search(current, options, bench)
    # One measurement of the current settings, one per other value of each factor, two to confirm (no noise: no
    # value is undecided, so none is measured again).
    confirm = bench.stages.count("confirm")
    assert len(bench.calls) == 1 + sum(len(v) - 1 for v in options.values()) + confirm
    assert confirm == (2 if len(chosen.differences(current)) >= 2 else 0)
    assert len(table) == len(bench.calls)
    # Separable speeds with clear gaps: greedy finds the fastest working value of every factor varied.
    for factor, values in options.items():
        working = [v for v in values if multipliers[factor][v] is not None]
        assert getattr(chosen, factor) == max(working, key=lambda v: multipliers[factor][v])
    for factor in set(FACTORS) - set(options):
        assert getattr(chosen, factor) == getattr(current, factor)
    assert all(m.ok for m in table if m.candidate == chosen)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.booleans())
def test_search_cost_with_noise_only_gains(n_precisions, n_workers, cl):
    """Whatever is kept or not, each other value is measured once (current first in the options here)."""
    precisions = ["32-true", "bf16-mixed", "16-mixed", "64-true", "transformer-engine"][:n_precisions]
    options = {
        "precision": precisions,
        "num_workers": list(range(n_workers)),
        "channels_last": [False, True] if cl else [False],
    }
    bench = Bench(lambda c, s: 100.0 + (c.num_workers or 0) * 0.1)  # all within MIN_GAIN
    chosen, _, _ = search(Candidate(num_workers=0), options, bench)
    assert chosen == Candidate(num_workers=0)
    assert len(bench.calls) == 1 + (n_precisions - 1) + (n_workers - 1) + int(cl)


def test_a_factor_round_does_not_measure_its_starting_value_again():
    # workers 1 beats 0 (the current value, listed second): 0 is not measured again with the same settings.
    bench = Bench(_separable({"num_workers": {0: 1.0, 1: 1.5, 2: 1.2}}))
    chosen, table, _ = search(Candidate(num_workers=0), {"num_workers": [1, 0, 2, 2]}, bench)
    assert chosen == Candidate(num_workers=1)
    assert [c.num_workers for c, _ in bench.calls] == [0, 1, 2]


# ------------------------------------------------------------------------------------------------ TuneResult
def _result(**kw: Any) -> TuneResult:
    """bf16 skipped, channels_last kept (1.5x), workers=1 fails, workers=2 kept (1.2x), then confirmed."""
    speed = _separable({"channels_last": {True: 1.5}, "num_workers": {1: None, 2: 1.2}})
    skipped = [Measurement(Candidate("bf16-mixed"), "precision", skipped="bf16 is emulated on this CPU")]
    current = Candidate(num_workers=0)
    options = {"channels_last": [False, True], "num_workers": [0, 1, 2]}
    chosen, table, reasons = search(current, options, Bench(speed, noise=0.01), skipped=skipped)
    context = dict(planned_steps=100, batch_size=8, tuning_s=3.0, machine="cpu: test", notes=["a note"])
    return TuneResult(current=current, chosen=chosen, measurements=table, reasons=reasons, **{**context, **kw})


def test_result_rows_mark_the_last_measurement_of_the_choice_and_the_failures():
    r = _result()
    assert r.chosen == Candidate(channels_last=True, num_workers=2)
    rows = r.rows()
    assert [row["stage"] for row in rows] == [
        "precision",
        "current",
        "channels_last",
        "num_workers",
        "num_workers",
        "confirm",
        "confirm",
    ]
    assert [row["status"] for row in rows] == [
        "skipped: bf16 is emulated on this CPU",
        "ok",
        "ok",
        "failed: RuntimeError: boom",
        "ok",
        "ok",
        "chosen",
    ]
    assert rows[-1]["settings"] == "32-true, channels_last, workers=2"
    assert rows[1]["ratio"] == 1.0 and rows[2]["ratio"] == pytest.approx(1.5)
    assert rows[4]["ratio"] == pytest.approx(1.8)
    assert math.isnan(rows[0]["images_per_s"]) and math.isnan(rows[3]["ratio"])
    assert rows[1]["spread"] == pytest.approx(0.02) and rows[1]["peak_memory_mb"] == 100.0
    assert math.isnan(rows[1]["compile_s"])


def test_result_table_and_text():
    r = _result()
    lines = r.table().splitlines()
    assert lines[0].startswith("| settings | stage | images/s |") and len(lines) == 2 + len(r.measurements)
    assert lines[2].startswith("| bf16-mixed | precision | - | - | - |") and "skipped: bf16 is emulated" in lines[2]
    assert lines[3] == "| 32-true, workers=0 | current | 100.0 | 1.00x | 2% | 100 | - | ok |"
    assert "| failed: RuntimeError: boom |" in lines[5]
    assert lines[-1].endswith("| chosen |")
    text = str(r)
    assert text.startswith(
        "tune(): chose 32-true, channels_last, workers=2 (1.80x the images/s of the current "
        "32-true, workers=0); tuning took 3 s"
    )
    assert r.table() in text and "- a note" in text and all(f"- {x}" in text for x in r.reasons)


def test_result_to_json_has_no_nan_and_round_trips():
    r = _result()

    def no_constants(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(r.to_json(), parse_constant=no_constants)
    assert data["chosen"] == {"precision": "32-true", "channels_last": True, "compile": False, "num_workers": 2}
    assert data["current"]["num_workers"] == 0
    assert data["recipe_kwargs"] == {"precision": "32-true", "channels_last": True}
    assert data["speedup"] == pytest.approx(1.8)
    assert [row["status"] for row in data["rows"]] == [row["status"] for row in r.rows()]
    assert data["rows"][0]["images_per_s"] is None and data["rows"][1]["compile_s"] is None
    assert data["measurements"][3]["error"] == "RuntimeError: boom"
    assert data["measurements"][1]["window_images_per_s"] == pytest.approx([99.0, 100.0, 101.0])
    assert data["measurements"][0]["warmup_s"] is None
    assert (data["planned_steps"], data["batch_size"], data["tuning_s"], data["machine"], data["notes"]) == (
        100,
        8,
        3.0,
        "cpu: test",
        ["a note"],
    )
    assert data["reasons"] == r.reasons
    assert json.loads(r.to_json(indent=None)) == data and "\n" not in r.to_json(indent=None)
    nan_time = _result(tuning_s=math.nan)
    assert json.loads(nan_time.to_json(), parse_constant=no_constants)["tuning_s"] is None


def test_result_settings_recipe_kwargs_and_measured():
    r = _result()
    assert (r.precision, r.channels_last, r.compile, r.num_workers) == ("32-true", True, False, 2)
    assert r.recipe_kwargs() == {"precision": "32-true", "channels_last": True}
    assert r.measured(r.chosen) is r.measurements[-1]  # the last successful one (the confirmation)
    assert r.measured(Candidate(num_workers=1)) is None  # failed
    assert r.measured(Candidate("bf16-mixed")) is None  # skipped


def test_speedup():
    r = _result()
    assert r.speedup == pytest.approx(1.8)  # from the confirmation: 180 / 100
    kept = TuneResult(current=CURRENT, chosen=CURRENT, measurements=[_m([100.0])], reasons=[])
    assert kept.speedup == 1.0
    # Without a confirmation: the last measurement of each.
    one = TuneResult(
        current=CURRENT,
        chosen=Candidate(channels_last=True),
        reasons=[],
        measurements=[_m([100.0]), _m([130.0], Candidate(channels_last=True), "channels_last")],
    )
    assert one.speedup == pytest.approx(1.3)
    unknown = TuneResult(current=CURRENT, chosen=Candidate(channels_last=True), measurements=[_m([100.0])], reasons=[])
    assert math.isnan(unknown.speedup)


class _Net(torch.nn.Module):
    """A LightningModule-like container: the weights in ``self.model``, a parameter-free child, a training step
    that calls ``self.model(x)`` directly (Lightning calls training_step, never the container's ``__call__``)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        self.loss = torch.nn.CrossEntropyLoss()  # no parameters: not compiled

    def training_step(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def _compiled(module: torch.nn.Module) -> bool:
    return getattr(module, "_compiled_call_impl", None) is not None


def test_prepare_model_compiles_the_children_that_hold_weights_only_when_chosen():
    model = _Net()
    assert _result().prepare_model(model) is model and not _compiled(model.model)
    chosen = TuneResult(current=CURRENT, chosen=Candidate(compile=True), measurements=[], reasons=[])
    keys = list(model.state_dict())
    assert chosen.prepare_model(model) is model
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
    bare = torch.nn.Linear(2, 2)  # no children with weights: the module itself
    assert compile_submodules(bare, backend="eager") == [] and _compiled(bare)


def test_dataloader_is_rebuilt_only_for_another_worker_count():
    loader = DataLoader(TensorDataset(torch.arange(8)), batch_size=2)
    r = _result()  # workers=2 chosen
    rebuilt = r.dataloader(loader)
    assert rebuilt is not loader and rebuilt.num_workers == 2 and rebuilt.dataset is loader.dataset
    assert loader.num_workers == 0
    assert r.dataloader(rebuilt) is rebuilt
    none = TuneResult(current=CURRENT, chosen=CURRENT, measurements=[], reasons=[])
    assert none.dataloader(loader) is loader


# ------------------------------------------------------------------------------------------------ recipe(tune=)
def _names(kwargs: dict) -> list[str]:
    return [type(cb).__name__ for cb in kwargs["callbacks"]]


@pytest.mark.parametrize("precision,channels_last", [("bf16-mixed", False), ("32-true", True), ("16-mixed", False)])
def test_recipe_takes_precision_and_channels_last_from_the_result(precision, channels_last):
    chosen = Candidate(precision=precision, channels_last=channels_last)
    r = TuneResult(current=CURRENT, chosen=chosen, measurements=[], reasons=[])
    out = le.recipe(tune=r, accelerator="cpu", max_epochs=3)
    assert out["precision"] == precision and out["max_epochs"] == 3
    assert ("ChannelsLast" in _names(out)) is channels_last
    assert le.recipe(**r.recipe_kwargs(), accelerator="cpu")["precision"] == precision


def test_recipe_explicit_arguments_win_over_the_result():
    r = TuneResult(current=CURRENT, chosen=Candidate("bf16-mixed", channels_last=False), measurements=[], reasons=[])
    out = le.recipe(tune=r, precision="32-true", channels_last=True)
    assert out["precision"] == "32-true" and "ChannelsLast" in _names(out)
    r2 = TuneResult(current=CURRENT, chosen=Candidate("32-true", channels_last=True), measurements=[], reasons=[])
    assert "ChannelsLast" not in _names(le.recipe(tune=r2, channels_last=False))
    # Without a result the defaults are unchanged: ChannelsLast on.
    assert "ChannelsLast" in _names(le.recipe())


@pytest.mark.parametrize("bad", ["bf16-mixed", {"precision": "32-true"}, Candidate()])
def test_recipe_rejects_what_is_not_a_tune_result(bad):
    with pytest.raises(TypeError, match="TuneResult"):
        le.recipe(tune=bad)


def test_public_names():
    assert le.TuneResult is TuneResult and callable(le.tune)
    assert "tune" in le.__all__ and "TuneResult" in le.__all__


def test_a_repeated_compilation_is_charged_the_cold_compile_time():
    """The second round's and the confirmation's compilations hit the compiler's caches (~0 s); they are charged
    the first, cold compilation's seconds, as a user's first run would pay them."""

    class Cached(Bench):
        def __call__(self, candidate: Candidate, stage: str) -> Measurement:
            m = super().__call__(candidate, stage)
            return replace(m, compile_s=30.0 if stage == "compile" else 0.1) if candidate.compile else m

    # 6e3 planned images. Round 1: 300 images/s charged 30 s -> 120 vs 100 (40% spread: undecided). Round 2:
    # 130 images/s; charged its own 0.1 s it would be ~130 (1.3x: kept), charged the cold 30 s it is ~79: not kept.
    bench = Cached(lambda c, stage: (130.0 if stage.endswith("again") else 300.0) if c.compile else 100.0, noise=0.2)
    chosen, table, reasons = search(CURRENT, {"compile": [False, True]}, bench, planned_images=6e3)
    assert [m.stage for m in table] == ["current", "compile", "compile, again", "compile, again (baseline)"]
    assert chosen == CURRENT and "no gain shown" in reasons[0]


def test_a_note_when_tuning_costs_more_than_the_planned_run():
    from lightning_efficient.functional.tuning import tuning_cost_note

    text = tuning_cost_note(30.0, 32, 16, 100.0)  # the run: 32 x 16 / 100 = 5.1 s
    assert text.startswith(
        "tuning took 30 s, more than the planned run itself (32 optimizer steps, about 5 s at 100.0 images/s)"
    )
    assert tuning_cost_note(30.0, 3000, 16, 100.0) is None  # 480 s of training: tuning pays
    assert tuning_cost_note(30.0, None, 16, 100.0) is None and tuning_cost_note(30.0, 32, 16, math.nan) is None
