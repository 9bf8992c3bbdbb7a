"""What :func:`~lightning_efficient.tune` chose (:class:`TuneResult`), reused while nothing it depends on changed:
its :func:`fingerprint` holds what a training step costs: the model's module tree (each module's class and
configuration, as ``repr`` shows it: kernel, stride, padding, pooling; parameter and buffer names, shapes, dtypes),
the data (dataset class and length, and one real batch as the loader yields it: shapes, dtypes, the number of
images), the loader's settings, the kept callbacks (types, settings), the Trainer arguments that change a step's cost
(:data:`STEP_COST_ARGS`), hardware and software (``machine_info``, torch's threads), the candidates, ``min_gain``. A
part that cannot be read (a batch that fails to load) means no reuse: tune() measures and its notes say which part.
In ``<cache>/tune/<hash>.json``, ``<cache>``: ``$LIGHTNING_EFFICIENT_CACHE`` or XDG's. Reading and writing the
store never fails a tune(): a file that is not a decision of the current format is ignored with a warning (and
replaced), an unusable folder is one warning naming it and the fix."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, TypeVar

import torch
from lightning_utilities.core.rank_zero import rank_zero_only, rank_zero_warn

from lightning_efficient.data.loader import with_num_workers
from lightning_efficient.doctor import machine_info
from lightning_efficient.functional.tuning import FACTORS, Candidate, Decision, Window, compile_submodules

FORMAT, ENV = 6, "LIGHTNING_EFFICIENT_CACHE"  #: the files' format (a new rule, a new one), the variable moving them
#: The Trainer arguments that change a training step's cost: each reaches tune()'s measuring fits, and a change of
#: any of them measures again (``max_epochs`` and the like change the budget, not a step: see :meth:`Store.load`).
STEP_COST_ARGS = (
    "accelerator",
    "devices",
    "num_nodes",
    "strategy",
    "precision",
    "plugins",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "detect_anomaly",
    "deterministic",
    "benchmark",
    "sync_batchnorm",
)
_SIMPLE = (int, float, str, bool, type(None))
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
        """The result :meth:`to_dict` wrote.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such a dict, or a value is not of its kind (a string
                where a number belongs, ...; see :meth:`check`).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a dict of a TuneResult, got {type(data).__name__}")
        kw = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        kw |= {k: kind(**data[k]) for k, kind in (("current", Candidate), ("chosen", Candidate), ("baseline", Window))}
        decisions = [Decision(**{**d, "ratios": tuple(d["ratios"])}) for d in data["decisions"]]
        result = cls(**{**kw, "decisions": decisions})
        result.check()
        return result

    def check(self) -> None:
        """Raise ``TypeError`` naming the first field whose value is not of its kind (e.g. a cache file edited by
        hand or written by another tool): candidates of a precision string, flags and a worker count, numbers in
        the baseline window and the timings, decisions of a known factor with numeric ratios, text notes."""

        def number(value: Any, name: str, none: bool = False) -> None:
            if not (isinstance(value, numbers.Real) and not isinstance(value, bool) or none and value is None):
                raise TypeError(f"{name}: expected a number, got {value!r}")

        for name in ("current", "chosen"):
            c = getattr(self, name)
            flags = type(c.channels_last) is bool and type(c.compile) is bool
            if not (isinstance(c.precision, str) and flags and (c.num_workers is None or type(c.num_workers) is int)):
                raise TypeError(f"{name}: not a candidate of settings: {c!r}")
        for f in fields(Window):
            number(getattr(self.baseline, f.name), f"baseline.{f.name}", none=f.name == "planned_batches")
        number(self.budget_s, "budget_s")
        number(self.tuning_s, "tuning_s")
        for d in self.decisions:
            if d.factor not in FACTORS or not isinstance(d.verdict, str) or not isinstance(d.reason, str):
                raise TypeError(f"decisions: not a decision of tune(): {d!r}")
            for ratio in d.ratios:
                number(ratio, f"decisions[{d.factor}].ratios")
        if not (isinstance(self.notes, list) and all(isinstance(n, str) for n in self.notes)):
            raise TypeError(f"notes: expected a list of text, got {self.notes!r}")
        if not isinstance(self.machine, dict) or not isinstance(self.arch, str):
            raise TypeError("machine, arch: expected a dict and a text")

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
    """Where tune() keeps its decisions (see the module docstring).

    Raises:
        RuntimeError: no ``$LIGHTNING_EFFICIENT_CACHE``, no ``$XDG_CACHE_HOME`` and no home folder.
    """
    if os.environ.get(ENV):
        return Path(os.environ[ENV]) / "tune"
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return xdg / "lightning_efficient" / "tune"


