"""Choosing training settings by measurement: candidates, measurements, the noise-aware rule and the search.

The pure part of :func:`lightning_efficient.tune`: nothing here runs a Trainer. :func:`search` is given a
``measure(candidate, stage) -> Measurement`` function (in :mod:`lightning_efficient.tune` a short fit on the
user's model and data) and decides, one factor at a time, which settings to keep:

1. measure the user's current settings;
2. for each factor in turn (``precision``, ``channels_last``, ``num_workers``, ``compile``), measure each other
   value with the best settings found so far and keep it only if it :func:`beats` them by more than the
   measurements' own noise. ``channels_last`` and ``num_workers`` are measured in pairs where the caller can
   (``measure_pair``: both settings in one fit, window by window in alternation), and kept if the pairs' gain
   is above 2% with a 95% lower bound above 1 (:func:`paired_gain`; measured in pairs once more when neither
   that nor an upper bound at most 1.02 holds): separate short fits of the same settings differ by 10-15% on a
   busy CPU, which hides a 10-20% gain, while adjacent windows see the same machine. More ``num_workers`` than
   the best so far are not measured when its data wait (:attr:`Measurement.data_wait`) bounds their gain below
   2% (:func:`workers_bound`). For the other factors an undecided value (a gain above 2% but within the noise, or a measurement whose
   windows spread by more than 30%) is measured again, back to back in the reverse order, and kept only if that
   second round, with windows spread by at most 30%, shows a gain, and so do both rounds pooled;
3. if more than one factor changed, measure the current settings and the combination once more (the combination
   was never measured against the user's settings) and keep the combination only if it still beats them: in
   pairs, by the paired rule of step 2, where every changed factor is one ``measure_pair`` switches; else in
   separate fits, where a confirmation that shows no gain but is not slower beyond the noise contradicts the
   rounds before it and is undecided too: both are measured again in the reverse order, and the combination is
   kept only if that round and both rounds pooled show a gain.

Cost grows with the sum of the numbers of values per factor (plus two for each undecided value or confirmation),
not their product. Units: images/s (training
throughput in steady state, data wait included), seconds, MiB.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping, Optional, Sequence

#: The factors :func:`search` varies, in the order it varies them.
FACTORS = ("precision", "channels_last", "num_workers", "compile")

#: Smallest relative gain a change must show to be kept, whatever the measured noise (2%).
MIN_GAIN = 0.02

#: A measurement whose windows spread by more than this (30%) says too little to decide on: measured again.
NOISY_SPREAD = 0.30


@dataclass(frozen=True)
class Candidate:
    """One configuration of the settings :func:`~lightning_efficient.tune` varies.

    Attributes:
        precision: Lightning's precision string (``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``).
        channels_last: model and image batches in ``torch.channels_last`` (the :class:`ChannelsLast` callback).
        compile: the model's submodules compiled in place with ``torch.compile`` (:func:`compile_submodules`).
        num_workers: ``DataLoader(num_workers=...)`` of the training loader; ``None``: as the user's loader.
    """

    precision: str = "32-true"
    channels_last: bool = False
    compile: bool = False
    num_workers: Optional[int] = None

    def label(self) -> str:
        """Short text, e.g. ``"32-true, channels_last, workers=1"``."""
        parts = [self.precision]
        if self.channels_last:
            parts.append("channels_last")
        if self.compile:
            parts.append("compile")
        if self.num_workers is not None:
            parts.append(f"workers={self.num_workers}")
        return ", ".join(parts)

    def differences(self, other: "Candidate") -> list[str]:
        """Names of the factors whose values differ from ``other``'s, in :data:`FACTORS` order."""
        return [f for f in FACTORS if getattr(self, f) != getattr(other, f)]


