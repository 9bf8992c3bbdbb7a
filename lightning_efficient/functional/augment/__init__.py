"""Per-sample batch augmentation on the device: the functional core of :class:`GPUAugmentation`.

Every function here works on a whole batch ``[B, C, H, W]`` at once and draws its random parameters **per
sample**: each image in a batch gets its own operation and magnitude. This differs from
``torchvision.transforms.v2`` (one parameter set per call on a batched tensor, vision#8484) and from
``kornia.augmentation.auto`` (one operation per batch, only magnitudes per sample).

Following Kornia's design, drawing random parameters is split from applying them:

- ``sample_*`` functions return a small parameter object (tensors on the requested device),
- ``apply_*`` functions apply given parameters deterministically,
- the plain functions (:func:`trivial_augment`, :func:`rand_augment`, :func:`imagenet_augment`,
  :func:`cifar_augment`, :func:`flip_augment`) do both.

Geometric operations of a batch are applied by **one** :func:`kornia.geometry.transform.warp_affine` call with
per-sample ``2 x 3`` matrices (in pixel-index coordinates, source to destination); colour operations run on the
subset of the batch that drew them, with per-sample factors.

Value conventions: images are floating point in ``[0, 1]`` (``uint8`` input is converted by :func:`to_float`);
outputs stay in ``[0, 1]`` and keep the input's floating dtype. Geometry does not depend on that dtype: matrices,
grids and warps are float32 for every input (bfloat16/float16 images are upcast for the warp and cast back), so
the same draws move the same pixels. Optional masks (segmentation labels) follow the geometric part of the
transform with nearest interpolation and keep their shape, dtype and label values, also after a custom callable
(:func:`restore_masks`). Normalisation statistics are in ``[0, 1]`` units (:func:`check_normalization_stats`);
:func:`unit_range_problem` tells float input that is not in ``[0, 1]`` (normalised already, 0-255 floats).

Modules (one concept each; this package re-exports their public names):

- :mod:`.params`: the operation space :data:`OPS` and the parameter objects :class:`PolicyParams`,
  :class:`AffineParams`;
- :mod:`.convert`: :func:`to_float`, :func:`normalize` and the unit checks :func:`check_normalization_stats`,
  :func:`unit_range_problem`;
- :mod:`.masks`: :func:`restore_masks` (masks back in the layout and dtype they came in with);
- :mod:`.colour`: the colour-operation kernels; :mod:`.warp`: affine matrices and warps, :func:`apply_affine`;
- :mod:`.policy_sampling`: TrivialAugmentWide / RandAugment tables and ``sample_*``; :mod:`.policy`:
  :func:`apply_policy`;
- :mod:`.crop_sampling`: :func:`sample_random_resized_crop_flip`, :func:`sample_pad_crop_flip`;
- :mod:`.presets`: the sample-and-apply functions and :data:`PRESETS`; :mod:`.factory`:
  :func:`build_augmentation`; :mod:`.display`: :func:`preview`;
- :mod:`.validation`: the argument checks they share.

Sources: TrivialAugment (Müller & Hutter, "TrivialAugment: Tuning-free Yet State-of-the-Art Data Augmentation",
ICCV 2021, arXiv:2103.10158) with the operation set and magnitude ranges of torchvision's
``TrivialAugmentWide``; RandAugment (Cubuk et al., 2020, arXiv:1909.13719) with torchvision's ``RandAugment``
ranges; operation semantics follow ``torchvision.transforms.v2.functional`` (equalize and autocontrast call it
directly); warping uses Kornia.
"""

from lightning_efficient.functional.augment.convert import (
    check_normalization_stats,
    normalize,
    to_float,
    unit_range_problem,
)
from lightning_efficient.functional.augment.crop_sampling import sample_pad_crop_flip, sample_random_resized_crop_flip
from lightning_efficient.functional.augment.display import preview
from lightning_efficient.functional.augment.factory import Augmentation, build_augmentation
from lightning_efficient.functional.augment.masks import restore_masks
from lightning_efficient.functional.augment.params import GEOMETRIC_OPS, OPS, AffineParams, PolicyParams
from lightning_efficient.functional.augment.policy import apply_policy, apply_trivial_augment
from lightning_efficient.functional.augment.policy_sampling import sample_rand_augment, sample_trivial_augment
from lightning_efficient.functional.augment.presets import (
    PRESETS,
    cifar_augment,
    flip_augment,
    imagenet_augment,
    rand_augment,
    random_hflip,
    trivial_augment,
)
from lightning_efficient.functional.augment.warp import WARP_DTYPE, apply_affine

__all__ = [
    "OPS",
    "GEOMETRIC_OPS",
    "PolicyParams",
    "AffineParams",
    "to_float",
    "normalize",
    "check_normalization_stats",
    "unit_range_problem",
    "restore_masks",
    "WARP_DTYPE",
    "sample_trivial_augment",
    "apply_trivial_augment",
    "trivial_augment",
    "sample_rand_augment",
    "rand_augment",
    "apply_policy",
    "sample_random_resized_crop_flip",
    "sample_pad_crop_flip",
    "apply_affine",
    "imagenet_augment",
    "cifar_augment",
    "flip_augment",
    "random_hflip",
    "PRESETS",
    "Augmentation",
    "build_augmentation",
    "preview",
]
