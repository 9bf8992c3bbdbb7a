"""tune()'s whole policy, without a Trainer or a clock: the verdict, its bounds, the budget, which values
are tried, when a stored decision is measured again, and the search.

**The rule** (written here only; the README, :func:`~lightning_efficient.tune` and the CLI link to it). A
change of one factor (:data:`FACTORS`, in that order: precision, on which the others' gains depend; then
DataLoader workers, whose ``recipe()`` default is least sure and which are often ruled out for free) is
measured in *pairs* of adjacent windows, the change and the setting it would replace, in the order A B B
A A B ..., with the factors before it as decided and those after it at ``recipe()``'s defaults (where
tune() measures them): the settings the run will likely train with (on a CPU, bf16's gain can depend on
the layout). Each pair gives a ratio of images/s (:func:`window_rate`), new / old. After ``min_pairs``
pairs, and after every further pair, the change is

- **kept** when the geometric mean of the ratios exceeds ``1 + min_gain`` and its lower confidence bound
  exceeds 1;
- **ruled out** when the upper confidence bound is below ``1 + min_gain``;
- else measured one more pair, up to ``max_pairs``; then **undecided**: the setting in use stays.

A *disturbed* pair (a side under 1 / 1.5 of its fastest window relative to the other: disturbances only
ever slow) is measured again (:func:`undisturbed`; not for workers). The bounds are one-sided Student's t
bounds on the log ratios at 95% *over all the looks* (Bonferroni: each of the
``max_pairs - min_pairs + 1`` looks at ``1 - 0.05 / looks``), so that measuring until the rule decides
keeps a change that gains nothing at most 5% of the time. A change the time budget
(:func:`budget_seconds`) cannot afford ``min_pairs`` pairs of is **not measured**: ``recipe()``'s default
applies, and a later tune() with a longer planned run measures it (:func:`measure_again`); so too when
the budget runs out before the rule decides, unless the pairs so far point away from the default (then:
undecided). More DataLoader workers are ruled out without pairs when the data wait bounds their gain
below ``1 + min_gain`` (Amdahl: they can at most remove the wait). Pairs beyond ``min_pairs`` never take
the time later factors need for their own ``min_pairs`` pairs. A compilation is amortised over the
planned run. The values tried per factor are :func:`plan_options`'s.

:func:`search` is a generator: it yields :class:`~lightning_efficient.tuning.records.Request` objects and
is sent :class:`~lightning_efficient.tuning.records.Window` /
:class:`~lightning_efficient.tuning.records.Pair` answers (or thrown
:class:`~lightning_efficient.tuning.records.MeasurementError`): the fits measure, this module decides.
Units: images/s, seconds, batches.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Mapping, Optional, Sequence

import torch
from lightning_utilities.core.rank_zero import rank_zero_warn

from lightning_efficient.data.loader import available_cpus, can_rebuild, suggest_loader_kwargs
from lightning_efficient.precision import cpu_has_native_bf16, recommended_precision
from lightning_efficient.tuning.records import (
    Asked,
    Candidate,
    MeasurementError,
    Options,
    Pair,
    Request,
    RequestKind,
    Verdict,
    Window,
)

FACTORS = ("precision", "num_workers", "channels_last", "compile")  #: in the order they are measured
MIN_GAIN = 0.02  #: the smallest relative gain that counts (``tune(min_gain=)``)
MIN_PAIRS = 3  #: pairs before the rule decides
MAX_PAIRS = 8  #: pairs after which a change is undecided
LEVEL = 0.95  #: the confidence over all the looks
SLACK = (
    1.1  #: a pair is measured only if 1.1x its estimate (the slowest pair so far) still fits the budget
)
REMEASURE = (
    1.25  #: a stored result with factors by rule is measured again when the budget grew beyond this
)

__all__ = [
    "FACTORS",
    "Decision",
    "bounds",
    "budget_seconds",
    "judge",
    "measure_again",
    "plan_options",
    "search",
    "t_quantile",
    "undisturbed",
    "window_rate",
]


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for ``0.5 <= p < 1``: with ``x = sqrt(df) tan(u)``, ``P(T <= x)`` is
    ``1/2 + c`` times the integral of ``cos(u)^(df - 1)`` from 0 to ``u``; Simpson's rule and bisection
    (accurate to ~1e-6)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    n, lo, hi = 64, 0.0, math.pi / 2
    simpson = [1 if i in (0, n) else 4 if i % 2 else 2 for i in range(n + 1)]
    for _ in range(60):
        u = (lo + hi) / 2
        area = u / n / 3 * sum(w * math.cos(i * u / n) ** (df - 1) for i, w in enumerate(simpson))
        below = 0.5 + c * area < p
        lo, hi = (u, hi) if below else (lo, u)
    return math.sqrt(df) * math.tan(lo)


def bounds(
    ratios: Sequence[float], looks: int = MAX_PAIRS - MIN_PAIRS + 1
) -> tuple[float, float, float]:
    """``(gain, lower, upper)``: the geometric mean of ``ratios`` and its bounds at
    ``1 - (1 - LEVEL) / looks`` (NaN bounds below 2 ratios, all NaN for none).

    Args:
        ratios: images/s new / old of each pair.
        looks: how many times the rule may look at the pairs (the confidence is split among them).
    """
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 2:
        return (math.exp(logs[0]) if logs else math.nan), math.nan, math.nan
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = t_quantile(1 - (1 - LEVEL) / looks, len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def judge(
    ratios: Sequence[float],
    min_gain: float = MIN_GAIN,
    min_pairs: int = MIN_PAIRS,
    max_pairs: int = MAX_PAIRS,
) -> Verdict:
    """The rule: ``"kept"``, ``"ruled out"``, ``"undecided"``, or ``"more"`` (measure one more pair).

    Args:
        ratios: images/s new / old of each pair measured so far.
        min_gain: the smallest relative gain that counts.
        min_pairs: pairs before the rule decides.
        max_pairs: pairs after which a change is undecided.
    """
    gain, lower, upper = bounds(ratios, max_pairs - min_pairs + 1)
    verdict = Verdict.MORE
    if gain > 1 + min_gain and lower > 1:
        verdict = Verdict.KEPT
    elif upper < 1 + min_gain:
        verdict = Verdict.RULED_OUT
    if len(ratios) < min_pairs:
        verdict = Verdict.MORE
    if verdict == Verdict.MORE and len(ratios) >= max_pairs:
        return Verdict.UNDECIDED
    return verdict


def undisturbed(rates: Sequence[tuple[float, float]], factor: str = "", limit: float = 1.5) -> list[int]:
    """Indices of the pairs ``(new, old)`` (images/s) to judge for ``factor``: all for ``"num_workers"``
    or while under 4 are *fast* (no side under ``1 / limit`` of its fastest window, relative to the
    other); else those within ``limit`` times or 6 standard deviations of the fast pairs' mean log ratio.
    Symmetric; noisy pairs stay.

    Args:
        rates: images/s ``(new, old)`` of each pair.
        factor: the factor measured.
        limit: how many times slower than the fastest a window may be and still count as fast.
    """
    best = math.log(max((n for n, _ in rates), default=1.0) / max((o for _, o in rates), default=1.0))
    logs = [math.log(n / o) for n, o in rates]
    fast = [x for x in logs if abs(x - best) <= math.log(limit)]
    far = math.inf
    if len(fast) >= 4 and factor != "num_workers":
        far = max(math.log(limit), 6 * statistics.stdev(fast))
    return [i for i, x in enumerate(logs) if abs(x - statistics.fmean(fast or [0.0])) <= far]


def window_rate(steps: Sequence[tuple[float, Any, int]], factor: str = "") -> float:
    """Images/s of a window's steps ``(seconds, ..., images)`` measuring ``factor``, without its slowest
    step (per image, from 3 steps; not for ``"num_workers"``, whose stalls are what it removes): a
    disturbance only ever slows steps, so one disturbed step no longer decides a pair.

    Args:
        steps: the window's steps, ``(seconds, ..., images)`` each.
        factor: the factor measured.
    """
    trim = -1 if factor != "num_workers" and len(steps) > 2 else None
    kept = sorted(steps, key=lambda s: s[0] / max(s[-1], 1))[:trim]
    return sum(s[-1] for s in kept) / sum(s[0] for s in kept)


def budget_seconds(
    planned_batches: Optional[int], step_s: float, budget: float, max_seconds: float
) -> float:
    """The time budget in seconds: a share of the planned run's ``planned_batches x step_s`` seconds,
    at most ``max_seconds``.

    Args:
        planned_batches: the planned run's batches; ``None`` or 0: no planned length (the budget is
            ``max_seconds``).
        step_s: seconds per batch with the current settings.
        budget: the share (0-1] of the planned run.
        max_seconds: the cap.
    """
    if not planned_batches:
        return max_seconds
    return min(max_seconds, budget * planned_batches * step_s)


@dataclass(frozen=True)
class Decision:
    """How the value of one factor was decided against the value in use. The table, JSON and
    sentences come from it.

    Attributes:
        factor: one of :data:`FACTORS`.
        value: the value tried.
        against: the value in use.
        verdict: a :class:`~lightning_efficient.tuning.records.Verdict`.
        ratios: images/s new / old of each pair of windows.
        reason: one sentence saying why.
    """

    factor: str
    value: Any
    against: Any
    verdict: str
    ratios: tuple[float, ...] = ()
    reason: str = ""

    @property
    def gain(self) -> float:
        """Geometric mean of :attr:`ratios` (NaN without pairs)."""
        return bounds(self.ratios)[0]

    @property
    def interval(self) -> tuple[float, float]:
        """The rule's ``(lower, upper)`` bounds of :attr:`gain` (NaN below :data:`MIN_PAIRS` pairs)."""
        if len(self.ratios) < MIN_PAIRS:
            return math.nan, math.nan
        return bounds(self.ratios)[1:]

    def describe(self) -> str:
        """E.g. ``"1.12x over 4 pairs (bounds 1.05-1.19x)"``."""
        lo, hi = self.interval
        span = f" (bounds {lo:.2f}-{hi:.2f}x)" if math.isfinite(lo) else ""
        pairs = f"{len(self.ratios)} pair{'s' * (len(self.ratios) != 1)}"
        return f"{self.gain:.2f}x over {pairs}{span}"