def arch_key(module: torch.nn.Module) -> str:
    """A hash of the shapes of ``module``'s parameters and buffers, without names: the same network under another
    attribute name (``self.model`` or ``self.net``) has the same key."""
    shapes = [list(t.shape) for t in [*module.parameters(), *module.buffers()]]
    return hashlib.sha256(json.dumps(shapes).encode()).hexdigest()[:16]


def describe(value: Any) -> Any:
    """``value`` as plain data for a fingerprint: tensors as ``[shape, dtype]``, numbers, text, flags and ``None``
    as they are, containers element by element, any other object as its class and simple attributes."""
    if isinstance(value, torch.Tensor):
        return [list(value.shape), str(value.dtype)]
    if isinstance(value, _SIMPLE):
        return value
    if isinstance(value, Mapping):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    attrs = vars(value) if hasattr(value, "__dict__") else {}
    return [
        f"{type(value).__module__}.{type(value).__qualname__}",
        {k: v for k, v in attrs.items() if isinstance(v, _SIMPLE)},
    ]


def describe_batch(batch: Any) -> Any:
    """One batch for a fingerprint: tensors as ``[shape, dtype]`` (so the number of images too), other leaves as
    their type's name (file names and labels of a shuffled batch change from run to run; their kind does not)."""
    if isinstance(batch, torch.Tensor):
        return [list(batch.shape), str(batch.dtype)]
    if isinstance(batch, Mapping):
        return {str(k): describe_batch(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [describe_batch(v) for v in batch]
    return type(batch).__qualname__


def module_tree(model: torch.nn.Module) -> list[list[str]]:
    """Every module of ``model``: its name, class and configuration (``extra_repr``: kernel, stride, padding...)."""
    return [[name, f"{type(m).__module__}.{type(m).__qualname__}", m.extra_repr()] for name, m in model.named_modules()]


@contextlib.contextmanager
def kept_generators(loader: Any) -> Iterator[None]:
    """The states of the ``torch.Generator`` objects that drive ``loader``'s shuffling and worker seeds (the
    loader's, its sampler's, its batch sampler's sampler's) as they were: looking at a batch does not move them."""
    found = [getattr(loader, "generator", None), getattr(getattr(loader, "sampler", None), "generator", None)]
    found.append(getattr(getattr(getattr(loader, "batch_sampler", None), "sampler", None), "generator", None))
    gens = list({id(g): g for g in found if isinstance(g, torch.Generator)}.values())
    states = [g.get_state() for g in gens]
    try:
        yield
    finally:
        for g, state in zip(gens, states, strict=True):
            g.set_state(state)


def first_batch(loader: Any) -> Any:
    """The first training batch ``loader`` yields: of a DataLoader (or any iterable), or of each loader of a list,
    dict or ``CombinedLoader`` of them, in that structure (as the Trainer combines them); the loaders' generators are
    left as they were (:func:`kept_generators`)."""
    loader = getattr(loader, "iterables", loader)  # a CombinedLoader: the loaders it combines
    if isinstance(loader, Mapping):
        return {key: first_batch(value) for key, value in loader.items()}
    if isinstance(loader, (list, tuple)):
        return [first_batch(value) for value in loader]
    with kept_generators(loader):
        iterator = iter(loader)
        batch = next(iterator)
        del iterator  # the worker processes of a loader without persistent workers end here
    return batch


def fingerprint(
    model: Any, loader: Any, callbacks: list[Any], kwargs: Mapping[str, Any], options: Any
) -> tuple[Optional[dict[str, Any]], list[str]]:
    """What a decision depends on (the module docstring), and the parts that could not be read (each one sentence;
    a decision is neither reused nor stored then). ``None`` where the training loader is not known."""
    if loader is None:
        return None, []
    unreadable: list[str] = []
    data = getattr(loader, "dataset", loader)
    try:
        batch: Any = describe_batch(first_batch(loader))
    except Exception as err:  # noqa: BLE001 - any failure to load is the user's data: no reuse, and the notes say so
        batch = None
        unreadable.append(f"the data (its first batch could not be loaded: {type(err).__name__}: {err})")
    try:
        tree: Any = module_tree(model)
    except Exception as err:  # noqa: BLE001 - a module whose extra_repr() raises: its configuration is unknown
        tree = None
        unreadable.append(f"the model's module tree ({type(err).__name__}: {err})")
    kept = [[type(c).__qualname__, {k: v for k, v in vars(c).items() if isinstance(v, _SIMPLE)}] for c in callbacks]
    keys = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "drop_last")
    samplers = [type(getattr(loader, k, None)).__qualname__ for k in ("sampler", "batch_sampler")]
    settings = [getattr(loader, k, None) for k in keys] + samplers
    fp = {
        "model": [[n, list(t.shape), str(t.dtype)] for n, t in [*model.named_parameters(), *model.named_buffers()]],
        "modules": [type(model).__qualname__, tree],
        "data": [type(data).__qualname__, len(data) if hasattr(data, "__len__") else None, batch],
        "loader": [*settings, getattr(getattr(loader, "collate_fn", None), "__qualname__", None)],
        "callbacks": kept,
        "trainer": {k: describe(kwargs.get(k)) for k in STEP_COST_ARGS},
        "options": options,
        "machine": {**machine_info(), "torch_threads": torch.get_num_threads()},
        "arch": arch_key(model),
    }
    return fp, unreadable


class Store:
    """The cache file of one fingerprint (``None``, ``enabled=False``, a part that could not be read, or no cache
    folder: nothing is read or written)."""

    def __init__(self, fp: Optional[dict[str, Any]], enabled: bool = True, unreadable: Optional[list[str]] = None):
        self.fp, self.text = fp, json.dumps(fp, sort_keys=True, default=str)
        digest = hashlib.sha256(self.text.encode()).hexdigest()[:24]
        self.path: Optional[Path] = None
        if fp is not None and enabled and not unreadable:
            try:
                self.path = cache_dir() / f"{digest}.json"
            except RuntimeError as err:  # no home folder: Path.home() cannot tell
                self._unusable(f"no cache folder ({err})")

    def _unusable(self, why: str) -> None:
        rank_zero_warn(
            f"tune(): cannot use the decision store: {why}. The result is returned and not stored (a later tune() "
            f"measures again). Fix: set {ENV} to a writable folder, or pass cache=False (--no-cache) to skip it."
        )

    def load(self, planned: Callable[[float], Optional[int]], budget: float, cap: float) -> Optional[TuneResult]:
        """The stored result; ``None`` if there is none, or it left factors unmeasured that the budget of the plan
        now (``planned(steps_per_batch)`` batches, ``budget``, capped at ``cap`` seconds) could measure (a budget
        over 1.25x the stored one), or the file is not a valid decision of the current format (then one warning)."""
        if self.path is None:
            return None
        try:
            if not self.path.exists():
                return None
            data = json.loads(self.path.read_text())
            if (
                not isinstance(data, dict)
                or data.get("format") != FORMAT
                or data.get("fingerprint") != json.loads(self.text)
            ):
                raise ValueError("written for other settings or by another version")
            result = TuneResult.from_dict(data["result"])
            steps = result.baseline.steps_per_batch
            budget_s = min(cap, budget * result.baseline.step_s * (planned(steps) or math.inf))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            why = f"{type(err).__name__}: {err}"
            return rank_zero_warn(f"tune(): ignoring the cache file {self.path} ({why}); measuring again.")
        return None if result.by_rule() and budget_s > 1.25 * result.budget_s else result

    def save(self, result: TuneResult) -> None:
        """Keep ``result`` for this process, and write it (global rank 0 only; written to a temporary file, then
        renamed over the old one). A folder that cannot be written is one warning, never an error."""
        RECENT.append(result)
        if self.path is None or getattr(rank_zero_only, "rank", 0) != 0:  # set by Lightning at import
            return
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.path.parent, suffix=".tmp", delete=False) as f:
                tmp = f.name
                json.dump(
                    {"format": FORMAT, "fingerprint": self.fp, "result": result.to_dict()}, f, indent=1, default=str
                )
            os.replace(tmp, self.path)
        except OSError as err:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            self._unusable(f"writing {self.path} failed ({type(err).__name__}: {err})")
