"""The environment check behind ``lightning-efficient doctor`` and :func:`doctor_report`: what this machine has
(torch, CUDA/cuDNN, bf16 support, CPU bf16 instructions, kornia, Pillow or Pillow-SIMD, cores) and which precision
and DataLoader settings to use."""

from __future__ import annotations

import hashlib
import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

from lightning_efficient.functional.check import Check
from lightning_efficient.functional.checklist import PILLOW_SIMD_INSTALL
from lightning_efficient.precision import cpu_flags, cpu_has_native_bf16, explain_precision


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - absent or broken
        return None


def diagnose() -> list[Check]:
    """The environment checks: Python, torch and CUDA/cuDNN, bf16 support, CPU bf16/AMX, kornia, PIL flavour,
    CPU cores, and the recommended precision and DataLoader settings.

    Returns:
        One :class:`~lightning_efficient.functional.check.Check` per topic (``ok`` None: information only).
    """
    from lightning_efficient.data.decode import pil_flavour
    from lightning_efficient.data.loader import available_cpus, suggest_loader_kwargs

    out = [
        Check("python", None, platform.python_version()),
        Check("torch", None, f"{torch.__version__} (CUDA build {torch.version.cuda or 'none'})"),
        Check("pytorch_lightning", None, _version("pytorch_lightning") or "absent"),
    ]
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        names = ", ".join(
            f"{torch.cuda.get_device_name(i)} (sm_{''.join(map(str, torch.cuda.get_device_capability(i)))})"
            for i in range(n)
        )
        out.append(Check("CUDA devices", True, f"{n}: {names}"))
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        out.append(
            Check(
                "cuDNN",
                cudnn is not None,
                str(cudnn) if cudnn else "unavailable",
                "" if cudnn else "install a torch build with cuDNN",
            )
        )
        bf16 = torch.cuda.is_bf16_supported()
        out.append(Check("CUDA bf16", bf16, "supported" if bf16 else "not supported (pre-Ampere)"))
        tf32 = torch.get_float32_matmul_precision()
        out.append(
            Check(
                "TF32 matmuls",
                tf32 != "highest",
                f"float32_matmul_precision={tf32!r}",
                "" if tf32 != "highest" else "torch.set_float32_matmul_precision('high')",
            )
        )
    else:
        detail = "none visible: training runs on the CPU"
        if torch.version.cuda:  # works, but the CPU build is a much smaller install for a machine without a GPU
            detail += (
                f"; this torch is a CUDA {torch.version.cuda} build, which runs on the CPU too (the CPU build is a "
                "much smaller install: pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu)"
            )
        out.append(Check("CUDA devices", None, detail))
    flags = cpu_flags()
    bf16_flags = sorted(f for f in ("amx_bf16", "amx_tile", "avx512_bf16") if f in flags)
    out.append(
        Check(
            "CPU",
            None,
            f"{cpu_model()} ({platform.machine()}), {available_cpus()} cores available, "
            f"SIMD {torch.backends.cpu.get_cpu_capability()}, "
            f"bf16 instructions: {', '.join(bf16_flags) or 'none'}",
        )
    )
    kornia = _version("kornia")
    ok = kornia is not None and tuple(int(x) for x in kornia.split(".")[:2]) >= (0, 9)
    out.append(Check("kornia", ok, kornia or "absent", "" if ok else "pip install 'kornia>=0.9'"))
    flavour = pil_flavour()
    simd = flavour.startswith("Pillow-SIMD")
    avx2 = "avx2" in flags
    out.append(
        Check(
            "PIL",
            True if simd else None,
            flavour + ("" if simd else " (stock; decode is libjpeg-turbo either way)"),
            ""
            if simd or not avx2
            else f"for faster resizes: {PILLOW_SIMD_INSTALL}  (needs a C compiler and the libjpeg and zlib "
            "headers, e.g. apt-get install build-essential libjpeg62-turbo-dev zlib1g-dev on Debian)",
        )
    )
    choice = explain_precision()
    out.append(
        Check(
            "precision", True, f"use Trainer(precision={choice.precision!r}): {choice.reason}", "; ".join(choice.advice)
        )
    )
    settings = suggest_loader_kwargs()
    out.append(
        Check("DataLoader", None, ", ".join(f"{k}={v!r}" for k, v in settings.kwargs.items() if k != "collate_fn"))
    )
    return out


def doctor_report() -> str:
    """The environment checks and the advice as text: what ``lightning-efficient doctor`` prints.

    One line per check (``[x]`` passed, ``[ ]`` failed with the fix, ``[i]`` information), e.g.
    ``print(doctor_report())`` in a notebook. The checks themselves, as data: :func:`diagnose`.
    """
    lines = (c.line(info_mark="[i]", advice_unless_ok=True) for c in diagnose())
    return "lightning-efficient doctor\n" + "\n".join("  " + line for line in lines)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name``; ``platform.processor()`` elsewhere)."""
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError:
        found = None
    return found.group(1).strip() if found else platform.processor() or platform.machine()


CACHE_ENV = "LIGHTNING_EFFICIENT_CACHE"  #: the variable moving what is measured once per machine


def cache_root() -> Path:
    """The folder of what is measured once and kept between processes (tune()'s decisions, the bf16 probe):
    ``$LIGHTNING_EFFICIENT_CACHE``, else ``$XDG_CACHE_HOME/lightning_efficient`` (``~/.cache`` without it).

    Raises:
        RuntimeError: no ``$LIGHTNING_EFFICIENT_CACHE``, no ``$XDG_CACHE_HOME`` and no home folder.
    """
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lightning_efficient"


def machine_info() -> dict[str, Any]:
    """What a speed measurement holds for: the CPU (model, cores, a hash of its feature flags, native bf16), the
    GPUs (name and count) and the software (torch, Lightning, CUDA, cuDNN, oneDNN versions)."""
    from lightning_efficient.data.loader import available_cpus

    onednn = re.search(r"(?:oneDNN|MKL-DNN)[^\n]*? v([\d.]+)", torch.__config__.show())
    cuda = torch.cuda.is_available()
    return {
        "cpu": cpu_model(),
        "cpus": available_cpus(),
        "native_bf16": cpu_has_native_bf16(),
        "cpu_flags": hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:16],
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "gpus": torch.cuda.device_count() if cuda else 0,
        "torch": torch.__version__,
        "lightning": _version("pytorch_lightning"),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "onednn": onednn.group(1) if onednn else None,
    }
