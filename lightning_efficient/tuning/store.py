"""The decisions tune() keeps between processes: a :class:`~lightning_efficient.TuneResult` is reused
while nothing it depends on changed. Its :func:`fingerprint` holds what a training step costs: the
model's module tree (each module's class and configuration, as ``repr`` shows it: kernel, stride,
padding, pooling; parameter and buffer names, shapes, dtypes), the data (dataset class and length, and
one real batch as the loader yields it: shapes, dtypes, the number of images), the loader's settings, the
kept callbacks (types, settings), the Trainer arguments that change a step's cost
(:data:`STEP_COST_ARGS`), hardware and software (``machine_info``, torch's threads), the candidates,
``min_gain``. A part that cannot be read (a batch that fails to load) means no reuse: tune() measures and
its notes say which part. In ``<cache>/tune/<hash>.json``, ``<cache>``: ``$LIGHTNING_EFFICIENT_CACHE`` or
XDG's. Reading and writing the store never fails a tune(): a file that is not a decision of the current
format is ignored with a warning (and replaced), an unusable folder is one warning naming it and the fix.
:func:`latest` finds the newest decision for a model's architecture on this machine (what
EfficiencyReport quotes)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

import torch
from lightning_utilities.core.rank_zero import rank_zero_only, rank_zero_warn

from lightning_efficient.doctor import CACHE_ENV, cache_root, machine_info
from lightning_efficient.tuning.policy import measure_again
from lightning_efficient.tuning.result import TuneResult

FORMAT = 6  #: the files' format (a new rule, a new one)
ENV = CACHE_ENV  #: the variable moving the files
#: The Trainer arguments that change a training step's cost: each reaches tune()'s measuring fits, and a
#: change of any of them measures again (``max_epochs`` and the like change the budget, not a step: see
#: :meth:`Store.load`).
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
SIMPLE = (int, float, str, bool, type(None))  #: values a fingerprint keeps as they are
RECENT: list[TuneResult] = []  #: this process's results, newest last (kept with cache=False too)

__all__ = [
    "ENV",
    "FORMAT",
    "RECENT",
    "STEP_COST_ARGS",
    "Store",
    "arch_key",
    "cache_dir",
    "fingerprint",
    "latest",
]


def cache_dir() -> Path:
    """Where tune() keeps its decisions: ``tune/`` in :func:`~lightning_efficient.doctor.cache_root`.

    Raises:
        RuntimeError: no ``$LIGHTNING_EFFICIENT_CACHE``, no ``$XDG_CACHE_HOME`` and no home folder.
    """
    return cache_root() / "tune"


def arch_key(module: torch.nn.Module) -> str:
    """A hash of the shapes of ``module``'s parameters and buffers, without names: the same network under
    another attribute name (``self.model`` or ``self.net``) has the same key."""
    shapes = [list(t.shape) for t in [*module.parameters(), *module.buffers()]]
    return hashlib.sha256(json.dumps(shapes).encode()).hexdigest()[:16]


def describe(value: Any) -> Any:
    """``value`` as plain data for a fingerprint: tensors as ``[shape, dtype]``, numbers, text, flags and
    ``None`` as they are, containers element by element, any other object as its class and simple
    attributes."""
    if isinstance(value, torch.Tensor):
        return [list(value.shape), str(value.dtype)]
    if isinstance(value, SIMPLE):
        return value
    if isinstance(value, Mapping):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    attrs = vars(value) if hasattr(value, "__dict__") else {}
    return [
        f"{type(value).__module__}.{type(value).__qualname__}",
        {k: v for k, v in attrs.items() if isinstance(v, SIMPLE)},
    ]


def describe_batch(batch: Any) -> Any:
    """One batch for a fingerprint: tensors as ``[shape, dtype]`` (so the number of images too), other
    leaves as their type's name (file names and labels of a shuffled batch change from run to run; their
    kind does not)."""
    if isinstance(batch, torch.Tensor):
        return [list(batch.shape), str(batch.dtype)]
    if isinstance(batch, Mapping):
        return {str(k): describe_batch(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [describe_batch(v) for v in batch]
    return type(batch).__qualname__


def module_tree(model: torch.nn.Module) -> list[list[str]]:
    """Every module of ``model``: its name, class and configuration (``extra_repr``: kernel, stride,
    padding...)."""
    return [
        [name, f"{type(m).__module__}.{type(m).__qualname__}", m.extra_repr()]
        for name, m in model.named_modules()
    ]


@contextlib.contextmanager
def kept_generators(loader: Any) -> Iterator[None]:
    """The states of the ``torch.Generator`` objects that drive ``loader``'s shuffling and worker seeds
    (the loader's, its sampler's, its batch sampler's sampler's) as they were: looking at a batch does
    not move them."""
    found = [
        getattr(loader, "generator", None),
        getattr(getattr(loader, "sampler", None), "generator", None),
    ]
    found.append(
        getattr(getattr(getattr(loader, "batch_sampler", None), "sampler", None), "generator", None)
    )
    gens = list({id(g): g for g in found if isinstance(g, torch.Generator)}.values())
    states = [g.get_state() for g in gens]
    try:
        yield
    finally:
        for g, state in zip(gens, states, strict=True):
            g.set_state(state)


def first_batch(loader: Any) -> Any:
    """The first training batch ``loader`` yields: of a DataLoader (or any iterable), or of each loader
    of a list, dict or ``CombinedLoader`` of them, in that structure (as the Trainer combines them); the
    loaders' generators are left as they were (:func:`kept_generators`)."""
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
    """What a decision depends on (the module docstring), and the parts that could not be read (each one
    sentence; a decision is neither reused nor stored then). ``None`` where the training loader is not
    known."""
    if loader is None:
        return None, []
    unreadable: list[str] = []
    data = getattr(loader, "dataset", loader)
    try:
        batch: Any = describe_batch(first_batch(loader))
    # Any failure to load is the user's data: no reuse, and the notes say so.
    except Exception as err:  # noqa: BLE001
        batch = None
        unreadable.append(f"the data (its first batch could not be loaded: {type(err).__name__}: {err})")
    try:
        tree: Any = module_tree(model)
    # A module whose extra_repr() raises: its configuration is unknown.
    except Exception as err:  # noqa: BLE001
        tree = None
        unreadable.append(f"the model's module tree ({type(err).__name__}: {err})")
    kept = [
        [type(c).__qualname__, {k: v for k, v in vars(c).items() if isinstance(v, SIMPLE)}]
        for c in callbacks
    ]
    keys = (
        "batch_size",
        "num_workers",
        "pin_memory",
        "prefetch_factor",
        "persistent_workers",
        "drop_last",
    )
    samplers = [type(getattr(loader, k, None)).__qualname__ for k in ("sampler", "batch_sampler")]
    settings = [getattr(loader, k, None) for k in keys] + samplers
    fp = {
        "model": [
            [n, list(t.shape), str(t.dtype)]
            for n, t in [*model.named_parameters(), *model.named_buffers()]
        ],
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
    """The cache file of one fingerprint (``None``, ``enabled=False``, a part that could not be read, or
    no cache folder: nothing is read or written)."""

    def __init__(
        self, fp: Optional[dict[str, Any]], enabled: bool = True, unreadable: Optional[list[str]] = None
    ):
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
            f"tune(): cannot use the decision store: {why}. The result is returned and not stored "
            f"(a later tune() measures again). Fix: set {ENV} to a writable folder, or pass cache=False "
            "(--no-cache) to skip it."
        )

    def load(
        self, planned: Callable[[float], Optional[int]], budget: float, cap: float
    ) -> Optional[TuneResult]:
        """The stored result; ``None`` if there is none, or it left factors unmeasured that the budget of
        the plan now (``planned(steps_per_batch)`` batches, ``budget``, capped at ``cap`` seconds) could
        measure (a budget over :data:`~lightning_efficient.tuning.policy.REMEASURE` times the stored
        one), or the file is not a valid decision of the current format (then one warning)."""
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
            again = measure_again(result, planned(result.baseline.steps_per_batch), budget, cap)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            why = f"{type(err).__name__}: {err}"
            return rank_zero_warn(
                f"tune(): ignoring the cache file {self.path} ({why}); measuring again."
            )
        return None if again else result

    def save(self, result: TuneResult) -> None:
        """Keep ``result`` for this process, and write it (global rank 0 only; written to a temporary
        file, then renamed over the old one). A folder that cannot be written is one warning, never an
        error."""
        RECENT.append(result)
        if self.path is None or getattr(rank_zero_only, "rank", 0) != 0:  # set by Lightning at import
            return
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=self.path.parent, suffix=".tmp", delete=False
            ) as f:
                tmp = f.name
                json.dump(
                    {"format": FORMAT, "fingerprint": self.fp, "result": result.to_dict()},
                    f,
                    indent=1,
                    default=str,
                )
            os.replace(tmp, self.path)
        except OSError as err:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            self._unusable(f"writing {self.path} failed ({type(err).__name__}: {err})")


def latest(module: torch.nn.Module, batch_size: Optional[int] = None) -> Optional[TuneResult]:
    """tune()'s newest result for a network of ``module``'s architecture (:func:`arch_key`) on this
    machine, at ``batch_size`` images per batch where given: this process's, else the cache's; ``None``
    if none. EfficiencyReport quotes it, so that its advice never contradicts what tune() measured,
    however the user applied the choice (a later process included)."""
    key, here = arch_key(module), machine_info()

    def same(r: TuneResult) -> bool:
        sized = batch_size in (None, r.baseline.batch_size) or not r.baseline.batch_size  # 0: not known
        return r.arch == key and r.machine == here and sized

    found = [((math.inf, i), r) for i, r in enumerate(RECENT) if same(r)]
    for path in cache_dir().glob("*.json"):
        try:
            result = TuneResult.from_dict(json.loads(path.read_text())["result"])
            if same(result):
                found.append(((path.stat().st_mtime, 0), result))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return max(found, key=lambda f: f[0])[1] if found else None