def measure_again(
    result: Any, planned_batches: Optional[int], budget: float, max_seconds: float
) -> bool:
    """Whether a stored result is measured again rather than reused: it left factors to ``recipe()``'s
    defaults (over budget) that the budget of the plan now could measure (a budget over
    :data:`REMEASURE` times the stored one).

    Args:
        result: the stored :class:`~lightning_efficient.TuneResult`.
        planned_batches: the batches of the run planned now (``None``: no planned length).
        budget: the share of it asked for now.
        max_seconds: the cap asked for now.
    """
    now = budget_seconds(planned_batches, result.baseline.step_s, budget, max_seconds)
    return bool(result.by_rule()) and now > REMEASURE * result.budget_s


def plan_options(device: str, precision: str, asked: Asked, loader: Any) -> Options:
    """The values to try per factor on ``device`` with the run's ``precision`` and training ``loader``
    (``None``: built inside the Trainer), ``recipe()``'s default of each (where it is among them), and
    notes.

    Args:
        device: ``"cuda"`` or ``"cpu"``.
        precision: the run's Lightning precision.
        asked: what :func:`~lightning_efficient.tune` was asked to measure.
        loader: the training DataLoader; ``None``: built inside the Trainer.
    """
    notes: list[str] = []
    precisions, workers, cpus = asked.precisions, asked.num_workers, available_cpus()
    native = torch.cuda.is_bf16_supported() if device == "cuda" else cpu_has_native_bf16()
    if precisions is None:
        precisions = ["32-true"] + ["bf16-mixed"] * native + ["16-mixed"] * (device == "cuda")
        emulated = "bf16-mixed not measured: emulated here (no AVX512-BF16/AMX); list it in precisions="
        notes += [emulated] * (not native)
    why = (
        can_rebuild(loader) if loader is not None else "the training loader is built inside the Trainer"
    )
    if workers is not False and why:
        notes.append(f"num_workers not measured: {why}")
        if workers not in (None, True):
            fix = "set num_workers in your loader"
            rank_zero_warn(f"tune(num_workers={list(workers)}): not measured ({why}); {fix}.")
    counts = {0, cpus // 4, cpus // 2, max(cpus - 1, 0)}
    if workers not in (None, True, False):
        counts = set(workers)
    compiled = asked.compile if asked.compile is not None else device == "cuda"
    notes += ["torch.compile not measured (by default on CUDA only; ask for it to measure it)"] * (
        not compiled
    )
    values: dict[str, list[Any]] = {
        "precision": list(dict.fromkeys([precision, *precisions])),
        "compile": [False, True] * compiled,
        "num_workers": sorted(counts) * (workers is not False and not why),
        "channels_last": [False, True] * asked.channels_last,
    }
    defaults = {"precision": recommended_precision(device), "channels_last": True, "compile": False}
    defaults["num_workers"] = suggest_loader_kwargs(cuda=device == "cuda").kwargs["num_workers"]
    return Options(values, {k: v for k, v in defaults.items() if v in values[k]}, notes)


def search(
    current: Candidate,
    options: Mapping[str, Sequence[Any]],
    defaults: Mapping[str, Any],
    pair_cost: Callable[[Request, float], float],
    budget: float = 0.05,
    max_seconds: float = 60.0,
    min_gain: float = MIN_GAIN,
) -> Generator[Request, Any, tuple[Candidate, list[Decision], Window, float]]:
    """Decide each factor by the rule (the module docstring) within :func:`budget_seconds` of the
    baseline's plan: a generator that yields each :class:`~lightning_efficient.tuning.records.Request`
    and is sent its answer.

    Args:
        current: the settings in use, measured first (``"baseline"``).
        options: the values to try per factor.
        defaults: ``recipe()``'s value per factor, applied where none was measured.
        pair_cost: ``pair_cost(request, step_s)``: a first pair's seconds at ``step_s`` per batch (the
            baseline's over the kept gains).
        budget: the share (0-1] of the planned run to spend.
        max_seconds: the budget's cap, and the budget without a planned length.
        min_gain: the smallest relative gain that counts.

    Returns:
        ``(chosen, decisions, baseline, budget_s)``, as the generator's return value.

    Raises:
        MeasurementError: the baseline failed.
    """
    base: Window = yield Request(RequestKind.BASELINE, current, current)
    plan_s = (base.planned_batches or math.nan) * base.step_s
    budget_s = budget_seconds(base.planned_batches, base.step_s, budget, max_seconds)
    elapsed, best, decisions = base.elapsed_s, current, list[Decision]()

    def at(cand: Candidate, factor: str) -> Candidate:
        """``cand`` with the factors measured after ``factor`` at recipe()'s defaults."""
        later = FACTORS[FACTORS.index(factor) + 1 :]
        return replace(cand, **{f: defaults[f] for f in later if f in defaults and options.get(f)})

    def need(factor: str, value: Any) -> tuple[float, str]:
        """Seconds for ``min_pairs`` pairs of a change, or why none are needed."""
        faster = math.prod(d.gain for d in decisions if d.verdict == Verdict.KEPT)
        wait = min(base.data_wait * faster, 1.0)
        most = 1 / max(1 - wait, 1e-9)  # Amdahl: more workers at most remove the wait
        if factor == "num_workers" and value > (best.num_workers or 0) and most < 1 + min_gain:
            waited = f"the steps waited for data {wait:.1%} of the time"
            return 0.0, f"{waited}: more workers gain at most {most:.3f}x"
        old = at(best, factor)
        request = Request(RequestKind.PAIR, replace(old, **{factor: value}), old, factor)
        return SLACK * MIN_PAIRS * pair_cost(request, base.step_s / faster), ""

    for factor in FACTORS:
        tried = [getattr(current, factor), getattr(best, factor)]
        for value in (v for v in options.get(factor, ()) if v not in tried):
            old, (first, free) = at(best, factor), need(factor, value)
            new = replace(old, **{factor: value})
            later = [(f, v) for f in FACTORS[FACTORS.index(factor) + 1 :] for v in options.get(f, ())]
            reserve = sum(need(f, v)[0] for f, v in later if v != getattr(current, f))
            left = budget_s - elapsed
            if free or left < first:
                over = f"{MIN_PAIRS} pairs take ~{first / SLACK:.1f} s, {max(left, 0):.1f} s left"
                why = free or f"over budget: {over}"
                verdict = Verdict.RULED_OUT if free else Verdict.NOT_MEASURED
                decisions.append(Decision(factor, value, getattr(old, factor), verdict, (), why))
                continue
            ratios, costs = list[float](), list[float]()  # the judged ratios, each pair's seconds
            verdict, why, again = Verdict.MORE, f"{MAX_PAIRS} pairs", 0
            rates = list[tuple[float, float]]()  # images/s of each pair's new and old windows
            while verdict == Verdict.MORE:
                try:
                    pair: Pair = yield Request(RequestKind.PAIR, new, old, factor, len(costs))
                except MeasurementError as err:
                    verdict, why = Verdict.FAILED, str(err)
                    break
                costs, elapsed = [*costs, max(pair.elapsed_s - elapsed, 0.0)], pair.elapsed_s
                compile_s = math.nan
                if factor == "compile":
                    compile_s = max(pair.new_warmup_s - pair.old_warmup_s, 0.0)
                amortised = 1.0
                if math.isfinite(plan_s + compile_s):
                    amortised = plan_s / (plan_s + compile_s)
                rates.append((pair.new_rate * amortised, pair.old_rate))
                ratios = [rates[i][0] / rates[i][1] for i in undisturbed(rates, factor)]
                verdict, again = judge(ratios, min_gain), len(rates) - len(ratios)
                kept_back = reserve * (len(ratios) >= MIN_PAIRS)
                if verdict == Verdict.MORE and elapsed + SLACK * max(costs) > budget_s - kept_back:
                    toward = factor in defaults and (bounds(ratios)[0] >= 1) == (
                        defaults[factor] == value
                    )
                    verdict = Verdict.NOT_MEASURED if toward else Verdict.UNDECIDED
                    why = "the budget ran out"
            d = Decision(factor, value, getattr(old, factor), verdict, tuple(ratios))
            text = {
                Verdict.KEPT: "kept",
                Verdict.RULED_OUT: f"no gain above {min_gain:.0%}",
                Verdict.FAILED: f"failed: {why}",
                Verdict.NOT_MEASURED: "over budget before the rule decided: recipe()'s default applies",
            }
            reason = text.get(verdict, f"undecided after {why}; the setting in use stays")
            redone = f" ({again} disturbed pair{'s' * (again > 1)} measured again)"
            reason += redone * bool(ratios and again)
            decisions.append(replace(d, reason=f"{d.describe()}: {reason}" if ratios else reason))
            best = replace(best, **{factor: value}) if verdict == Verdict.KEPT else best
        verdicts = {d.verdict for d in decisions if d.factor == factor}
        if factor in defaults and verdicts == {Verdict.NOT_MEASURED}:
            best = replace(best, **{factor: defaults[factor]})  # recipe()'s default, until a longer plan
    return best, decisions, base, budget_s
