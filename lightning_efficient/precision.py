"""Choose Lightning's ``precision`` string for the hardware at hand.

Rules (sources: NVIDIA mixed-precision training guide; PyTorch AMP docs; Intel's AMX/AVX512-BF16 notes):

============================================  ==============  ===============================================
hardware                                      precision       why
============================================  ==============  ===============================================
CUDA, compute capability >= 8.0 (Ampere+)     ``bf16-mixed``  bf16 tensor cores, fp32 range: no loss scaling
CUDA, compute capability 7.x (Volta, Turing)  ``16-mixed``    fp16 tensor cores; bf16 is emulated (slow)
CUDA, older                                   ``32-true``     no tensor cores
CPU with AMX-BF16 or AVX512-BF16              ``bf16-mixed``  native bf16 dot products (oneDNN)
Apple MPS                                     ``16-mixed``    fp16 is native on Apple GPUs
other CPUs                                    ``32-true``     bf16 would be emulated, slower than fp32
============================================  ==============  ===============================================

:func:`precision_input_dtype`: the floating dtype a Trainer's precision plugin gives the model's inputs (what
GPUAugmentation casts its output to).

Mixed precision keeps the weights and the optimizer update in fp32 (Micikevicius et al., 2018), so accuracy
is unaffected while matmuls and convolutions run in 16 bits.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

_ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")

#: Precision values a Lightning ``Trainer`` accepts (``lightning_fabric``'s ``_PRECISION_INPUT``, 2.x).
PRECISIONS = (
    "32-true",
    "bf16-mixed",
    "16-mixed",
    "bf16-true",
    "16-true",
    "64-true",
    "transformer-engine",
    "transformer-engine-float16",
    "32",
    "16",
    "bf16",
    "64",
    32,
    16,
    64,
)


@dataclass(frozen=True)
class PrecisionChoice:
    """What :func:`explain_precision` decided.

    Attributes:
        precision: Lightning's precision string, e.g. ``"bf16-mixed"``.
        accelerator: the accelerator it was chosen for: ``"cuda"``, ``"mps"`` or ``"cpu"``.
        device: a human-readable name of the device, e.g. ``"NVIDIA H200 (sm_90)"``.
        reason: one sentence saying why.
        advice: further settings worth making (e.g. TF32 matmuls on CUDA), possibly empty.
    """

    precision: str
    accelerator: str
    device: str
    reason: str
    advice: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"precision={self.precision!r} on {self.device}: {self.reason}"]
        lines += [f"  - {a}" for a in self.advice]
        return "\n".join(lines)


def check_precision(value: object, where: str) -> None:
    """Raise ``ValueError`` naming the accepted values if ``value`` is not a precision Lightning's Trainer takes."""
    if value not in PRECISIONS or isinstance(value, bool):
        raise ValueError(
            f"{where}: precision {value!r} is not one Lightning accepts; use one of "
            f"{', '.join(repr(p) for p in PRECISIONS[:6])}."
        )


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """CPU feature flags from ``/proc/cpuinfo`` (Linux); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_native_bf16() -> bool:
    """True where the CPU has AMX-BF16 or AVX512-BF16 (native bf16 dot products)."""
    flags = cpu_flags()
    return "amx_bf16" in flags or "avx512_bf16" in flags


def _resolve_accelerator(accelerator: str) -> str:
    if not isinstance(accelerator, str) or accelerator.lower() not in _ACCELERATORS:
        raise ValueError(
            f"recommended_precision(accelerator={accelerator!r}): expected one of {', '.join(_ACCELERATORS)}; "
            "pass the same value you give Trainer(accelerator=...)."
        )
    accelerator = accelerator.lower()
    if accelerator == "gpu":
        accelerator = "cuda" if torch.cuda.is_available() else "mps"
    if accelerator == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    if accelerator == "cuda" and not torch.cuda.is_available():
        raise ValueError("recommended_precision(accelerator='cuda'): no CUDA device is visible; use 'auto' or 'cpu'.")
    return accelerator


def explain_precision(accelerator: str = "auto") -> PrecisionChoice:
    """Choose the precision for ``accelerator`` and say why.

    Args:
        accelerator: ``"auto"`` (CUDA, then MPS, then CPU), ``"cuda"``/``"gpu"``, ``"mps"`` or ``"cpu"``.

    Returns:
        A :class:`PrecisionChoice`; ``str()`` of it is a short explanation.

    Raises:
        ValueError: an unknown accelerator name, or ``"cuda"`` with no CUDA device.

    Example:
        ```python
        from lightning_efficient import explain_precision

        print(explain_precision("cpu"))
        # precision='bf16-mixed' on CPU (x86_64, AVX512): the CPU has
        # native bf16 dot products (avx512_bf16) ...  (on such a CPU)
        ```
    """
    acc = _resolve_accelerator(accelerator)
    if acc == "cuda":
        major, minor = torch.cuda.get_device_capability()
        name = f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
        tf32 = "call torch.set_float32_matmul_precision('high') so fp32 matmuls that remain use TF32 tensor cores"
        if major >= 8:
            return PrecisionChoice(
                "bf16-mixed",
                acc,
                name,
                "Ampere or newer: bf16 tensor cores with fp32's exponent range, so no GradScaler is needed.",
                (tf32,),
            )
        if major == 7:
            return PrecisionChoice(
                "16-mixed",
                acc,
                name,
                "Volta/Turing: fp16 tensor cores; bf16 is not native there. Lightning adds a GradScaler.",
            )
        return PrecisionChoice("32-true", acc, name, "no tensor cores before compute capability 7.0.")
    if acc == "mps":
        return PrecisionChoice("16-mixed", acc, "Apple MPS", "fp16 is native on Apple GPUs.")
    capability = torch.backends.cpu.get_cpu_capability()
    name = f"CPU ({platform.machine()}, {capability})"
    flags = cpu_flags()
    native = sorted(f for f in ("amx_bf16", "avx512_bf16") if f in flags)
    if native:
        return PrecisionChoice(
            "bf16-mixed",
            acc,
            name,
            f"the CPU has native bf16 dot products ({', '.join(native)}); oneDNN runs convolutions in bf16.",
        )
    return PrecisionChoice(
        "32-true",
        acc,
        name,
        "no AMX-BF16/AVX512-BF16 on this CPU: bf16 would be emulated and slower than fp32.",
    )


def recommended_precision(accelerator: str = "auto") -> str:
    """Lightning's precision string for this hardware: ``bf16-mixed``, ``16-mixed`` or ``32-true``.

    See the module docstring for the rules and :func:`explain_precision` for the reason behind a choice.

    Args:
        accelerator: ``"auto"``, ``"cuda"``/``"gpu"``, ``"mps"`` or ``"cpu"``.

    Raises:
        ValueError: an unknown accelerator name, or ``"cuda"`` with no CUDA device.

    Example:
        ```python
        trainer = pl.Trainer(precision=recommended_precision())
        ```
    """
    return explain_precision(accelerator).precision


def precision_input_dtype(plugin: Any) -> torch.dtype:
    """The floating dtype Lightning feeds the model under ``plugin`` (``trainer.precision_plugin``).

    It is what the plugin's public ``convert_input`` (which Lightning calls on every batch before the transfer
    hooks: ``loops/training_epoch_loop.py``, ``evaluation_loop.py``, ``prediction_loop.py``) makes of a float32
    tensor: ``float32`` for ``"32-true"`` and the ``*-mixed`` precisions (autocast casts inside the step),
    ``bfloat16`` / ``float16`` for ``"bf16-true"`` / ``"16-true"`` (``HalfPrecision``, FSDP, DeepSpeed),
    ``float64`` for ``"64-true"``, the weights dtype for Transformer Engine, and whatever a custom plugin's
    ``convert_input`` does.

    Returns:
        A floating ``torch.dtype``.

    Warns:
        UserWarning (and returns ``float32``), naming the plugin and the fix, when the plugin's answer cannot be
        used: ``convert_input`` raises or returns something other than a floating tensor, or it leaves float32
        unchanged while the plugin's ``precision`` names a half or double ``*-true`` precision (a plugin that
        does not override ``convert_input``).
    """
    from pytorch_lightning.utilities import rank_zero_warn

    precision = str(getattr(plugin, "precision", ""))
    problem = None
    try:
        probe = plugin.convert_input(torch.zeros((), dtype=torch.float32))
    except Exception as err:  # noqa: BLE001 - a plugin we cannot ask: report it rather than guess silently
        probe, problem = None, f"its convert_input raised {type(err).__name__}: {err}"
    if problem is None and not (isinstance(probe, torch.Tensor) and probe.is_floating_point()):
        what = f"a {probe.dtype} tensor" if isinstance(probe, torch.Tensor) else type(probe).__name__
        problem = f"its convert_input turned a float32 tensor into {what}"
    if problem is None and probe.dtype == torch.float32 and precision.endswith("-true") and precision != "32-true":
        problem = f"its precision is {precision!r} but its convert_input leaves float32 tensors unchanged"
    if problem is None:
        return probe.dtype
    rank_zero_warn(
        f"GPUAugmentation cannot tell which dtype the model expects from the precision plugin "
        f"{type(plugin).__name__} ({problem}); batches are cast to float32. Fix: make the plugin's `convert_input` "
        "cast floating tensors to its compute dtype (as Lightning's HalfPrecision does), or cast the images in "
        "your `training_step`."
    )
    return torch.float32