@dataclass
class Measurement:
    """What one candidate measured (or why it was not measured).

    Attributes:
        candidate: the settings measured.
        stage: why it was measured: ``"current"`` (the user's settings), a factor name, or ``"confirm"``;
            ``", again"`` / ``", again (baseline)"`` appended for a second round.
        window_images_per_s: training images/s of each timed window of optimizer steps (steady state, data wait
            included); empty if the candidate failed or was skipped.
        warmup_s: seconds of the warm-up steps before the first timed window (compilation happens here).
        compile_s: seconds that compilation added: ``warmup_s`` less the same number of steady-state steps
            (``compile`` candidates only, else NaN).
        peak_memory_mb: peak CUDA memory allocated on the device, or peak process RSS on the CPU, MiB.
        data_wait: share (0-1) of the timed windows' wall-clock time spent between optimizer steps: waiting for
            the next batch, its transfer to the device and the batch hooks (NaN if not measured). More DataLoader
            workers can save at most this share.
        error: ``"ExceptionType: message"`` if the fit raised; the candidate is never chosen.
        skipped: why the candidate was not measured (e.g. bf16 emulated on this CPU); never chosen.
    """

    candidate: Candidate
    stage: str
    window_images_per_s: tuple[float, ...] = ()
    warmup_s: float = math.nan
    compile_s: float = math.nan
    peak_memory_mb: float = math.nan
    data_wait: float = math.nan
    error: Optional[str] = None
    skipped: Optional[str] = None

    @property
    def ok(self) -> bool:
        """Measured without error, with at least one timed window."""
        return self.error is None and self.skipped is None and len(self.window_images_per_s) > 0

    @property
    def images_per_s(self) -> float:
        """Median images/s over the timed windows (NaN if not :attr:`ok`)."""
        return statistics.median(self.window_images_per_s) if self.ok else math.nan

    @property
    def spread(self) -> float:
        """The measurement's own noise: (max - min) / median of the windows' images/s; 0 for one window."""
        if not self.ok:
            return math.nan
        w = self.window_images_per_s
        return (max(w) - min(w)) / self.images_per_s if self.images_per_s > 0 else math.inf

    def amortised(self, planned_images: Optional[float]) -> "Measurement":
        """This measurement with compilation charged to the run: every window's images/s times
        ``t / (t + compile_s)``, where ``t = planned_images / images_per_s`` is the planned run's steady-state
        time. Unchanged without ``compile_s`` or ``planned_images``."""
        if not self.ok or math.isnan(self.compile_s) or not planned_images:
            return self
        t = planned_images / self.images_per_s
        factor = t / (t + max(self.compile_s, 0.0))
        return replace(self, window_images_per_s=tuple(r * factor for r in self.window_images_per_s))


def compile_submodules(module: Any, **compile_kwargs: Any) -> list[str]:
    """Compile in place (``nn.Module.compile``, i.e. ``torch.compile`` of each call) every direct child of
    ``module`` that holds parameters; returns their names.

    Why the children: Lightning calls ``training_step`` directly, and a ``training_step`` that calls
    ``self.model(x)`` (not ``self(x)``) never goes through the LightningModule's own ``__call__``, so compiling
    the LightningModule itself (``torch.compile(model)`` or ``model.compile()``) would leave the network
    uncompiled. Compiling the children that hold the weights covers both styles. Without such children the
    module itself is compiled. State-dict keys are unchanged (in-place compilation adds no ``_orig_mod.``).
    """
    names = [name for name, child in module.named_children() if any(True for _ in child.parameters())]
    for name in names:
        getattr(module, name).compile(**compile_kwargs)
    if not names:
        module.compile(**compile_kwargs)
    return names


def beats(new: Measurement, old: Measurement, min_gain: float = MIN_GAIN) -> bool:
    """Whether ``new`` is faster than ``old`` by more than the noise of either measurement.

    True when both are :attr:`~Measurement.ok` and ``new.images_per_s > old.images_per_s * (1 + g)`` with
    ``g = max(min_gain, new.spread, old.spread)``: a gain smaller than the spread of repeated windows is not
    told apart from noise, so the simpler settings stay.
    """
    if not (new.ok and old.ok):
        return False
    gain = max(min_gain, new.spread, old.spread)
    return new.images_per_s > old.images_per_s * (1.0 + gain)


def pool(first: Measurement, second: Measurement) -> Measurement:
    """One measurement of the same candidate from two rounds: the windows of both (only ``first`` if ``second``
    is not :attr:`~Measurement.ok`). Its median uses every window; its spread covers both rounds."""
    if not second.ok:
        return first
    if not first.ok:
        return second
    return replace(first, window_images_per_s=first.window_images_per_s + second.window_images_per_s)


def _charge_cold_compile(m: Measurement, table: Sequence[Measurement], planned_images: Optional[float]) -> Measurement:
    """``m`` amortised with the longest compile time measured so far: a compilation repeated in the same process
    hits the compiler's caches and takes a fraction of the first (cold) one, which a user's first run pays."""
    times = [x.compile_s for x in table if x.ok and x.candidate.compile and math.isfinite(x.compile_s)]
    return replace(m, compile_s=max(times)).amortised(planned_images) if times and m.ok else m.amortised(planned_images)


def _ratio(new: Measurement, old: Measurement) -> float:
    return new.images_per_s / old.images_per_s if new.ok and old.ok and old.images_per_s > 0 else math.nan


@dataclass(frozen=True)
class _SecondRound:
    """The outcome of measuring an undecided comparison once more (:func:`_second_round`)."""

    held: bool  # the second round (quiet enough to decide on) and both rounds pooled show a gain above min_gain
    ratio: float  # new / old in the second round
    pooled: float  # new / old over both rounds' windows
    pooled_new: Measurement
    again_old: Measurement
    error: Optional[str]
    spread: float = 0.0  # the larger spread of the second round's two measurements

    def describe(self, noisy_spread: float = NOISY_SPREAD) -> str:
        if not math.isfinite(self.ratio):
            return f"the second round failed ({self.error})"
        text = f"{self.ratio:.2f}x when measured again ({self.pooled:.2f}x pooled)"
        if self.spread > noisy_spread:
            text += f", with windows spread by {self.spread:.0%}, too noisy to decide on"
        return text


