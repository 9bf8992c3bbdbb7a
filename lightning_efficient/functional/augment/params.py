"""The operation space and the parameter objects that ``sample_*`` functions return and ``apply_*`` take.

Following Kornia, drawing random parameters is split from applying them: a parameter object is a few small
tensors (on the device they were drawn on) that an ``apply_*`` function applies deterministically.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["AffineParams", "GEOMETRIC_OPS", "OPS", "OP_INDEX", "PolicyParams"]

#: Operation names, in torchvision's ``TrivialAugmentWide._AUGMENTATION_SPACE`` order. Parameter objects store
#: indices into this tuple.
OPS: tuple[str, ...] = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
)
#: The geometric operations (indices 1..5 of :data:`OPS`, contiguous on purpose).
GEOMETRIC_OPS: tuple[str, ...] = OPS[1:6]
#: Index of each operation name in :data:`OPS`.
OP_INDEX: dict[str, int] = {name: i for i, name in enumerate(OPS)}


@dataclass
class PolicyParams:
    """Per-sample parameters of an operation policy (TrivialAugment, RandAugment).

    Attributes:
        ops: ``int64 [B, N]``, indices into :data:`OPS`; column ``n`` is the ``n``-th operation applied
            (``N = 1`` for TrivialAugment, ``num_ops`` for RandAugment).
        magnitudes: ``float32 [B, N]``, signed magnitudes in torchvision's units: shear as the shear factor
            (tan of the angle), translation in pixels (truncated to an integer like torchvision), rotation in
            degrees counter-clockwise, Brightness/Color/Contrast/Sharpness as ``factor - 1``, Posterize in bits
            kept, Solarize as threshold in ``[0, 1]``; 0 for operations without magnitude.
    """

    ops: Tensor
    magnitudes: Tensor

    def op_names(self) -> list[list[str]]:
        """Operation names per sample, ``[B][N]`` (for inspection and tests)."""
        return [[OPS[i] for i in row] for row in self.ops.tolist()]


@dataclass
class AffineParams:
    """Per-sample affine warp (crop, resize, flip, translate).

    Attributes:
        matrix: ``float32 [B, 2, 3]`` source-to-destination affine matrices in pixel-index coordinates
            (pixel ``(x, y)`` centre at ``(x, y)``), the convention of
            :func:`kornia.geometry.transform.warp_affine` with ``align_corners=True``.
        size: output ``(height, width)`` in pixels.
    """

    matrix: Tensor
    size: tuple[int, int]
