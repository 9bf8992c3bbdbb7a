"""What :func:`~lightning_efficient.tune` chose: :class:`TuneResult`, its table and text, its JSON, and
how to apply it (``recipe(tune=result)``, :meth:`TuneResult.prepare_model`,
:meth:`TuneResult.dataloader`)."""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Optional, TypeVar

import torch

from lightning_efficient.data.loader import with_num_workers
from lightning_efficient.tuning.policy import FACTORS, Decision
from lightning_efficient.tuning.records import NO_WINDOW, Candidate, Verdict, Window

ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)  #: prepare_model() returns the model it was given

__all__ = ["TuneResult", "compile_submodules"]


def compile_submodules(module: Any, **compile_kwargs: Any) -> list[str]:
    """Compile in place (``nn.Module.compile``) every direct child of ``module`` that holds parameters,
    or ``module`` itself if none does; returns their names. Lightning calls ``training_step`` directly,
    which may call ``self.model(x)`` rather than ``self(x)``: compiling the children covers both.
    State-dict keys are unchanged."""
    names = [name for name, child in module.named_children() if any(True for _ in child.parameters())]
    for name in names or [""]:
        module.get_submodule(name).compile(**compile_kwargs)
    return names


@dataclass
class TuneResult:
    """What :func:`~lightning_efficient.tune` measured and chose.

    Attributes:
        current: the user's settings as given (a :class:`~lightning_efficient.tuning.records.Candidate`:
            precision, channels_last, compile, num_workers).
        chosen: the settings to train with, a :class:`~lightning_efficient.tuning.records.Candidate`
            (also as :attr:`precision`, :attr:`channels_last`, :attr:`compile`, :attr:`num_workers`).
        decisions: one :class:`~lightning_efficient.tuning.policy.Decision` per value tried, in order.
        baseline: what the current settings measured, a
            :class:`~lightning_efficient.tuning.records.Window`
            (:data:`~lightning_efficient.tuning.records.NO_WINDOW`: nothing measured).
        budget_s: the time budget in seconds (a share of the planned run, capped by ``max_seconds``).
        tuning_s: the seconds tune() took; for a reused decision, those of the lookup.
        reused_from: the cache file the decision was read from; ``None``: measured in this call.
        machine: where it was measured: :func:`~lightning_efficient.doctor.machine_info` (CPU, GPU,
            versions).
        arch: the model's architecture key (:func:`~lightning_efficient.tuning.store.arch_key`), part of
            the cache key.
        notes: remarks in words (e.g. callbacks left out of the measuring fits), also printed by
            ``str()``.
    """

    current: Candidate = Candidate()
    chosen: Candidate = Candidate()
    decisions: list[Decision] = field(default_factory=list)
    baseline: Window = NO_WINDOW
    budget_s: float = math.nan
    tuning_s: float = math.nan
    reused_from: Optional[str] = None
    machine: dict[str, Any] = field(default_factory=dict)
    arch: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def precision(self) -> str:
        """The chosen Lightning precision string."""
        return self.chosen.precision

    @property
    def channels_last(self) -> bool:
        """Whether to add ChannelsLast."""
        return self.chosen.channels_last

    @property
    def compile(self) -> bool:
        """Whether prepare_model() compiles the model."""
        return self.chosen.compile

    @property
    def num_workers(self) -> Optional[int]:
        """The chosen num_workers (None: the loader's)."""
        return self.chosen.num_workers

    @property
    def speedup(self) -> float:
        """Estimated images/s of the chosen settings over the current ones: the product of the kept
        gains."""
        return math.prod(d.gain for d in self.decisions if d.verdict == Verdict.KEPT)

    def measured(self) -> list[str]:
        """Factors decided by measurement (pairs or the data-wait bound)."""
        return sorted({d.factor for d in self.decisions if d.verdict != Verdict.NOT_MEASURED})

    def by_rule(self) -> list[str]:
        """Factors not measured (over budget), so decided by ``recipe()``'s defaults."""
        return sorted({d.factor for d in self.decisions} - set(self.measured()))

    def recipe_kwargs(self) -> dict[str, Any]:
        """``{"precision": ..., "channels_last": ...}`` for :func:`~lightning_efficient.recipe`."""
        return {"precision": self.chosen.precision, "channels_last": self.chosen.channels_last}

    def table(self) -> str:
        """The decisions as a Markdown table, one row per value tried against the value in use."""
        lines = [
            "| factor | tried | in use | pairs | gain | bounds | verdict |",
            "|---|---|---|---:|---:|---|---|",
        ]
        for d in self.decisions:
            (lo, hi), gain = d.interval, f"{d.gain:.2f}x" if d.ratios else "-"
            span = f"{lo:.2f}-{hi:.2f}x" if math.isfinite(lo) else "-"
            verdict = str(d.verdict)
            if d.verdict == Verdict.NOT_MEASURED:
                verdict += f": default {getattr(self.chosen, d.factor)}"
            row = [d.factor, d.value, d.against, len(d.ratios), gain, span, verdict]
            lines.append("| " + " | ".join(map(str, row)) + " |")
        return "\n".join(lines)

    def __str__(self) -> str:
        base, head = self.baseline, f"tune(): {self.chosen.label()}"
        if self.reused_from:
            head += f", reused from {self.reused_from} (found in {self.tuning_s:.2f} s)"
        else:
            plan = (
                f"{base.planned_batches} planned batches"
                if base.planned_batches
                else "no planned length"
            )
            gain = ""
            if self.measured():
                gain = f"estimated {self.speedup:.2f}x the images/s of {self.current.label()}"
            head += f" ({gain or 'nothing measured: the defaults of recipe()'}); tuning took"
            budget = f"a {self.budget_s:.1f} s budget ({plan}, {base.step_s:.3f} s per batch)"
            head += f" {self.tuning_s:.1f} s of {budget}"
        lines = [f"- {d.factor}={d.value!r}: {d.reason}" for d in self.decisions]
        lines += [f"- {n}" for n in self.notes]
        return "\n".join([head, "", self.table(), "", *lines])

    def to_dict(self) -> dict[str, Any]:
        """The result as plain data (NaN stays NaN, which :mod:`json` writes and reads);
        :meth:`from_dict` reads it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TuneResult":
        """The result :meth:`to_dict` wrote.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such a dict, or a value is not of its kind
                (a string where a number belongs, ...; see :meth:`check`).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a dict of a TuneResult, got {type(data).__name__}")
        kw = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        for name, kind in (("current", Candidate), ("chosen", Candidate), ("baseline", Window)):
            kw[name] = kind(**data[name])
        decisions = [Decision(**{**d, "ratios": tuple(d["ratios"])}) for d in data["decisions"]]
        result = cls(**{**kw, "decisions": decisions})
        result.check()
        return result

    def check(self) -> None:
        """Raise ``TypeError`` naming the first field whose value is not of its kind (e.g. a cache file
        edited by hand or written by another tool): candidates of a precision string, flags and a worker
        count, numbers in the baseline window and the timings, decisions of a known factor with numeric
        ratios, text notes."""

        def number(value: Any, name: str, none: bool = False) -> None:
            real = isinstance(value, numbers.Real) and not isinstance(value, bool)
            if not (real or none and value is None):
                raise TypeError(f"{name}: expected a number, got {value!r}")

        for name in ("current", "chosen"):
            c = getattr(self, name)
            flags = type(c.channels_last) is bool and type(c.compile) is bool
            workers = c.num_workers is None or type(c.num_workers) is int
            if not (isinstance(c.precision, str) and flags and workers):
                raise TypeError(f"{name}: not a candidate of settings: {c!r}")
        for f in fields(Window):
            number(
                getattr(self.baseline, f.name), f"baseline.{f.name}", none=f.name == "planned_batches"
            )
        number(self.budget_s, "budget_s")
        number(self.tuning_s, "tuning_s")
        for d in self.decisions:
            known = d.factor in FACTORS and isinstance(d.verdict, str) and isinstance(d.reason, str)
            if not known:
                raise TypeError(f"decisions: not a decision of tune(): {d!r}")
            for ratio in d.ratios:
                number(ratio, f"decisions[{d.factor}].ratios")
        if not (isinstance(self.notes, list) and all(isinstance(n, str) for n in self.notes)):
            raise TypeError(f"notes: expected a list of text, got {self.notes!r}")
        if not isinstance(self.machine, dict) or not isinstance(self.arch, str):
            raise TypeError("machine, arch: expected a dict and a text")

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text.

        Args:
            **kwargs: passed to :func:`json.dumps` (default ``indent=2``).
        """
        return json.dumps(self.to_dict(), **{"indent": 2, **kwargs})

    def prepare_model(self, model: ModuleT) -> ModuleT:
        """``model``, its submodules compiled in place if compiling was chosen (returned either way).

        Args:
            model: the LightningModule to train (the one given to :func:`~lightning_efficient.tune`).
        """
        if self.chosen.compile:
            compile_submodules(model)
        return model

    def dataloader(self, loader: Any) -> Any:
        """``loader`` rebuilt with the chosen ``num_workers`` (same dataset, sampler, collate...), or
        ``loader`` itself where that count is its own or none was chosen.

        Args:
            loader: the training DataLoader.
        """
        workers = self.chosen.num_workers
        if workers in (None, getattr(loader, "num_workers", None)):
            return loader
        return with_num_workers(loader, workers)
