"""The progressive-resizing schedule and the batch resize (``functional/resize.py``), without a Trainer."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_efficient.functional.resize import ResizeSchedule, resize_images, snap

DEFAULT = ResizeSchedule()  # 0.5 for the first half, a ramp, full size for the last 20%


@pytest.mark.parametrize("epoch,scale", [(0, 0.5), (5, 0.5), (6.5, 0.75), (8, 1.0), (9.5, 1.0), (10, 1.0)])
def test_the_default_schedule_at_epoch_boundaries(epoch, scale):
    assert DEFAULT.scale(epoch, 10) == pytest.approx(scale)


def test_sides_are_snapped_and_the_final_side_never_is():
    composer = ResizeSchedule(min_side=0)  # no floor
    assert composer.side(64, 0, 10) == 32 and composer.side(64, 9, 10) == 64
    assert composer.side(100, 9, 10) == 100  # final: not a multiple of 8, kept
    assert composer.side(100, 0, 10) == 48  # 50 -> 48
    assert composer.sides(64, 10) == [32, 40, 48, 56, 64]
    assert DEFAULT.sides(64, 10) == [64] and DEFAULT.sides(100, 10) == [64, 72, 80, 88, 96, 100]  # min_side 64
    assert DEFAULT.sides(224, 10)[0] == 112  # Composer's start at ImageNet's size


@given(st.integers(8, 512), st.floats(0, 20), st.floats(0.1, 1), st.sampled_from([1, 4, 8, 16]))
def test_every_side_is_a_multiple_or_the_final_one_and_never_larger(final, epoch, start, multiple):
    side = ResizeSchedule(start, 0.4, 0.3, multiple).side(final, epoch, 20)
    assert side == final or (side % multiple == 0 and multiple <= side <= final)


@given(st.floats(0, 9.9), st.floats(0, 0.1))
def test_the_side_never_shrinks_as_the_run_goes_on(epoch, step):
    assert DEFAULT.side(224, epoch, 10) <= DEFAULT.side(224, epoch + step, 10)


@pytest.mark.parametrize(
    "kwargs",
    [dict(start_scale=0), dict(start_scale=1.5), dict(delay=0.9, finetune=0.2), dict(multiple=0), dict(multiple=True)],
)
def test_bad_schedules_name_the_value(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ResizeSchedule(**kwargs)


def test_snap():
    assert snap(224, 0.5, 16) == 112 and snap(224, 0.01, 16) == 16 and snap(224, 1.0, 16) == 224


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16])
def test_images_are_resized_antialiased_in_their_dtype_and_masks_with_nearest(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2, 3, 64, 64, generator=g) * 255).to(dtype)
    out = resize_images(x, (32, 32))
    assert out.shape == (2, 3, 32, 32) and out.dtype == dtype
    ref = torch.nn.functional.interpolate(x.float(), size=(32, 32), mode="bilinear", antialias=True)
    assert (out.float() - ref).abs().max() <= (1.0 if dtype == torch.uint8 else 2.0)  # a rounding step, not a bug
    masks = torch.randint(0, 5, (2, 64, 64), generator=g)
    small = resize_images(masks, (32, 32), masks=True)
    assert small.shape == (2, 32, 32) and set(small.unique().tolist()) <= set(masks.unique().tolist())
    assert resize_images(x, (64, 64)) is x


@given(st.integers(1, 512), st.floats(0.01, 1.0), st.integers(0, 600), st.sampled_from([1, 8, 16]))
def test_min_side_floors_every_side_and_never_grows_one_past_the_final(final, scale, min_side, multiple):
    schedule = ResizeSchedule(multiple=multiple, min_side=min_side)
    side = schedule.side_at(final, scale)
    floor = -(-min_side // multiple) * multiple  # rounded up to a multiple
    assert min(floor, final) <= side <= final and (side % multiple == 0 or side == final)
    assert side == min(final, max(ResizeSchedule(multiple=multiple, min_side=0).side_at(final, scale), floor))


@pytest.mark.parametrize("bad", [-1, 1.5, True, "112"])
def test_a_bad_min_side_names_the_value(bad):
    with pytest.raises(ValueError, match=rf"min_side={bad!r}"):
        ResizeSchedule(min_side=bad)


@settings(max_examples=50, deadline=None)
@given(
    start=st.floats(0.1, 1.0),
    end=st.floats(0.1, 1.0),
    delay=st.floats(0.0, 0.6),
    finetune=st.floats(0.0, 0.4),
    f=st.floats(0.0, 1.0),
)
def test_end_scale_ends_the_ramp_and_holds_through_the_finetune(start, end, delay, finetune, f):
    if end < start:
        with pytest.raises(ValueError, match="end_scale"):
            ResizeSchedule(start_scale=start, end_scale=end)
        return
    s = ResizeSchedule(start_scale=start, delay=delay, finetune=finetune, end_scale=end)
    scale = s.scale(f * 10, 10)
    assert start - 1e-12 <= scale <= end + 1e-12
    if f >= 1 - finetune:
        assert scale == pytest.approx(end)
    plain = ResizeSchedule(start_scale=start, delay=delay, finetune=finetune)
    if f <= delay and f < 1 - finetune:
        assert scale == pytest.approx(plain.scale(f * 10, 10)) == pytest.approx(start)


def test_ffcvs_192_of_224_px():
    s = ResizeSchedule(start_scale=160 / 224, end_scale=192 / 224, min_side=0)
    assert s.side(224, 0, 10) == 160 and s.side(224, 9, 10) == 192 and s.sides(224, 10)[-1] == 192
