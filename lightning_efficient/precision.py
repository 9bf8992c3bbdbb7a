"""Choose Lightning's ``precision`` string for the hardware at hand.

Rules (sources: NVIDIA mixed-precision training guide; PyTorch AMP docs; Intel's AMX/AVX512-BF16 notes):

============================================  ==============  ===============================================
hardware                                      precision       why
============================================  ==============  ===============================================
CUDA, compute capability >= 8.0 (Ampere+)     ``bf16-mixed``  bf16 tensor cores, fp32 range: no loss scaling
CUDA, compute capability 7.x (Volta, Turing)  ``16-mixed``    fp16 tensor cores; bf16 is emulated (slow)
CUDA, older                                   ``32-true``     no tensor cores
CPU with AMX-BF16 or AVX512-BF16              ``bf16-mixed``  native bf16 dot products (oneDNN), unless a
                                                              probe measures bf16 convolutions slower here
Apple MPS                                     ``16-mixed``    fp16 is native on Apple GPUs
other CPUs                                    ``32-true``     bf16 would be emulated, slower than fp32
============================================  ==============  ===============================================

:func:`precision_input_dtype`: the floating dtype a Trainer's precision plugin gives the model's inputs (what
GPUAugmentation casts its output to).

Native bf16 instructions do not always make bf16 faster: on an Intel Xeon with AVX512-BF16 but no AMX, bf16
convolutions ran at 0.75-0.78x fp32's speed (:func:`probe_cpu_bf16`; ResNet-18 in ``benchmarks/peers``: 88.0
images/s in fp32, 75.6 in bf16), while an AMD EPYC with AVX512-BF16 trained ResNet-18 1.76x faster in bf16
(``benchmarks/channels_last.py``). So on such a CPU :func:`cpu_bf16_speedup` times a ResNet basic block once per
machine (about half a second, stored beside tune()'s decisions), and fp32 is chosen where bf16 runs under
0.9x (``BF16_SLOWER``) of fp32's speed.

Mixed precision keeps the weights and the optimizer update in fp32 (Micikevicius et al., 2018), so accuracy
is unaffected while matmuls and convolutions run in 16 bits.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

_ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")
_SPEEDUPS: dict[str, float] = {}  # cpu_bf16_speedup() per machine key, in this process
BF16_SLOWER = 0.9  #: below this speed ratio (bf16 / fp32, :func:`cpu_bf16_speedup`) a CPU trains in ``32-true``

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


def probe_cpu_bf16(rounds: int = 5, batch: int = 16, size: int = 32, channels: int = 64) -> float:
    """Measure how much faster bf16 autocast trains a ResNet basic block than fp32 on this CPU, now.

    The block (two 3x3 convolutions with BatchNorm and ReLU, ``channels`` channels, channels_last) takes a
    forward and backward pass on a ``(batch, channels, size, size)`` float32 input, under
    ``torch.autocast("cpu", torch.bfloat16)`` and without; the two alternate, ``rounds`` times, after one
    untimed pass each, with the current ``torch.get_num_threads()``.

    Args:
        rounds: the timed rounds (one fp32 and one bf16 pass each).
        batch: images per pass.
        size: the input's height and width, pixels.
        channels: the block's input and output channels.

    Returns:
        The median over the rounds of fp32 seconds / bf16 seconds (above 1: bf16 is faster).
    """
    gen = torch.Generator().manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(channels),
        torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(channels),
    ).to(memory_format=torch.channels_last)
    x = torch.randn(batch, channels, size, size, generator=gen).to(memory_format=torch.channels_last)

    def seconds(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = block(x)
        out.float().square().mean().backward()
        return time.perf_counter() - start

    for bf16 in (False, True):  # untimed: the first pass of each allocates and picks the kernels
        seconds(bf16)
    ratios = []
    for i in range(rounds):
        order = (False, True) if i % 2 == 0 else (True, False)
        took = {bf16: seconds(bf16) for bf16 in order}
        ratios.append(took[False] / took[True])
    return sorted(ratios)[len(ratios) // 2]


def cpu_bf16_speedup() -> float:
    """bf16's training speed over fp32's on this CPU (:func:`probe_cpu_bf16`), measured once per machine.

    Stored in ``bf16-probe.json`` in :func:`~lightning_efficient.doctor.cache_root` (beside tune()'s ``tune/``)
    for this CPU model, its flags, the torch and oneDNN versions and the thread count; measured again when any of
    them changes or the file cannot be read. Source: a measurement, see the module docstring.
    """
    from lightning_efficient.doctor import machine_info

    info = machine_info()
    key = {k: info[k] for k in ("cpu", "cpu_flags", "torch", "onednn")} | {"threads": torch.get_num_threads()}
    memo = json.dumps(key, sort_keys=True)
    if memo in _SPEEDUPS:  # this process measured or read it already
        return _SPEEDUPS[memo]
    _SPEEDUPS[memo] = speedup = _stored_or_measured(key)
    return speedup


def _stored_or_measured(key: dict) -> float:
    from lightning_efficient.doctor import cache_root

    try:
        path = cache_root() / "bf16-probe.json"
    except RuntimeError:  # no home folder: measured, not stored
        path = None
    if path is not None:
        try:
            stored = json.loads(path.read_text())
            if stored.get("machine") == key and float(stored["speedup"]) > 0:
                return float(stored["speedup"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
    speedup = probe_cpu_bf16()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"machine": key, "speedup": speedup}, indent=1))
        except OSError:
            pass
    return speedup


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
        speedup = cpu_bf16_speedup()
        measured = f"a ResNet basic block trained {speedup:.2f}x as fast in bf16 as in fp32 here"
        if speedup < BF16_SLOWER:
            return PrecisionChoice(
                "32-true",
                acc,
                name,
                f"the CPU has native bf16 dot products ({', '.join(native)}), but {measured} (measured once, "
                "stored): fp32 is faster.",
            )
        return PrecisionChoice(
            "bf16-mixed",
            acc,
            name,
            f"the CPU has native bf16 dot products ({', '.join(native)}); {measured}.",
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