def _second_round(
    measure: Callable[[Candidate, str], Measurement],
    new: Candidate,
    old: Candidate,
    stage: str,
    first_new: Measurement,
    first_old: Measurement,
    table: list[Measurement],
    planned_images: Optional[float],
    min_gain: float,
    noisy_spread: float = NOISY_SPREAD,
    charge: Optional[bool] = None,
) -> _SecondRound:
    """Measure ``new`` then ``old`` once more (the reverse of the first round's order, so a steady drift of the
    machine's speed favours neither), append both to ``table``, and pool them with the first round. The change
    holds if the second round shows a gain above ``min_gain``, its windows spread by at most ``noisy_spread``
    (a second round as noisy as that says nothing either), and both rounds pooled show a gain above ``min_gain``.
    ``charge``: charge ``new`` the cold compile time (default: when ``stage`` is ``"compile"``)."""
    again_new = measure(new, f"{stage}, again")
    again_old = measure(old, f"{stage}, again (baseline)")
    table += [again_new, again_old]
    charge = stage == "compile" if charge is None else charge
    eff_again = _charge_cold_compile(again_new, table, planned_images) if charge else again_new
    ratio = _ratio(eff_again, again_old)
    pooled_new, pooled_old = pool(first_new, eff_again), pool(first_old, again_old)
    pooled = _ratio(pooled_new, pooled_old)
    ok = again_new.ok and again_old.ok
    spread = max(eff_again.spread, again_old.spread) if ok else 0.0
    held = ok and spread <= noisy_spread and ratio > 1.0 + min_gain and pooled > 1.0 + min_gain
    return _SecondRound(held, ratio, pooled, pooled_new, again_old, again_new.error or again_old.error, spread)


#: One-sided 95% quantiles of Student's t distribution by degrees of freedom (1-10; 1.645 beyond).
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812)


@dataclass(frozen=True)
class PairedGain:
    """How much faster ``new`` is than ``old`` from windows measured in pairs (:func:`paired_gain`).

    Attributes:
        ratios: ``new / old`` images/s of each pair of adjacent windows.
        gain: their geometric mean (the estimated speed-up, e.g. 1.12 for 12% more images/s).
        lower: one-sided 95% lower confidence bound of ``gain`` (Student's t on the log ratios); NaN for one pair.
        upper: one-sided 95% upper confidence bound of ``gain``; NaN for one pair.
        min_gain: the smallest relative gain that counts.
    """

    ratios: tuple[float, ...]
    gain: float
    lower: float
    upper: float = math.nan
    min_gain: float = MIN_GAIN

    @property
    def kept(self) -> bool:
        """The gain counts (above ``1 + min_gain``) and is shown beyond the noise (``lower > 1``)."""
        return self.gain > 1.0 + self.min_gain and self.lower > 1.0

    @property
    def undecided(self) -> bool:
        """Neither kept nor shown to be without a gain that counts: the gain or its upper bound lies above
        ``1 + min_gain`` (one pair: the gain does). Worth more pairs."""
        if not self.ratios or self.kept:
            return False
        if not math.isfinite(self.upper):
            return self.gain > 1.0 + self.min_gain
        return self.upper > 1.0 + self.min_gain

    def describe(self) -> str:
        if not self.ratios:
            return "no pair of windows measured"
        if len(self.ratios) < 2:
            return f"{self.gain:.2f}x in 1 pair of adjacent windows"
        span = f"pairs {min(self.ratios):.2f}-{max(self.ratios):.2f}x"
        bound = (
            f"; one-sided 95% bounds: lower {self.lower:.3f}x, upper {self.upper:.3f}x"
            if math.isfinite(self.lower)
            else ""
        )
        return f"{self.gain:.2f}x in {len(self.ratios)} pairs of adjacent windows ({span}{bound})"


def paired_gain(new: Measurement, old: Measurement, min_gain: float = MIN_GAIN) -> PairedGain:
    """The speed-up of ``new`` over ``old`` measured in one fit, window by window: ``new``'s window ``i`` ran
    next to ``old``'s window ``i`` (alternating, A B B A ...), so a change of the machine's speed over seconds or
    minutes, or from one fit to the next, affects both sides of a pair alike and cancels in their ratio.

    ``gain`` is the geometric mean of the pair ratios; ``lower`` and ``upper`` its one-sided 95% bounds,
    ``exp(mean -/+ t * sd / sqrt(n))`` on the log ratios (Student's t with ``n - 1`` degrees of freedom). The
    change is kept (:attr:`PairedGain.kept`) when the gain exceeds ``1 + min_gain`` and the lower bound exceeds
    1; it is shown to gain too little when the upper bound is at most ``1 + min_gain``; in between it is
    undecided (:attr:`PairedGain.undecided`).

    Raises:
        ValueError: the two measurements have different numbers of windows (they were not measured in pairs).
    """
    if not (new.ok and old.ok):
        return PairedGain((), math.nan, math.nan, math.nan, min_gain)
    if len(new.window_images_per_s) != len(old.window_images_per_s):
        raise ValueError(
            f"paired_gain(): {len(new.window_images_per_s)} windows of {new.candidate.label()} but "
            f"{len(old.window_images_per_s)} of {old.candidate.label()}; paired measurements have "
            "one window of each per pair."
        )
    ratios = tuple(a / b for a, b in zip(new.window_images_per_s, old.window_images_per_s) if a > 0 and b > 0)
    if not ratios:
        return PairedGain((), math.nan, math.nan, math.nan, min_gain)
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    n = len(logs)
    if n < 2:
        return PairedGain(ratios, math.exp(mean), math.nan, math.nan, min_gain)
    t = _T95[n - 2] if n - 2 < len(_T95) else 1.645
    half = t * statistics.stdev(logs) / math.sqrt(n)
    return PairedGain(ratios, math.exp(mean), math.exp(mean - half), math.exp(mean + half), min_gain)


