"""tune()'s decision rule, its records and its search, without a Trainer or a clock.

**The rule** (written here only; the README, :func:`~lightning_efficient.tune` and the CLI link to it). A change of one
factor (:data:`FACTORS`, in that order: precision, on which the others' gains depend; then DataLoader workers, whose
``recipe()`` default is least sure and which are often ruled out for free) is measured in *pairs* of adjacent windows,
the change and the setting it would replace, in the order A B B A A B ..., with the factors before it as decided and
those after it at ``recipe()``'s defaults (where tune() measures them): the settings the run will likely train with
(on a CPU, bf16's gain depends on the layout: at 64 px a ResNet-18 gained nothing from bf16 in NCHW and ~1.1x in
channels_last, measured). Each pair gives a ratio of images/s (:func:`window_rate`), new / old. After ``min_pairs``
pairs, and after every further pair, the change is

- **kept** when the geometric mean of the ratios exceeds ``1 + min_gain`` and its lower confidence bound exceeds 1;
- **ruled out** when the upper confidence bound is below ``1 + min_gain``;
- else measured one more pair, up to ``max_pairs``; then **undecided**: the setting in use stays.

A *disturbed* pair (a side under 1 / 1.5 of its fastest window relative to the other: disturbances only ever slow) is
measured again (:func:`undisturbed`; not for workers). The bounds are one-sided Student's t bounds on the log ratios at
95% *over all the looks* (Bonferroni: each of the ``max_pairs - min_pairs + 1`` looks at ``1 - 0.05 / looks``), so that
measuring until the rule decides keeps a change that gains nothing at most 5% of the time. A change the time budget
cannot afford ``min_pairs`` pairs of is **not measured**: ``recipe()``'s default applies, and a later tune() with a
longer planned run measures it; so too when the budget runs out before the rule decides, unless the pairs so far point
away from the default (then: undecided). More DataLoader workers are ruled out without pairs when the data wait bounds
their gain below ``1 + min_gain`` (Amdahl: they can at most remove the wait). Pairs beyond ``min_pairs`` never take the
time later factors need for their own ``min_pairs`` pairs. A compilation is amortised over the planned run.

:func:`search` is a generator: it yields :class:`Request` objects and is sent :class:`Window` / :class:`Pair` answers
(or thrown :class:`MeasurementError`): the tuner measures, this module decides. Units: images/s, seconds, batches.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Mapping, Optional, Sequence

FACTORS = ("precision", "num_workers", "channels_last", "compile")  #: in the order they are measured
MIN_GAIN, MIN_PAIRS, MAX_PAIRS, LEVEL = 0.02, 3, 8, 0.95  #: the rule's defaults (see the module docstring)
SLACK = 1.1  #: a pair is measured only if 1.1x its estimate (the slowest pair so far) still fits in the budget


@dataclass(frozen=True)
class Candidate:
    """One configuration of the factors: Lightning's ``precision`` string, ``channels_last`` (the ChannelsLast
    callback), ``compile`` (:func:`compile_submodules`), the training loader's ``num_workers`` (``None``: as given)."""

    precision: str = "32-true"
    channels_last: bool = False
    compile: bool = False
    num_workers: Optional[int] = None

    def label(self) -> str:
        """Short text, e.g. ``"32-true, channels_last, workers=1"``."""
        parts = [self.precision] + ["channels_last"] * self.channels_last + ["compile"] * self.compile
        return ", ".join(parts + [f"workers={self.num_workers}"] * (self.num_workers is not None))


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for ``0.5 <= p < 1``: with ``x = sqrt(df) tan(u)``, ``P(T <= x)`` is ``1/2 + c`` times
    the integral of ``cos(u)^(df - 1)`` from 0 to ``u``; Simpson's rule and bisection (accurate to ~1e-6)."""
    c, n, lo, hi = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi), 64, 0.0, math.pi / 2
    simpson = [1 if i in (0, n) else 4 if i % 2 else 2 for i in range(n + 1)]
    for _ in range(60):
        u = (lo + hi) / 2
        below = 0.5 + c * u / n / 3 * sum(w * math.cos(i * u / n) ** (df - 1) for i, w in enumerate(simpson)) < p
        lo, hi = (u, hi) if below else (lo, u)
    return math.sqrt(df) * math.tan(lo)


