"""What :func:`~lightning_efficient.tune` chose (:class:`TuneResult`), reused while nothing it depends on changed:
its :func:`fingerprint` holds the model's architecture (parameter and buffer names, shapes, dtypes), the data (dataset
class and length, the first sample's shapes and dtypes through the collate function), the loader's settings, the kept
callbacks (types, settings), the Trainer arguments that change a step's cost, hardware and software (``machine_info``),
the candidates, ``min_gain``. In ``<cache>/tune/<hash>.json``, ``<cache>``: ``$LIGHTNING_EFFICIENT_CACHE`` or XDG's."""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, TypeVar

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from lightning_utilities.core.rank_zero import rank_zero_only, rank_zero_warn

from lightning_efficient.data.loader import with_num_workers
from lightning_efficient.doctor import machine_info
from lightning_efficient.functional.tuning import Candidate, Decision, Window, compile_submodules

FORMAT, ENV = 5, "LIGHTNING_EFFICIENT_CACHE"  #: the files' format (a new rule, a new one), the variable moving them
STEP_COST_ARGS = ("accelerator", "devices", "num_nodes", "strategy", "precision", "accumulate_grad_batches")
RECENT: list["TuneResult"] = []  #: this process's results, newest last (kept with cache=False too)
ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)  #: prepare_model() returns the model it was given


@dataclass
class TuneResult:
    """What :func:`~lightning_efficient.tune` measured and chose.

    Attributes:
        current: the user's settings as given; ``chosen``: the settings to train with.
        decisions: one :class:`~lightning_efficient.functional.tuning.Decision` per value tried, in order.
        baseline: what the current settings measured, a :class:`~lightning_efficient.functional.tuning.Window`.
        budget_s: the time budget; ``tuning_s``: seconds tune() took (reused: the lookup's); ``reused_from``: the
            cache file; ``machine``: :func:`~lightning_efficient.doctor.machine_info` where it was measured;
            ``arch``: the model's architecture key (:func:`arch_key`); ``notes``: remarks.
    """

    current: Candidate
    chosen: Candidate
    decisions: list[Decision]
    baseline: Window = field(default_factory=lambda: Window(math.nan, math.nan, 0, 0.0))
    budget_s: float = math.nan
    tuning_s: float = math.nan
    reused_from: Optional[str] = None
    machine: dict[str, Any] = field(default_factory=dict)
    arch: str = ""
    notes: list[str] = field(default_factory=list)
    precision = property(lambda self: self.chosen.precision, doc="The chosen Lightning precision string.")
    channels_last = property(lambda self: self.chosen.channels_last, doc="Whether to add ChannelsLast.")
    compile = property(lambda self: self.chosen.compile, doc="Whether prepare_model() compiles the model.")
    num_workers = property(lambda self: self.chosen.num_workers, doc="The chosen num_workers (None: the loader's).")

    @property
    def speedup(self) -> float:
        """Estimated images/s of the chosen settings over the current ones: the product of the kept gains."""
        return math.prod(d.gain for d in self.decisions if d.verdict == "kept")

    def measured(self) -> list[str]:
        """Factors decided by measurement (pairs or the data-wait bound)."""
        return sorted({d.factor for d in self.decisions if d.verdict != "not measured"})

    def by_rule(self) -> list[str]:
        """Factors not measured (over budget), so decided by ``recipe()``'s defaults."""
        return sorted({d.factor for d in self.decisions} - set(self.measured()))

    def recipe_kwargs(self) -> dict[str, Any]:
        """``{"precision": ..., "channels_last": ...}`` for :func:`~lightning_efficient.recipe`."""
        return {"precision": self.chosen.precision, "channels_last": self.chosen.channels_last}

    def table(self) -> str:
        """The decisions as a Markdown table, one row per value tried against the value in use."""
        lines = ["| factor | tried | in use | pairs | gain | bounds | verdict |", "|---|---|---|---:|---:|---|---|"]
        for d in self.decisions:
            (lo, hi), gain = d.interval, f"{d.gain:.2f}x" if d.ratios else "-"
            span = f"{lo:.2f}-{hi:.2f}x" if math.isfinite(lo) else "-"
            verdict = d.verdict + f": default {getattr(self.chosen, d.factor)}" * (d.verdict == "not measured")
            lines.append(f"| {d.factor} | {d.value} | {d.against} | {len(d.ratios)} | {gain} | {span} | {verdict} |")
        return "\n".join(lines)

    def __str__(self) -> str:
        base, head = self.baseline, f"tune(): {self.chosen.label()}"
        if self.reused_from:
            head += f", reused from {self.reused_from} (found in {self.tuning_s:.2f} s)"
        else:
            plan = f"{base.planned_batches} planned batches" if base.planned_batches else "no planned length"
            gain = f"estimated {self.speedup:.2f}x the images/s of {self.current.label()}" * bool(self.measured())
            head += f" ({gain or 'nothing measured: the defaults of recipe()'}); tuning took"
            head += f" {self.tuning_s:.1f} s of a {self.budget_s:.1f} s budget ({plan}, {base.step_s:.3f} s per batch)"
        lines = [f"- {d.factor}={d.value!r}: {d.reason}" for d in self.decisions] + [f"- {n}" for n in self.notes]
        return "\n".join([head, "", self.table(), "", *lines])

    def to_dict(self) -> dict[str, Any]:
        """The result as plain data (NaN stays NaN, which :mod:`json` writes and reads); :meth:`from_dict` reads it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TuneResult":
        """The result :meth:`to_dict` wrote; raises KeyError, TypeError or ValueError if ``data`` is not such a dict."""
        kw = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        kw |= {k: kind(**data[k]) for k, kind in (("current", Candidate), ("chosen", Candidate), ("baseline", Window))}
        return cls(**{**kw, "decisions": [Decision(**{**d, "ratios": tuple(d["ratios"])}) for d in data["decisions"]]})

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text (``kwargs`` go to :func:`json.dumps`, default ``indent=2``)."""
        return json.dumps(self.to_dict(), **{"indent": 2, **kwargs})

    def prepare_model(self, model: ModuleT) -> ModuleT:
        """``model``, its submodules compiled in place if compiling was chosen (returned either way)."""
        if self.chosen.compile:
            compile_submodules(model)
        return model

    def dataloader(self, loader: Any) -> Any:
        """``loader`` rebuilt with the chosen ``num_workers`` (same dataset, sampler, collate...), or ``loader``."""
        workers = self.chosen.num_workers
        return loader if workers in (None, getattr(loader, "num_workers", None)) else with_num_workers(loader, workers)