def pool_pairs(
    first: tuple[Measurement, Measurement], second: tuple[Measurement, Measurement]
) -> tuple[Measurement, Measurement]:
    """Two paired measurements of the same two candidates as one (their pairs together); the first alone if the
    second failed."""
    if not (second[0].ok and second[1].ok):
        return first
    return pool(first[0], second[0]), pool(first[1], second[1])


def workers_bound(best: Measurement, value: Any, min_gain: float = MIN_GAIN) -> Optional[str]:
    """Why measuring ``num_workers=value`` is pointless, or ``None``: more workers than ``best`` has can at most
    remove its data wait (:attr:`Measurement.data_wait`), a speed-up of ``1 / (1 - data_wait)``; below
    ``1 + min_gain`` nothing could be gained (measured bound, Amdahl's law). Fewer workers are always measured:
    on a small CPU they can be faster by leaving the cores to the training step."""
    current = best.candidate.num_workers
    if value is None or current is None or value <= current or not best.ok or not math.isfinite(best.data_wait):
        return None
    bound = 1.0 / max(1.0 - best.data_wait, 1e-9)
    if bound >= 1.0 + min_gain:
        return None
    return (
        f"with workers={current} the training step waited for data {best.data_wait:.1%} of the time, so more "
        f"workers could gain at most {bound:.3f}x (below the {min_gain:.0%} that counts)"
    )


def tuning_cost_note(
    tuning_s: float, planned_steps: Optional[int], batch_size: Optional[int], images_per_s: float
) -> Optional[str]:
    """A note if tuning took longer than the planned run itself would at the chosen settings
    (``planned_steps x batch_size / images_per_s`` seconds), else ``None`` (also when the run's length is not
    known)."""
    if not planned_steps or not batch_size or not (images_per_s > 0) or not math.isfinite(images_per_s):
        return None
    run_s = planned_steps * batch_size / images_per_s
    if tuning_s <= run_s:
        return None
    return (
        f"tuning took {tuning_s:.0f} s, more than the planned run itself ({planned_steps} optimizer steps, about "
        f"{run_s:.0f} s at {images_per_s:.1f} images/s): for a run this short it does not pay; keep the result "
        "for longer runs of the same model, data and machine, or pass channels_last=False / num_workers=False "
        "to measure less."
    )


def _in_pairs(
    measure_pair: Callable[[Candidate, Candidate, str], Optional[tuple[Measurement, Measurement]]],
    new: Candidate,
    old: Candidate,
    stage: str,
    table: list[Measurement],
    min_gain: float,
    remeasure: bool,
) -> Optional[tuple[tuple[Measurement, Measurement], PairedGain, str]]:
    """Measure ``new`` against ``old`` in pairs (once more, pooled, when undecided and ``remeasure``); the
    measurements go into ``table``. Returns ``(pair, gain, text)``, where ``text`` describes the gain (both runs
    where there were two); ``None`` if ``measure_pair`` cannot pair them. A failed ``new`` gives ``gain`` without
    ratios and the error as ``text``."""
    pair = measure_pair(new, old, stage)
    if pair is None:
        return None
    table += list(pair)
    if not pair[0].ok:
        return pair, PairedGain((), math.nan, math.nan, math.nan, min_gain), pair[0].error or pair[0].skipped or ""
    gain = first = paired_gain(*pair, min_gain)
    if gain.undecided and remeasure:
        again = measure_pair(new, old, f"{stage}, again")
        if again is not None:
            table += list(again)
            pair = pool_pairs(pair, again)
            gain = paired_gain(*pair, min_gain)
    against = f"against {old.label()}"
    if first is not gain:
        return (
            pair,
            gain,
            (f"{first.describe()} {against}, undecided, so measured in pairs again: {gain.describe()} over both runs"),
        )
    return pair, gain, f"{gain.describe()} {against}"


