"""The practice checklist of EfficiencyReport and the doctor: :class:`Check` lines, each with the concrete fix
(the Pillow-SIMD command among them), built from a run's :class:`~lightning_efficient.functional.run_facts.RunFacts`
by :func:`checklist`. Plain Python, tested without a Trainer."""

from __future__ import annotations

import math

from lightning_efficient.functional.check import Check
from lightning_efficient.functional.run_facts import RunFacts, verdict
from lightning_efficient.functional.tune_advice import measured_check

#: The commands that replace stock Pillow by Pillow-SIMD built for AVX2 (PyPI has only its sdist: it needs a C
#: compiler and the libjpeg/zlib headers, e.g. ``apt-get install build-essential libjpeg-dev zlib1g-dev``; a later
#: ``pip install pillow`` silently puts stock Pillow back).
PILLOW_SIMD_INSTALL = (
    'pip uninstall -y pillow && CC="cc -mavx2" pip install --no-cache-dir --force-reinstall --no-binary :all: '
    "pillow-simd"
)


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
        else ": 16-bit mixed precision is not faster on this hardware (explain_precision() says why)"
        if facts.recommended_precision == "32-true"
        else f" (this hardware runs {facts.recommended_precision!r} faster)"
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
