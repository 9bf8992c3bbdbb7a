"""Which PIL is installed (Pillow or Pillow-SIMD) and which engine ``FastImageFolder(resize=...)`` resizes with.

Pillow-SIMD is a drop-in fork of Pillow with SIMD resize/convert that installs under the same import name ``PIL``
(MosaicML Composer's performance notes recommend it for CPU-bound data loading). It is used automatically when
installed: nothing here selects it. Measured resize costs of each engine: ``benchmarks/results/decoding.md`` and
``benchmarks/results/decoding-pillow-simd.md``.
"""

from __future__ import annotations

import functools
import importlib.metadata

from PIL import Image

__all__ = [
    "RESAMPLE",
    "RESIZE_ENGINES",
    "TORCH_INTERPOLATIONS",
    "is_pillow_simd",
    "pil_distribution",
    "pil_flavour",
    "resolve_resize",
]

#: Interpolation names accepted by ``FastImageFolder`` -> Pillow resampling filters.
RESAMPLE: dict[str, Image.Resampling] = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}

#: Interpolations :func:`~lightning_efficient.data.decode.resize_region_uint8` runs with torch's antialiased
#: ``uint8`` kernels.
TORCH_INTERPOLATIONS: tuple[str, ...] = ("bilinear", "bicubic")

#: Values of ``FastImageFolder(resize=...)``.
RESIZE_ENGINES: tuple[str, ...] = ("auto", "torch", "pil")


def _pil_version() -> str:
    import PIL

    return str(getattr(PIL, "__version__", "unknown"))


@functools.lru_cache(maxsize=1)
def _installed_distributions() -> tuple[str, ...]:
    found = []
    for name in ("Pillow-SIMD", "Pillow"):
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return tuple(found)


def pil_distribution() -> str | None:
    """Name of the installed distribution that provides the imported ``PIL``: ``"Pillow"``, ``"Pillow-SIMD"``, or
    ``None`` when the package metadata cannot tell (no installed distribution carries the imported version, or
    both do).

    Reads the distributions' metadata (``importlib.metadata``), which is more reliable than the version string:
    the ``.postN`` suffix of Pillow-SIMD releases is a convention (see uploadcare/pillow-simd#45), not a marker.
    """
    version = _pil_version()
    found = _installed_distributions()
    matching = [d.split("==")[0] for d in found if d.split("==")[1] == version]
    return matching[0] if len(matching) == 1 else None


def is_pillow_simd() -> bool:
    """True when the imported ``PIL`` is Pillow-SIMD.

    Decided by the installed distribution's metadata (:func:`pil_distribution`); where that cannot tell, by the
    ``.postN`` suffix that Pillow-SIMD releases carry (e.g. ``9.0.0.post1``).
    """
    dist = pil_distribution()
    if dist is not None:
        return dist == "Pillow-SIMD"
    return ".post" in _pil_version()


def pil_flavour() -> str:
    """Name and version of the installed PIL: ``"Pillow 13.0.0"`` or ``"Pillow-SIMD 9.5.0.post2"``
    (see :func:`is_pillow_simd`)."""
    return f"{'Pillow-SIMD' if is_pillow_simd() else 'Pillow'} {_pil_version()}"


def resolve_resize(resize: str, interpolation: str, flavour: str | None = None) -> str:
    """Which resize engine ``FastImageFolder(resize=...)`` uses: ``"torch"`` or ``"pil"``.

    ``"auto"`` picks Pillow's resize when Pillow-SIMD is the installed PIL (its SIMD resize was the fastest
    measured) or when the interpolation has no antialiased torch kernel (``nearest``, ``lanczos``, ``box``,
    ``hamming``); otherwise torch's antialiased ``uint8`` kernels (faster than stock Pillow's resize). Figures:
    ``benchmarks/results/decoding.md`` (rows ``resize=pil`` vs the default) and
    ``benchmarks/results/decoding-pillow-simd.md``.

    Args:
        resize: ``"auto"``, ``"torch"`` or ``"pil"``.
        interpolation: a key of :data:`RESAMPLE`.
        flavour: :func:`pil_flavour` string (default: the installed PIL).

    Raises:
        ValueError: unknown ``resize``, or ``resize="torch"`` with an interpolation outside
            :data:`TORCH_INTERPOLATIONS`.
    """
    if resize not in RESIZE_ENGINES:
        raise ValueError(f"Unknown resize {resize!r}; use one of {RESIZE_ENGINES}.")
    if resize == "torch" and interpolation not in TORCH_INTERPOLATIONS:
        raise ValueError(
            f"resize='torch' supports interpolation in {TORCH_INTERPOLATIONS}, got {interpolation!r}; use "
            "resize='pil' (or 'auto') for Pillow's other filters."
        )
    if resize != "auto":
        return resize
    if interpolation not in TORCH_INTERPOLATIONS:
        return "pil"
    simd = flavour.startswith("Pillow-SIMD") if flavour is not None else is_pillow_simd()
    return "pil" if simd else "torch"