def _paired_round(
    measure_pair: Callable[[Candidate, Candidate, str], Optional[tuple[Measurement, Measurement]]],
    cand: Candidate,
    best: Candidate,
    best_m: Measurement,
    factor: str,
    value: Any,
    table: list[Measurement],
    reasons: list[str],
    min_gain: float,
    remeasure: bool,
) -> Optional[tuple[Candidate, Measurement]]:
    """Decide ``factor=value`` from paired windows (:func:`paired_gain`): returns the new ``(best, best_m)``, or
    ``None`` if ``measure_pair`` cannot pair these candidates (the caller measures them apart)."""
    found = _in_pairs(measure_pair, cand, best, factor, table, min_gain, remeasure)
    if found is None:
        return None
    pair, gain, text = found
    if not pair[0].ok:
        reasons.append(f"{factor}={value!r}: not chosen, it failed ({text}).")
        return best, best_m
    if gain.kept:
        reasons.append(f"{factor}={value!r}: kept, {text}.")
        return cand, pair[0]
    why = f"no gain above {min_gain:.0%}" if not gain.gain > 1.0 + min_gain else "a gain not shown beyond the noise"
    reasons.append(f"{factor}={value!r}: not kept, {text}: {why}.")
    return best, (pair[1] if pair[1].ok else best_m)


