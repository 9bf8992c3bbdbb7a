"""Where training time goes: step-time bookkeeping and the practice checklist, without a Trainer.

The callback :class:`~lightning_efficient.EfficiencyReport` feeds :class:`StepTimer` from Lightning's hooks and
builds the checklist with :func:`checklist`; both are plain Python and tested on their own.

Definitions (per training batch; the exact marks and clocks are in :mod:`lightning_efficient.functional.timing`):

- *data wait*: seconds the step waited for the DataLoader to hand over the batch (around the fetch, host time).
- *device transforms*: seconds in the :class:`~lightning_efficient.pipeline.BatchPipeline` stages (GPUDecode,
  GPUAugmentation, ChannelsLast).
- *compute*: seconds from ``on_train_batch_start`` to ``on_train_batch_end`` (forward, backward, optimizer step).
- *other*: the rest of the step: the host-to-device copy, batch hooks, and other callbacks' work between steps
  (e.g. a checkpoint saved every N steps).

Host seconds on the CPU; on CUDA, device time read from CUDA events (no synchronisation during training).
"""

from __future__ import annotations

import math
import os
import resource
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Protocol

#: Data-wait share of step time at or above which a run is called data-bound.
DATA_BOUND_SHARE = 0.25


def process_rss_bytes() -> int:
    """Resident set size of this process in bytes (``/proc/self/statm``; peak RSS where that is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


#: The commands that replace stock Pillow by Pillow-SIMD built for AVX2 (PyPI has only its sdist: it needs a C
#: compiler and the libjpeg/zlib headers, e.g. ``apt-get install build-essential libjpeg-dev zlib1g-dev``; a later
#: ``pip install pillow`` silently puts stock Pillow back).
PILLOW_SIMD_INSTALL = (
    'pip uninstall -y pillow && CC="cc -mavx2" pip install --no-cache-dir --force-reinstall --no-binary :all: '
    "pillow-simd"
)


@dataclass
class StepTimer:
    """Sums of per-step times and samples, over the steps after ``skip_first``.

    Attributes:
        skip_first: number of first training batches of the fit left out of the sums (worker start-up,
            kernel selection and allocation warm-up make them unrepresentative).
        steps: training batches counted.
        samples: samples (images) counted.
        data_wait_s: seconds waiting for data (see module docstring).
        transform_s: seconds in on-device batch transforms.
        compute_s: seconds of forward, backward and optimizer step.
        other_s: seconds of the rest of the steps (batch transfer, hooks, other callbacks).
        peak_memory_bytes: peak CUDA memory allocated, or peak process RSS on CPU.
    """

    skip_first: int = 2
    seen: int = 0
    steps: int = 0
    samples: int = 0
    data_wait_s: float = 0.0
    transform_s: float = 0.0
    compute_s: float = 0.0
    other_s: float = 0.0
    peak_memory_bytes: int = 0

    def add(self, data_wait_s: float, transform_s: float, compute_s: float, samples: int, other_s: float = 0.0) -> None:
        """Record one training batch (ignored while the first ``skip_first`` batches pass)."""
        self.seen += 1
        if self.seen <= self.skip_first:
            return
        self.steps += 1
        self.samples += int(samples)
        self.data_wait_s += max(data_wait_s, 0.0)
        self.transform_s += max(transform_s, 0.0)
        self.compute_s += max(compute_s, 0.0)
        self.other_s += max(other_s, 0.0)

    @property
    def step_s(self) -> float:
        """Total measured seconds: data wait + device transforms + compute + other."""
        return self.data_wait_s + self.transform_s + self.compute_s + self.other_s

    @property
    def images_per_s(self) -> float:
        """Training throughput in samples (images) per second; NaN before any step is counted."""
        return self.samples / self.step_s if self.step_s > 0 else math.nan

    @property
    def data_wait_share(self) -> float:
        """Fraction of step time spent waiting for data, in [0, 1]; NaN before any step is counted."""
        return self.data_wait_s / self.step_s if self.step_s > 0 else math.nan

    @property
    def transform_share(self) -> float:
        """Fraction of step time spent in on-device batch transforms, in [0, 1]."""
        return self.transform_s / self.step_s if self.step_s > 0 else math.nan

    @property
    def other_share(self) -> float:
        """Fraction of step time spent outside fetch, transforms and compute (transfer, hooks, callbacks)."""
        return self.other_s / self.step_s if self.step_s > 0 else math.nan

    def as_dict(self) -> dict[str, float]:
        """The figures under stable names (``images_per_s``, ``data_wait_share``, ...)."""
        return {
            "steps": self.steps,
            "samples": self.samples,
            "images_per_s": self.images_per_s,
            "data_wait_share": self.data_wait_share,
            "transform_share": self.transform_share,
            "other_share": self.other_share,
            "step_time_s": self.step_s / self.steps if self.steps else math.nan,
            "peak_memory_mb": self.peak_memory_bytes / 2**20,
        }


@dataclass
class Check:
    """One line of a checklist (the report's practices, the doctor's environment checks).

    Attributes:
        practice: what is checked, e.g. ``"mixed precision"`` or ``"torch"``.
        ok: True (done), False (not done: ``advice`` says how), or None (does not apply / information only).
        detail: what was observed.
        advice: the concrete fix.
    """

    practice: str
    ok: Optional[bool]
    detail: str
    advice: str = ""

    def line(self, *, info_mark: str = "[-]", advice_unless_ok: bool = False) -> str:
        """``"[x] practice: detail"``; the advice follows after ``->`` where ``ok`` is False (and, with
        ``advice_unless_ok``, also where it is None), on its own line in the latter style."""
        mark = {True: "[x]", False: "[ ]", None: info_mark}[self.ok]
        text = f"{mark} {self.practice}: {self.detail}"
        if not self.advice:
            return text
        if advice_unless_ok:
            return text if self.ok is True else f"{text}\n      -> {self.advice}"
        return f"{text} -> {self.advice}" if self.ok is False else text


@dataclass
class RunFacts:
    """What the callback observed about a run, the input to :func:`checklist`.

    Attributes:
        precision: the Trainer's precision string.
        recommended_precision: what :func:`~lightning_efficient.recommended_precision` gives here.
        accelerator: ``"cuda"``, ``"cpu"``, ``"mps"``.
        model_channels_last: share of 4-D conv weights in channels_last (None: the model has none).
        inputs_channels_last: whether the 4-D float input seen at ``training_step`` was channels_last
            (None: no such input).
        lr_per_step: whether every LR scheduler steps per optimizer step (None: no scheduler).
        lr_epoch_wise: why a scheduler still steps per epoch although StepwiseLR is in the run, and the fix if
            there is one: ``(reason, fix)``, ``fix`` ``""`` where it is so by design (e.g. ReduceLROnPlateau).
        device_augmentation: a ``GPUAugmentation`` callback is active.
        cpu_augmentation: names of per-image torchvision augmentations found in the training dataset.
        num_workers: the training DataLoader's workers (None: unknown).
        cpu_cores: CPU cores available to each process.
        suggested_workers: DataLoader workers to recommend (default: ``cpu_cores``); the callback takes it from
            :func:`~lightning_efficient.data.loader.suggest_loader_kwargs`.
        pin_memory, persistent_workers: the training DataLoader's settings (None: unknown).
        pillow_simd: whether the installed PIL is Pillow-SIMD.
        decodes_images: whether the training dataset decodes image files (ImageFolder-like).
        epochs: training epochs run.
        image_side: the side of the last training images under ProgressiveResize, pixels (None: not resized);
            ``images_per_s_by_side``: ``(side, training images/s)`` per side it trained at.
        tuned: what :func:`~lightning_efficient.tune` measured for this model on this machine (an object with
            ``decisions``, e.g. a ``TuneResult``), or ``None``: where it decided a setting, the checklist quotes
            the measured ratio instead of the general advice.
    """

    precision: str
    recommended_precision: str
    accelerator: str
    model_channels_last: Optional[float] = None
    inputs_channels_last: Optional[bool] = None
    lr_per_step: Optional[bool] = None
    lr_epoch_wise: Optional[tuple[str, str]] = None
    device_augmentation: bool = False
    cpu_augmentation: tuple[str, ...] = ()
    num_workers: Optional[int] = None
    cpu_cores: int = 1
    suggested_workers: Optional[int] = None
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    pillow_simd: bool = False
    decodes_images: bool = False
    epochs: int = 1
    image_side: Optional[int] = None
    images_per_s_by_side: tuple[tuple[int, float], ...] = ()
    tuned: Any = None


class ReportsEfficiencyFacts(Protocol):
    """How a callback tells :class:`~lightning_efficient.EfficiencyReport` what it does (instead of type tests).

    A callback (ours or a user's) that implements ``efficiency_facts`` returns :class:`RunFacts` field values it is
    responsible for, e.g. ``{"device_augmentation": True}`` (GPUAugmentation) or ``{"lr_per_step": True}``
    (StepwiseLR); the report applies them over what it observed itself. Unknown keys raise ``TypeError`` when the
    report builds its :class:`RunFacts`.
    """

    def efficiency_facts(self) -> Mapping[str, Any]: ...


def verdict(data_wait_share: float) -> str:
    """``"data-bound"`` at or above :data:`DATA_BOUND_SHARE` of step time spent waiting, else ``"compute-bound"``."""
    if math.isnan(data_wait_share):
        return "unknown (no step measured)"
    return "data-bound" if data_wait_share >= DATA_BOUND_SHARE else "compute-bound"


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
        return Check(check.practice, ok, f"{check.detail}; {measured}", f"use {factor}={faster!r}, as tune() chose")
    return check


def checklist(facts: RunFacts, data_wait_share: float) -> list[Check]:
    """The practices, each checked, with a concrete recommendation where one fails.

    Args:
        facts: what was observed about the run.
        data_wait_share: fraction of step time spent waiting for data, in [0, 1] (NaN if unknown).

    Returns:
        One :class:`Check` per practice, in a fixed order: the data-wait verdict first.
    """
    bound = verdict(data_wait_share)
    data_bound = bound == "data-bound"
    pct = f"{100 * data_wait_share:.0f}%" if not math.isnan(data_wait_share) else "?"
    workers = facts.suggested_workers if facts.suggested_workers is not None else facts.cpu_cores
    if data_bound and facts.cpu_cores >= 2:
        workers = max(workers, 1)  # waiting for data: one worker overlaps loading with the step, even on the CPU
    checks = []

    fixes = []
    if facts.cpu_augmentation and not facts.device_augmentation:
        fixes.append("move augmentation to GPUAugmentation")
    if facts.num_workers is not None and facts.num_workers < workers and facts.tuned is None:
        fixes.append(f"raise num_workers to {workers}")
    if facts.decodes_images and not facts.pillow_simd:
        fixes.append("decode with FastImageFolder (reduced-size JPEG decode) or install Pillow-SIMD")
    if not fixes:
        fixes.append("cache decoded images or use smaller inputs")
    checks.append(
        Check(
            "input pipeline keeps up",
            not data_bound if bound != "unknown (no step measured)" else None,
            f"{pct} of step time is spent waiting for data ({bound})",
            " or ".join(fixes),
        )
    )

    mixed = facts.precision in ("bf16-mixed", "16-mixed", "bf16-true", "16-true", "bf16", "16")
    ok = mixed or facts.recommended_precision == "32-true"
    detail = f"precision={facts.precision!r}" + (
        ""
        if mixed
        else ": no 16-bit mixed precision runs natively on this hardware"
        if facts.recommended_precision == "32-true"
        else f" (this hardware runs {facts.recommended_precision!r} natively)"
    )
    advice = f"Trainer(precision={facts.recommended_precision!r}) or Trainer(**recipe())"
    checks.append(measured_check(facts, "precision", facts.precision, Check("mixed precision", ok, detail, advice)))
    if facts.model_channels_last is None:
        checks.append(Check("model channels_last", None, "no 4-D conv weights"))
    else:
        ok = facts.model_channels_last >= 0.99
        detail = f"{100 * facts.model_channels_last:.0f}% of 4-D conv weights are channels_last"
        check = Check("model channels_last", ok, detail, "add the ChannelsLast() callback")
        checks.append(measured_check(facts, "channels_last", ok, check))
    if facts.inputs_channels_last is None:
        checks.append(Check("inputs channels_last", None, "no 4-D float input seen"))
    else:
        ok = facts.inputs_channels_last
        detail = "image batches reach training_step in " + ("channels_last (NHWC)" if ok else "NCHW")
        advice = "add the ChannelsLast() callback (it converts every 4-D float batch tensor)"
        checks.append(measured_check(facts, "channels_last", ok, Check("inputs channels_last", ok, detail, advice)))
    if facts.lr_per_step is None:
        checks.append(Check("LR stepped per optimizer step", None, "no LR scheduler"))
    elif not facts.lr_per_step and facts.lr_epoch_wise:  # StepwiseLR is there and said why
        reason, fix = facts.lr_epoch_wise
        checks.append(Check("LR stepped per optimizer step", False if fix else None, reason, fix))
    else:
        checks.append(
            Check(
                "LR stepped per optimizer step",
                facts.lr_per_step,
                "every scheduler steps per optimizer step" if facts.lr_per_step else "a scheduler steps per epoch",
                "add the StepwiseLR() callback: same schedule in epochs, applied at every optimizer step",
            )
        )
    if facts.device_augmentation:
        checks.append(Check("augmentation on the device", True, "GPUAugmentation augments whole batches"))
    elif facts.cpu_augmentation:
        checks.append(
            Check(
                "augmentation on the device",
                False if data_bound else None,
                f"per image on CPU in DataLoader workers ({', '.join(facts.cpu_augmentation)})",
                "feed uint8 batches (FastImageFolder) and add GPUAugmentation('trivial_augment')",
            )
        )
    else:
        checks.append(Check("augmentation on the device", None, "no augmentation found"))
    if facts.num_workers is None:
        checks.append(Check("DataLoader workers", None, "no training DataLoader found"))
    else:
        ok = facts.num_workers >= workers or not data_bound
        detail = f"num_workers={facts.num_workers} for {facts.cpu_cores} CPU cores per process"
        check = Check("DataLoader workers", ok, detail, f"DataLoader(num_workers={workers})")
        checks.append(measured_check(facts, "num_workers", facts.num_workers, check))
        if facts.accelerator == "cuda":
            checks.append(
                Check(
                    "pin_memory",
                    bool(facts.pin_memory),
                    f"pin_memory={facts.pin_memory}",
                    "DataLoader(pin_memory=True) for asynchronous host-to-device copies",
                )
            )
        if facts.num_workers > 0 and facts.epochs > 1:
            checks.append(
                Check(
                    "persistent_workers",
                    bool(facts.persistent_workers),
                    f"persistent_workers={facts.persistent_workers}",
                    "DataLoader(persistent_workers=True) so workers are not restarted every epoch",
                )
            )
    if facts.decodes_images:
        checks.append(
            Check(
                "Pillow-SIMD",
                True if facts.pillow_simd else (False if data_bound else None),
                "installed" if facts.pillow_simd else "stock Pillow",
                PILLOW_SIMD_INSTALL,
            )
        )
    if facts.image_side is not None:
        rates = ", ".join(f"{side} px {rate:.1f}" for side, rate in facts.images_per_s_by_side) or "none measured"
        checks.append(Check("progressive resizing", None, f"now {facts.image_side} px; images/s by side: {rates}"))
    return checks


def tune_hints(facts: RunFacts, data_wait_share: float) -> list[str]:
    """Settings of this run that :func:`~lightning_efficient.tune` would question, one sentence each; empty when
    tune() measured this model here (``facts.tuned``) or nothing is in doubt.

    In doubt: a 16-bit precision on a CPU without native bf16 (emulated), ``channels_last`` on a CPU (its effect
    depends on the model there), and a data-bound run whose best ``num_workers`` is unknown.
    """
    if facts.tuned is not None:
        return []
    hints = []
    half = facts.precision in ("bf16-mixed", "16-mixed", "bf16-true", "16-true", "bf16", "16")
    if half and facts.accelerator == "cpu" and facts.recommended_precision == "32-true":
        hints.append(
            f"precision={facts.precision!r} on a CPU without native bf16/fp16 runs emulated, often far "
            "slower than '32-true'"
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