def bounds(ratios: Sequence[float], looks: int = MAX_PAIRS - MIN_PAIRS + 1) -> tuple[float, float, float]:
    """``(gain, lower, upper)``: the geometric mean of ``ratios`` and its bounds at ``1 - (1 - LEVEL) / looks``
    (NaN bounds below 2 ratios, all NaN for none)."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 2:
        return (math.exp(logs[0]) if logs else math.nan), math.nan, math.nan
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = t_quantile(1 - (1 - LEVEL) / looks, len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def judge(ratios: Sequence[float], min_gain=MIN_GAIN, min_pairs=MIN_PAIRS, max_pairs=MAX_PAIRS) -> str:
    """The rule: ``"kept"``, ``"ruled out"``, ``"undecided"``, or ``"more"`` (measure one more pair)."""
    gain, lower, upper = bounds(ratios, max_pairs - min_pairs + 1)
    verdict = "kept" if gain > 1 + min_gain and lower > 1 else "ruled out" if upper < 1 + min_gain else "more"
    verdict = "more" if len(ratios) < min_pairs else verdict
    return "undecided" if verdict == "more" and len(ratios) >= max_pairs else verdict


def undisturbed(rates: Sequence[tuple[float, float]], factor: str = "", limit: float = 1.5) -> list[int]:
    """Indices of the pairs ``(new, old)`` (images/s) to judge for ``factor``: all for ``"num_workers"`` or while under
    4 are *fast* (no side under ``1 / limit`` of its fastest window, relative to the other); else those within
    ``limit`` times or 6 standard deviations of the fast pairs' mean log ratio. Symmetric; noisy pairs stay."""
    best = math.log(max((n for n, _ in rates), default=1.0) / max((o for _, o in rates), default=1.0))
    logs = [math.log(n / o) for n, o in rates]
    fast = [x for x in logs if abs(x - best) <= math.log(limit)]
    far = max(math.log(limit), 6 * statistics.stdev(fast)) if len(fast) >= 4 and factor != "num_workers" else math.inf
    return [i for i, x in enumerate(logs) if abs(x - statistics.fmean(fast or [0.0])) <= far]


def window_rate(steps: Sequence[tuple[float, Any, int]], factor: str = "") -> float:
    """Images/s of a window's steps ``(seconds, ..., images)`` measuring ``factor``, without its slowest step (per
    image, from 3 steps; not for ``"num_workers"``, whose stalls are what it removes): a disturbance only ever slows
    steps, so one disturbed step no longer decides a pair (simulated in ``tests/functional/test_tuning.py``)."""
    trim = -1 if factor != "num_workers" and len(steps) > 2 else None
    kept = sorted(steps, key=lambda s: s[0] / max(s[-1], 1))[:trim]
    return sum(s[-1] for s in kept) / sum(s[0] for s in kept)


@dataclass(frozen=True)
class Decision:
    """How the ``value`` of one ``factor`` of :data:`FACTORS` was decided ``against`` the value in use: the
    ``verdict`` (``"kept"``, ``"ruled out"``, ``"undecided"``, ``"not measured"``, ``"failed"``), images/s new / old
    of each pair of windows (``ratios``) and one sentence (``reason``). The table, JSON and sentences come from it."""

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
        return bounds(self.ratios)[1:] if len(self.ratios) >= MIN_PAIRS else (math.nan, math.nan)

    def describe(self) -> str:
        """E.g. ``"1.12x over 4 pairs (bounds 1.05-1.19x)"``."""
        lo, hi = self.interval
        span = f" (bounds {lo:.2f}-{hi:.2f}x)" if math.isfinite(lo) else ""
        return f"{self.gain:.2f}x over {len(self.ratios)} pair{'s' * (len(self.ratios) != 1)}{span}"


@dataclass(frozen=True)
class Request:
    """What :func:`search` asks for: ``"baseline"`` (``new``'s step time after a warm-up) or ``"pair"`` (pair
    ``index`` of windows of ``new`` and ``old`` for ``factor``, ``old`` first when ``index`` is even)."""

    kind: str
    new: Candidate
    old: Candidate
    factor: str = ""
    index: int = 0


@dataclass(frozen=True)
class Window:
    """The answer to ``"baseline"``, as rank 0 measured it: median seconds per batch, their share (0-1) spent waiting
    for data, images per batch, seconds since tuning began, the planned run's batches, optimizer steps per batch."""

    step_s: float
    data_wait: float
    batch_size: int
    elapsed_s: float
    planned_batches: Optional[int] = None
    steps_per_batch: float = 1.0


@dataclass(frozen=True)
class Pair:
    """The answer to ``"pair"``: images/s of ``new`` and ``old`` in adjacent windows, seconds since tuning began,
    and for separate fits each fit's warm-up seconds (where compilation happens)."""

    new_rate: float
    old_rate: float
    elapsed_s: float
    new_warmup_s: float = math.nan
    old_warmup_s: float = math.nan


class MeasurementError(Exception):
    """Thrown into :func:`search` when a requested measurement raised (the text names the error)."""