def search(
    current: Candidate,
    options: Mapping[str, Sequence[Any]],
    measure: Callable[[Candidate, str], Measurement],
    *,
    planned_images: Optional[float] = None,
    skipped: Sequence[Measurement] = (),
    min_gain: float = MIN_GAIN,
    remeasure: bool = True,
    noisy_spread: float = NOISY_SPREAD,
    measure_pair: Optional[Callable[[Candidate, Candidate, str], Optional[tuple[Measurement, Measurement]]]] = None,
    paired: Sequence[str] = ("channels_last", "num_workers"),
    bound_workers: bool = True,
) -> tuple[Candidate, list[Measurement], list[str]]:
    """Choose settings one factor at a time (see the module docstring).

    Args:
        current: the user's settings; measured first, and kept unless something beats them.
        options: for each factor in :data:`FACTORS`, the values to try (the current value may be included;
            factors missing or with no other value are not varied).
        measure: ``measure(candidate, stage)`` runs the candidate and returns its :class:`Measurement`;
            it reports a failure in ``Measurement.error`` instead of raising.
        planned_images: images the planned run will train on (``steps x batch size``); compilation time is
            amortised over them (:meth:`Measurement.amortised`). ``None``: not amortised.
        skipped: candidates not measured, with the reason; added to the table as they are.
        min_gain: smallest relative gain that counts (:func:`beats`).
        remeasure: when a value is undecided (faster by more than ``min_gain`` but within the noise, or not
            slower beyond the noise while its own windows spread by more than ``noisy_spread``), measure it and
            the best settings so far once more, back to back in the reverse order, and keep it only if that
            second round shows a gain above ``min_gain`` with windows spread by at most ``noisy_spread``, and
            both rounds' windows pooled (:func:`pool`) show a gain too.
            This costs two more measurements, only for undecided values; the confirmation of a combination
            (step 3 of the module docstring) is measured again the same way when it shows no gain but is not
            slower beyond the noise. ``False``: keep the simpler settings at once.
        noisy_spread: above this spread (:attr:`Measurement.spread`) a measurement is too noisy to decide on.
        measure_pair: ``measure_pair(new, old, stage) -> (new_measurement, old_measurement)`` measures two
            candidates in one run, window by window in alternation, so that their windows pair up
            (:func:`paired_gain`); ``None`` when it cannot (then they are measured apart). Used for the factors
            in ``paired`` (not for compiled candidates): a change is kept if its paired gain is above
            ``min_gain`` with a 95% lower bound above 1; an undecided one (neither that, nor an upper bound at
            most ``1 + min_gain``) is measured in pairs once more (``remeasure``) and decided on both runs' pairs.
        paired: the factors measured with ``measure_pair`` (default: ``channels_last`` and ``num_workers``,
            which one fit can switch between: the layout of weights and batches, the loader drawn from;
            ``precision`` needs another Trainer). A confirmation of changes all in ``paired`` is measured in
            pairs too.
        bound_workers: skip more ``num_workers`` than the best settings have when their data wait bounds the
            gain below ``min_gain`` (:func:`workers_bound`); ``False``: measure every value in the options
            (:func:`~lightning_efficient.tune` passes ``False`` for worker counts the user listed).

    Returns:
        ``(chosen, measurements, reasons)``: the chosen settings, every measurement in order (skipped ones
        included), and one sentence per decision.

    Raises:
        RuntimeError: the current settings themselves fail (the message carries the error).
    """
    unknown = set(options) - set(FACTORS)
    if unknown:
        raise ValueError(f"search(): unknown factors {sorted(unknown)}; expected some of {FACTORS}.")
    table: list[Measurement] = list(skipped)
    base = measure(current, "current")
    table.append(base)
    if not base.ok:
        raise RuntimeError(f"tune(): the current settings ({current.label()}) fail to train: {base.error}")
    best, best_m = current, base
    reasons: list[str] = []
    for factor in FACTORS:
        # The round's starting value was measured already (it is ``best``); measure each other value once,
        # even when the starting value or a repeat comes later in the options.
        tried = {getattr(best, factor)}
        for value in options.get(factor, ()):
            if value in tried:
                continue
            tried.add(value)
            cand = replace(best, **{factor: value})
            if factor == "num_workers" and bound_workers:
                why = workers_bound(best_m, value, min_gain)
                if why:
                    table.append(Measurement(cand, factor, skipped=why))
                    reasons.append(f"num_workers={value!r}: not measured, {why}.")
                    continue
            if measure_pair is not None and factor in paired and not cand.compile:
                decided = _paired_round(
                    measure_pair, cand, best, best_m, factor, value, table, reasons, min_gain, remeasure
                )
                if decided is not None:
                    best, best_m = decided
                    continue
            m = measure(cand, factor)
            table.append(m)
            if not m.ok:
                reasons.append(f"{factor}={value!r}: not chosen, it failed ({m.error or m.skipped}).")
                continue
            effective = m.amortised(planned_images) if factor == "compile" else m
            ratio = _ratio(effective, best_m)
            noise = max(min_gain, effective.spread, best_m.spread)
            if beats(effective, best_m, min_gain):
                reasons.append(
                    f"{factor}={value!r}: kept, {ratio:.2f}x the images/s of {best.label()} (noise {noise:.0%})."
                )
                best, best_m = cand, effective
            elif remeasure and (ratio > 1.0 + min_gain or (effective.spread > noisy_spread and 1 / ratio <= 1 + noise)):
                # Undecided: a gain within the noise, or a measurement whose own windows vary too much to say
                # anything. Measure both again back to back, the new settings first (the old ones were measured
                # first in the first round, so a steady drift of the machine's speed favours neither), and keep
                # the change only if the second round (quiet enough to decide on) shows a gain too.
                second = _second_round(
                    measure, cand, best, factor, effective, best_m, table, planned_images, min_gain, noisy_spread
                )
                if second.held:
                    reasons.append(
                        f"{factor}={value!r}: kept, {ratio:.2f}x then {second.ratio:.2f}x the images/s of "
                        f"{best.label()} in two rounds ({second.pooled:.2f}x pooled); the first round was within the "
                        f"noise ({noise:.0%}), the second round showed a gain."
                    )
                    best, best_m = cand, second.pooled_new
                else:
                    reasons.append(
                        f"{factor}={value!r}: not kept, {ratio:.2f}x the images/s of {best.label()} within the "
                        f"noise ({noise:.0%}), then {second.describe(noisy_spread)}: no gain shown."
                    )
                    if second.again_old.ok:
                        best_m = second.again_old  # the fresher measurement of the settings kept
            else:
                if ratio > 1:
                    verdict = f"a gain within the noise ({noise:.0%})"
                elif 1 / ratio > 1 + noise:
                    verdict = "slower"
                else:
                    verdict = f"slower, within the noise ({noise:.0%})"
                reasons.append(f"{factor}={value!r}: not kept, {ratio:.2f}x the images/s of {best.label()}, {verdict}.")
    changed = best.differences(current)
    confirmed_in_pairs = None
    if len(changed) >= 2 and measure_pair is not None and set(changed) <= set(paired) and not best.compile:
        confirmed_in_pairs = _in_pairs(measure_pair, best, current, "confirm", table, min_gain, remeasure)
    if confirmed_in_pairs is not None:
        pair, gain, text = confirmed_in_pairs
        if gain.kept:
            reasons.append(f"confirmed: {best.label()} is {text}.")
        elif not pair[0].ok:
            reasons.append(
                f"not confirmed: measuring {best.label()} in pairs with the current settings failed "
                f"({text}); keeping the current settings."
            )
            best = current
        else:
            reasons.append(
                f"not confirmed: {best.label()} measured {text}: no gain shown beyond the noise; keeping "
                "the current settings."
            )
            best = current
    elif len(changed) >= 2:
        again_current = measure(current, "confirm")
        again_best = measure(best, "confirm")
        table += [again_current, again_best]
        effective = _charge_cold_compile(again_best, table, planned_images) if best.compile else again_best
        ratio = _ratio(effective, again_current)
        noise = max(min_gain, effective.spread, again_current.spread) if effective.ok and again_current.ok else math.nan
        if beats(effective, again_current, min_gain):
            reasons.append(f"confirmed: {best.label()} is {ratio:.2f}x {current.label()} measured again back to back.")
        elif remeasure and math.isfinite(ratio) and ratio > 0 and 1 / ratio <= 1 + noise:
            # Undecided: the rounds before showed each change's gain, this one shows none but is not slower
            # beyond the noise either. Measure both once more, the combination first, and keep it only if that
            # round and both rounds pooled show a gain.
            second = _second_round(
                measure,
                best,
                current,
                "confirm",
                effective,
                again_current,
                table,
                planned_images,
                min_gain,
                noisy_spread,
                charge=best.compile,
            )
            if second.held:
                reasons.append(
                    f"confirmed: {best.label()} was {ratio:.2f}x {current.label()} measured again back "
                    f"to back (within the noise, {noise:.0%}), then {second.ratio:.2f}x in the reverse "
                    f"order ({second.pooled:.2f}x pooled)."
                )
            else:
                reasons.append(
                    f"not confirmed: measured again, {best.label()} was {ratio:.2f}x {current.label()} "
                    f"(within the noise, {noise:.0%}), then {second.describe(noisy_spread)}; keeping the current "
                    f"settings."
                )
                best = current
        else:
            reasons.append(
                f"not confirmed: measured again, {best.label()} was {ratio:.2f}x {current.label()}; "
                f"keeping the current settings."
            )
            best = current
    if best == current:
        reasons.append(f"chosen: the current settings ({current.label()}).")
    else:
        reasons.append(f"chosen: {best.label()} (changed: {', '.join(best.differences(current))}).")
    return best, table, reasons


