"""tune()'s measurements in EfficiencyReport's advice: a practice of the checklist as tune() measured it on this
model here (:func:`measured_check`), and the settings worth measuring when tune() has not (:func:`tune_hints`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lightning_efficient.functional.check import Check
from lightning_efficient.functional.run_facts import RunFacts, verdict


def measured_check(facts: RunFacts, factor: str, value: Any, check: Check) -> Check:
    """``check`` as tune() measured it: if ``facts.tuned`` decided ``factor`` (kept or ruled out a value against
    another) and this run uses one of the two, ``ok`` says whether the run uses the faster one (None where it
    keeps a setting tune() found no gain in), and the detail quotes the measured ratio."""
    for d in getattr(facts.tuned, "decisions", ()):
        if (
            d.factor != factor
            or d.verdict not in ("kept", "ruled out", "undecided")
            or value not in (d.value, d.against)
        ):
            continue
        measured = f"tune() measured {factor}={d.value!r} at {d.describe()} of {d.against!r} here ({d.verdict})"
        if not d.ratios:  # decided without pairs (the data-wait bound)
            measured = f"tune() {d.verdict} {factor}={d.value!r} here: {d.reason}"
        faster = d.value if d.verdict == "kept" else d.against
        ok = None if d.verdict == "undecided" or (value == faster != d.value) else value == faster
        advice = f"use {factor}={faster!r}, as tune() chose"
        return replace(check, ok=ok, detail=f"{check.detail}; {measured}", advice=advice)
    return check


def tune_hints(facts: RunFacts, data_wait_share: float) -> list[str]:
    """Settings of this run that :func:`~lightning_efficient.tune` would question, one sentence each; empty when
    tune() measured this model here (``facts.tuned``) or nothing is in doubt.

    In doubt: a 16-bit precision on a CPU where :func:`~lightning_efficient.recommended_precision` gives
    ``32-true``, ``channels_last`` on a CPU (its effect depends on the model there), and a data-bound run whose
    best ``num_workers`` is unknown.
    """
    if facts.tuned is not None:
        return []
    hints = []
    half = facts.precision in ("bf16-mixed", "16-mixed", "bf16-true", "16-true", "bf16", "16")
    if half and facts.accelerator == "cpu" and facts.recommended_precision == "32-true":
        hints.append(
            f"precision={facts.precision!r} on this CPU runs slower than '32-true' (emulated without native "
            "bf16, or measured slower here: explain_precision() says which)"
        )
    if facts.accelerator == "cpu" and facts.model_channels_last is not None and facts.model_channels_last >= 0.99:
        hints.append("channels_last on a CPU speeds up some models and slows others")
    if verdict(data_wait_share) == "data-bound" and facts.num_workers is not None:
        hints.append(f"the run is data-bound with num_workers={facts.num_workers}")
    if hints:
        hints.append(
            "measure instead of assuming: lightning_efficient.tune(model, train_loader, **trainer_kwargs) "
            "times each setting on this model and hardware (or `lightning-efficient tune` for a "
            "torchvision model)"
        )
    return hints