def search(
    current: Candidate,
    options: Mapping[str, Sequence[Any]],
    defaults: Mapping[str, Any],
    pair_cost: Callable[[Request, float], float],
    budget: float = 0.05,
    max_seconds: float = 60.0,
    min_gain: float = MIN_GAIN,
) -> Generator[Request, Any, tuple[Candidate, list[Decision], Window, float]]:
    """Decide each factor by the rule (the module docstring) within a time budget: ``budget`` of the planned run
    (the baseline's ``planned_batches x step_s``), at most ``max_seconds`` (the budget without a planned length).
    ``current`` is measured first (``"baseline"``); ``options``: the values to try per factor; ``defaults``:
    ``recipe()``'s value per factor, applied where none was measured; ``pair_cost(request, step_s)``: a first pair's
    seconds at ``step_s`` per batch (the baseline's over the kept gains). Returns ``(chosen, decisions, baseline,
    budget_s)``; raises MeasurementError if the baseline failed."""
    base: Window = yield Request("baseline", current, current)
    plan_s = (base.planned_batches or math.nan) * base.step_s
    budget_s = min(max_seconds, budget * plan_s) if base.planned_batches else max_seconds
    elapsed, best, decisions = base.elapsed_s, current, list[Decision]()

    def at(cand: Candidate, factor: str) -> Candidate:  # the factors measured after `factor` at recipe()'s defaults
        later = FACTORS[FACTORS.index(factor) + 1 :]
        return replace(cand, **{f: defaults[f] for f in later if f in defaults and options.get(f)})

    def need(factor: str, value: Any) -> tuple[float, str]:  # seconds for min_pairs pairs of a change, or why none
        wait = min(base.data_wait * (faster := math.prod(d.gain for d in decisions if d.verdict == "kept")), 1.0)
        most = 1 / max(1 - wait, 1e-9)  # Amdahl: more workers at most remove the wait
        if factor == "num_workers" and value > (best.num_workers or 0) and most < 1 + min_gain:
            return 0.0, f"the steps waited for data {wait:.1%} of the time: more workers gain at most {most:.3f}x"
        old = at(best, factor)
        cost = pair_cost(Request("pair", replace(old, **{factor: value}), old, factor), base.step_s / faster)
        return SLACK * MIN_PAIRS * cost, ""

    for factor in FACTORS:
        for value in (v for v in options.get(factor, ()) if v not in (getattr(current, factor), getattr(best, factor))):
            old, (first, free) = at(best, factor), need(factor, value)
            new = replace(old, **{factor: value})
            later = [(f, v) for f in FACTORS[FACTORS.index(factor) + 1 :] for v in options.get(f, ())]
            reserve = sum(need(f, v)[0] for f, v in later if v != getattr(current, f))
            if free or (left := budget_s - elapsed) < first:
                why = free or f"over budget: {MIN_PAIRS} pairs take ~{first / SLACK:.1f} s, {max(left, 0):.1f} s left"
                decisions.append(
                    Decision(factor, value, getattr(old, factor), "ruled out" if free else "not measured", (), why)
                )
                continue
            ratios, verdict, why, costs, again = list[float](), "more", f"{MAX_PAIRS} pairs", list[float](), 0
            rates = list[tuple[float, float]]()  # images/s of each pair's new and old windows
            while verdict == "more":
                try:
                    pair: Pair = yield Request("pair", new, old, factor, len(costs))
                except MeasurementError as err:
                    verdict, why = "failed", str(err)
                    break
                costs, elapsed = [*costs, max(pair.elapsed_s - elapsed, 0.0)], pair.elapsed_s
                compile_s = max(pair.new_warmup_s - pair.old_warmup_s, 0.0) if factor == "compile" else math.nan
                amortised = plan_s / (plan_s + compile_s) if math.isfinite(plan_s + compile_s) else 1.0
                rates.append((pair.new_rate * amortised, pair.old_rate))
                ratios = [rates[i][0] / rates[i][1] for i in undisturbed(rates, factor)]
                verdict, again = judge(ratios, min_gain), len(rates) - len(ratios)
                if verdict == "more" and elapsed + SLACK * max(costs) > budget_s - reserve * (len(ratios) >= MIN_PAIRS):
                    toward = factor in defaults and (bounds(ratios)[0] >= 1) == (defaults[factor] == value)
                    verdict, why = "not measured" if toward else "undecided", "the budget ran out"
            d = Decision(factor, value, getattr(old, factor), verdict, tuple(ratios))
            text = {"kept": "kept", "ruled out": f"no gain above {min_gain:.0%}", "failed": f"failed: {why}"}
            text["not measured"] = "over budget before the rule decided: recipe()'s default applies"
            reason = text.get(verdict, f"undecided after {why}; the setting in use stays")
            reason += f" ({again} disturbed pair{'s' * (again > 1)} measured again)" * bool(ratios and again)
            decisions.append(replace(d, reason=f"{d.describe()}: {reason}" if ratios else reason))
            best = replace(best, **{factor: value}) if verdict == "kept" else best
        if factor in defaults and {d.verdict for d in decisions if d.factor == factor} == {"not measured"}:
            best = replace(best, **{factor: defaults[factor]})  # recipe()'s default, until a longer plan measures it
    return best, decisions, base, budget_s


def compile_submodules(module: Any, **compile_kwargs: Any) -> list[str]:
    """Compile in place (``nn.Module.compile``) every direct child of ``module`` that holds parameters, or ``module``
    itself if none does; returns their names. Lightning calls ``training_step`` directly, which may call
    ``self.model(x)`` rather than ``self(x)``: compiling the children covers both. State-dict keys are unchanged."""
    names = [name for name, child in module.named_children() if any(True for _ in child.parameters())]
    for name in names or [""]:
        module.get_submodule(name).compile(**compile_kwargs)
    return names
