"""Low-precision input to the functional presets: every operation gives float32's image, rounded once.

For every operation of every preset (the policy presets draw each row of :data:`OPS`; the affine presets are one
draw-and-warp each) and every floating dtype that float32 holds exactly (float16, bfloat16, float32), ``op(x)``
must equal ``op(x.float()).to(dtype)`` up to one unit in the last place of ``dtype``, for the same input ``x`` and
the same magnitudes. float64 is not in the property: its colour operations run in float64, more exactly than the
float32 reference, and ``x.float()`` would round a float64 input.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lightning_efficient.functional import augment as A
from lightning_efficient.functional.augment import OPS, PRESETS, PolicyParams
from lightning_efficient.functional.augment.policy_sampling import rand_augment_space, trivial_augment_space
from lightning_efficient.functional.augment.validation import INTERPOLATIONS

#: The magnitude space of each policy preset, ``(num_bins, height, width) -> (table, signed)`` (the preset's own
#: sampler tables, one row per entry of :data:`OPS`).
POLICY_SPACES = {
    "trivial_augment": lambda num_bins, h, w: trivial_augment_space(num_bins),
    "rand_augment": rand_augment_space,
}
#: The presets that are a single draw and warp (an affine one; "flip": a mirror): the preset is their one operation.
AFFINE_PRESETS = ("imagenet", "cifar", "flip")
NUM_BINS = 31

#: ``(preset, operation)``: every entry of :data:`OPS` for a policy preset, the preset itself for the others.
OPERATIONS = [(preset, op) for preset in PRESETS for op in (OPS if preset in POLICY_SPACES else (preset,))]
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Signed integers of each floating dtype's width, for counting units in the last place.
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def test_every_preset_has_its_operations_enumerated():
    assert set(PRESETS) == set(POLICY_SPACES) | set(AFFINE_PRESETS)
    for preset, space in POLICY_SPACES.items():
        table, signed = space(NUM_BINS, 8, 8)
        assert table.shape == (len(OPS), NUM_BINS) and signed.shape == (len(OPS),), preset


def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``int64``: how many representable values of their (common) dtype lie between ``a`` and ``b``, elementwise
    (0: equal, 1: neighbours; ``-0.0`` and ``0.0`` are equal)."""
    bits = _BITS[a.dtype]
    magnitude = torch.iinfo(bits).max

    def ordinal(t: torch.Tensor) -> torch.Tensor:
        i = t.view(bits).to(torch.int64)
        return torch.where(i < 0, -(i & magnitude), i)

    return (ordinal(a) - ordinal(b)).abs()


def _apply(preset: str, op: str, x: torch.Tensor, draw: dict) -> torch.Tensor:
    """Operation ``op`` of ``preset`` on ``x`` with the fixed magnitudes / draws in ``draw``."""
    b, _, h, w = x.shape
    if preset in POLICY_SPACES:
        table, signed = POLICY_SPACES[preset](NUM_BINS, h, w)
        i = OPS.index(op)
        sign = torch.where(torch.tensor(draw["negative"]) & signed[i], -1.0, 1.0)
        mags = table[i, torch.tensor(draw["bins"])] * sign
        params = PolicyParams(ops=torch.full((b, 1), i, dtype=torch.long), magnitudes=mags.view(b, 1))
        return A.apply_policy(x, params, interpolation=draw["interpolation"])
    fn = PRESETS[preset]
    kwargs = {"interpolation": draw["interpolation"]} if "interpolation" in inspect.signature(fn).parameters else {}
    return fn(x, generator=torch.Generator().manual_seed(draw["seed"]), **kwargs)


_VALUES = st.one_of(
    st.floats(0.0, 1.0, width=32),
    st.integers(0, 255).map(lambda k: float(np.float32(k / 255.0))),  # images that came from uint8
)


@st.composite
def _images(draw) -> np.ndarray:
    shape = (draw(st.integers(1, 3)), draw(st.sampled_from([1, 3])), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    return draw(hnp.arrays(np.float32, shape, elements=_VALUES))


@pytest.mark.parametrize("preset,op", OPERATIONS, ids=[f"{p}-{o}" for p, o in OPERATIONS])
@settings(max_examples=30, deadline=None)
@given(images=_images(), dtype=st.sampled_from(DTYPES), data=st.data())
def test_each_operation_in_a_low_precision_dtype_is_float32_rounded_once(preset, op, images, dtype, data):
    """Property: for every operation of every preset, floating dtype, drawn magnitudes (per sample) and drawn
    ``[B, C, H, W]`` images in ``[0, 1]``, ``op(x)`` equals ``op(x.float()).to(dtype)`` within one unit in the
    last place of ``dtype``, keeps ``dtype`` and the shape."""
    b = images.shape[0]
    draw = {
        "bins": data.draw(st.lists(st.integers(0, NUM_BINS - 1), min_size=b, max_size=b), label="bins"),
        "negative": data.draw(st.lists(st.booleans(), min_size=b, max_size=b), label="negative"),
        "interpolation": data.draw(st.sampled_from(INTERPOLATIONS), label="interpolation"),
        "seed": data.draw(st.integers(0, 2**31 - 1), label="seed"),
    }
    x = torch.from_numpy(images).to(dtype)
    out = _apply(preset, op, x, draw)
    ref = _apply(preset, op, x.float(), draw).to(dtype)
    assert out.dtype == dtype and out.shape == ref.shape
    ulps = _ulps(out, ref)
    worst = int(ulps.argmax())
    assert ulps.max() <= 1, (
        f"{preset} {op} {dtype}: {int(ulps.max())} ulps apart, max abs error "
        f"{(out.double() - ref.double()).abs().max().item():.4g} (at flat index {worst}: {out.flatten()[worst].item()} "
        f"instead of {ref.flatten()[worst].item()})"
    )