def cache_dir() -> Path:
    """Where tune() keeps its decisions (see the module docstring)."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get(ENV) or xdg / "lightning_efficient") / "tune"


def arch_key(module: torch.nn.Module) -> str:
    """A hash of the shapes of ``module``'s parameters and buffers, without names: the same network under another
    attribute name (``self.model`` or ``self.net``) has the same key."""
    shapes = [list(t.shape) for t in [*module.parameters(), *module.buffers()]]
    return hashlib.sha256(json.dumps(shapes).encode()).hexdigest()[:16]


def fingerprint(model: Any, loader: Any, callbacks: list[Any], kwargs: Mapping[str, Any], options: Any) -> Any:
    """What a decision depends on (the module docstring), or ``None`` where the training loader is not known."""
    if loader is None:
        return None
    data = getattr(loader, "dataset", loader)
    try:
        first = data[0] if hasattr(data, "__getitem__") else next(iter(data))
        collate = getattr(loader, "collate_fn", None) or (lambda x: x)
        sample = apply_to_collection(collate([first]), torch.Tensor, lambda t: [list(t.shape), str(t.dtype)])
    except Exception as err:  # noqa: BLE001 - no sample to describe: the data part says so
        sample = f"no sample: {type(err).__name__}"
    simple = (int, float, str, bool, type(None))
    kept = [[type(c).__qualname__, {k: v for k, v in vars(c).items() if isinstance(v, simple)}] for c in callbacks]
    keys = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "drop_last")
    settings = [getattr(loader, k, None) for k in keys] + [type(getattr(loader, "sampler", None)).__qualname__]
    return {
        "model": [[n, list(t.shape), str(t.dtype)] for n, t in [*model.named_parameters(), *model.named_buffers()]],
        "data": [type(data).__qualname__, len(data) if hasattr(data, "__len__") else None, sample],
        "loader": [*settings, getattr(getattr(loader, "collate_fn", None), "__qualname__", None)],
        "callbacks": kept,
        "trainer": {k: str(kwargs.get(k)) for k in STEP_COST_ARGS},
        "options": options,
        "machine": machine_info(),
        "arch": arch_key(model),
    }


class Store:
    """The cache file of one fingerprint (``None``, or ``enabled=False``: nothing is read or written)."""

    def __init__(self, fp: Optional[dict[str, Any]], enabled: bool = True) -> None:
        self.fp, self.text = fp, json.dumps(fp, sort_keys=True, default=str)
        digest = hashlib.sha256(self.text.encode()).hexdigest()[:24]
        self.path = cache_dir() / f"{digest}.json" if fp is not None and enabled else None

    def load(self, planned: Callable[[float], Optional[int]], budget: float, cap: float) -> Optional[TuneResult]:
        """The stored result; ``None`` if there is none, or it left factors unmeasured that the budget of the plan
        now (``planned(steps_per_batch)`` batches, ``budget``, capped at ``cap`` seconds) could measure (a budget
        over 1.25x the stored one), or the file is corrupt or another's (then one warning)."""
        if self.path is None or not self.path.exists():
            return None
        try:
            data = json.loads(self.path.read_text())
            if data.get("format") != FORMAT or data["fingerprint"] != json.loads(self.text):
                raise ValueError("written for other settings or by another version")
            result = TuneResult.from_dict(data["result"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            why = f"{type(err).__name__}: {err}"
            return rank_zero_warn(f"tune(): ignoring the cache file {self.path} ({why}); measuring again.")
        budget_s = min(cap, budget * result.baseline.step_s * (planned(result.baseline.steps_per_batch) or math.inf))
        return None if result.by_rule() and budget_s > 1.25 * result.budget_s else result

    def save(self, result: TuneResult) -> None:
        """Keep ``result`` for this process, and write it (global rank 0 only; an atomic rename)."""
        RECENT.append(result)
        if self.path is None or getattr(rank_zero_only, "rank", 0) != 0:  # set by Lightning at import
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=self.path.parent, suffix=".tmp", delete=False) as f:
            json.dump({"format": FORMAT, "fingerprint": self.fp, "result": result.to_dict()}, f, indent=1, default=str)
        os.replace(f.name, self.path)