# ------------------------------------------------------------------------------------------------ the result
@dataclass
class TuneResult:
    """What :func:`~lightning_efficient.tune` measured and chose.

    Attributes:
        current: the user's settings as given.
        chosen: the settings to train with.
        measurements: every configuration tried, in order (failed and skipped ones included).
        reasons: one sentence per decision.
        planned_steps: optimizer steps of the planned run (from ``max_steps``/``max_epochs``), used to amortise
            compilation; ``None`` if unknown.
        batch_size: images per training batch as measured.
        tuning_s: wall-clock seconds the tuning took.
        machine: a short description of the hardware it ran on.

    Example::

        result = tune(model, train_loader, max_epochs=10)
        print(result)                       # the table and the decisions
        trainer = pl.Trainer(max_epochs=10, **recipe(tune=result))
        trainer.fit(result.prepare_model(model), result.dataloader(train_loader))
    """

    current: Candidate
    chosen: Candidate
    measurements: list[Measurement]
    reasons: list[str]
    planned_steps: Optional[int] = None
    batch_size: Optional[int] = None
    tuning_s: float = math.nan
    machine: str = ""
    notes: list[str] = field(default_factory=list)

    # ---------------------------------------------------------------- how to use it
    @property
    def precision(self) -> str:
        """The chosen Lightning precision string."""
        return self.chosen.precision

    @property
    def channels_last(self) -> bool:
        """Whether to use :class:`~lightning_efficient.ChannelsLast`."""
        return self.chosen.channels_last

    @property
    def compile(self) -> bool:
        """Whether to compile the LightningModule (:meth:`prepare_model`)."""
        return self.chosen.compile

    @property
    def num_workers(self) -> Optional[int]:
        """The chosen ``DataLoader(num_workers=...)``; ``None``: keep the loader's own."""
        return self.chosen.num_workers

    def recipe_kwargs(self) -> dict[str, Any]:
        """``{"precision": ..., "channels_last": ...}`` for :func:`~lightning_efficient.recipe`
        (``recipe(**result.recipe_kwargs())``; ``recipe(tune=result)`` does the same)."""
        return {"precision": self.chosen.precision, "channels_last": self.chosen.channels_last}

    def measured(self, candidate: Candidate) -> Optional[Measurement]:
        """The last successful measurement of ``candidate``, or ``None``."""
        found = [m for m in self.measurements if m.candidate == candidate and m.ok]
        return found[-1] if found else None

    def _direct_pairs(self) -> Optional[tuple[Measurement, Measurement]]:
        """The chosen and the current settings measured against each other in pairs (a single change, or the
        confirmation of several), every such run pooled; ``None`` if they never were."""
        found: Optional[tuple[Measurement, Measurement]] = None
        for m, b in zip(self.measurements, self.measurements[1:]):
            if (
                m.stage.endswith("(paired)")
                and b.stage.endswith("(paired baseline)")
                and m.ok
                and b.ok
                and (m.candidate, b.candidate) == (self.chosen, self.current)
            ):
                found = (m, b) if found is None else pool_pairs(found, (m, b))
        return found

    @property
    def speedup(self) -> float:
        """Images/s of the chosen settings over the current ones, from the same stage of measurement: the
        paired windows' gain (:func:`paired_gain`) where the two were measured against each other in pairs;
        else the confirmation in separate fits, both its rounds pooled; 1.0 when the current settings were
        kept."""
        if self.chosen == self.current:
            return 1.0
        pairs = self._direct_pairs()
        if pairs is not None:
            return paired_gain(*pairs).gain
        confirm: dict[Candidate, Measurement] = {}
        for m in self.measurements:  # both rounds of the confirmation, pooled
            if m.stage.startswith("confirm") and m.ok:
                confirm[m.candidate] = pool(confirm[m.candidate], m) if m.candidate in confirm else m
        if self.chosen in confirm and self.current in confirm:
            return _ratio(confirm[self.chosen], confirm[self.current])
        chosen, current = self.measured(self.chosen), self.measured(self.current)
        return _ratio(chosen, current) if chosen and current else math.nan

    def _paired_only(self) -> bool:
        """Whether :attr:`speedup` comes from paired windows."""
        return self._direct_pairs() is not None

    # ---------------------------------------------------------------- output
    def rows(self) -> list[dict[str, Any]]:
        """The table as dicts: ``settings``, ``stage``, ``images_per_s``, ``ratio`` (to the current settings'
        first measurement), ``spread``, ``peak_memory_mb``, ``compile_s``, ``paired_gain`` (for a row measured
        in pairs, :func:`paired_gain` over the baseline row that follows it; else NaN), ``status`` (``ok``,
        ``chosen``, ``failed: ...``, ``skipped: ...``)."""
        base = next((m for m in self.measurements if m.stage == "current" and m.ok), None)
        partner = {
            id(m): b
            for m, b in zip(self.measurements, self.measurements[1:])
            if m.stage.endswith("(paired)") and b.stage.endswith("(paired baseline)")
        }
        out = []
        chosen_marked = False
        for m in reversed(self.measurements):  # mark the last measurement of the chosen settings
            status = "ok"
            if m.error:
                status = f"failed: {m.error}"
            elif m.skipped:
                status = f"skipped: {m.skipped}"
            elif m.candidate == self.chosen and not chosen_marked:
                status, chosen_marked = "chosen", True
            out.append(
                {
                    "settings": m.candidate.label(),
                    "stage": m.stage,
                    "images_per_s": m.images_per_s,
                    "ratio": _ratio(m, base) if base else math.nan,
                    "spread": m.spread,
                    "peak_memory_mb": m.peak_memory_mb,
                    "compile_s": m.compile_s,
                    "paired_gain": paired_gain(m, partner[id(m)]).gain if id(m) in partner else math.nan,
                    "status": status,
                }
            )
        return list(reversed(out))

    def table(self) -> str:
        """The measurements as a Markdown table."""

        def num(v: float, fmt: str) -> str:
            return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)

        lines = [
            "| settings | stage | images/s | vs current | spread | peak MiB | compile s | status |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in self.rows():
            paired = f" (paired: {r['paired_gain']:.2f}x)" if math.isfinite(r["paired_gain"]) else ""
            lines.append(
                f"| {r['settings']} | {r['stage']} | {num(r['images_per_s'], '{:.1f}')} | "
                f"{num(r['ratio'], '{:.2f}x')}{paired} | "
                f"{num(r['spread'], '{:.0%}')} | "
                f"{num(r['peak_memory_mb'], '{:.0f}')} | {num(r['compile_s'], '{:.1f}')} | {r['status']} |"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        how = ", measured in pairs" if self.chosen != self.current and self._paired_only() else ""
        head = (
            f"tune(): chose {self.chosen.label()} ({self.speedup:.2f}x the images/s of the current "
            f"{self.current.label()}{how}); tuning took {self.tuning_s:.0f} s"
        )
        return "\n".join([head, "", self.table(), ""] + [f"- {r}" for r in self.reasons + self.notes])

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the settings, the table rows, the decisions and the context."""

        def clean(v: Any) -> Any:
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {
            "current": asdict(self.current),
            "chosen": asdict(self.chosen),
            "recipe_kwargs": self.recipe_kwargs(),
            "speedup": clean(self.speedup),
            "rows": [{k: clean(v) for k, v in r.items()} for r in self.rows()],
            "measurements": [
                {
                    **asdict(m),
                    "window_images_per_s": list(m.window_images_per_s),
                    **{k: clean(getattr(m, k)) for k in ("warmup_s", "compile_s", "peak_memory_mb", "data_wait")},
                }
                for m in self.measurements
            ],
            "reasons": self.reasons,
            "notes": self.notes,
            "planned_steps": self.planned_steps,
            "batch_size": self.batch_size,
            "tuning_s": clean(self.tuning_s),
            "machine": self.machine,
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text (``kwargs`` go to :func:`json.dumps`, default ``indent=2``)."""
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    # ---------------------------------------------------------------- applying it (no Trainer needed)
    def prepare_model(self, model: Any) -> Any:
        """``model`` with its submodules compiled in place (:func:`compile_submodules`) if compiling was chosen;
        returned either way, so ``trainer.fit(result.prepare_model(model), ...)`` reads naturally."""
        if self.chosen.compile:
            compile_submodules(model)
        return model

    def dataloader(self, loader: Any) -> Any:
        """``loader`` rebuilt with the chosen ``num_workers`` (same dataset, sampler, collate function...), or
        ``loader`` itself if no other number was chosen or it cannot be rebuilt."""
        from lightning_efficient.data.loader import with_num_workers

        if self.chosen.num_workers is None or getattr(loader, "num_workers", None) == self.chosen.num_workers:
            return loader
        return with_num_workers(loader, self.chosen.num_workers)
