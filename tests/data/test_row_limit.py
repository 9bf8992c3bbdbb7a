"""The row-limited JPEG decode: the guard around Pillow's private attributes, its fallback and its switch."""

from __future__ import annotations

import io

import numpy as np
import PIL
import pytest
import torch
from PIL import Image

import lightning_efficient.data.decode.row_limit as row_limit
from lightning_efficient import FastImageFolder
from lightning_efficient.data.decode import decode_region, jpeg_frame

from image_helpers import gradient_image


def test_pillow_still_supports_the_row_limit():
    """Fails loudly when a Pillow release changes what the trick relies on (``Image._size`` behind ``size``,
    4-field decoder tiles, libjpeg reading the height from the rewritten header)."""
    assert isinstance(vars(Image.Image)["size"], property), f"Pillow {PIL.__version__}: Image.size is no property"
    with Image.open(io.BytesIO(_jpeg(64, 48))) as img:
        assert isinstance(vars(img).get("_size"), tuple), f"Pillow {PIL.__version__}: no instance attribute _size"
        assert len(img.tile) == 1 and len(tuple(img.tile[0])) == 4, f"Pillow {PIL.__version__}: tile is {img.tile}"
    assert row_limit.row_limit_self_test(), (
        f"Pillow {PIL.__version__} no longer decodes a row-limited JPEG correctly: FastImageFolder now decodes every "
        "row (see lightning_efficient/data/decode/row_limit.py); fix the trick or drop it."
    )
    assert row_limit.row_limit_available()


def _jpeg(w: int, h: int) -> bytes:
    out = io.BytesIO()
    gradient_image(w, h).save(out, "JPEG", quality=90)
    return out.getvalue()


def test_limit_applies_and_decodes_fewer_rows(tmp_path):
    path = tmp_path / "tall.jpg"
    path.write_bytes(_jpeg(200, 600))
    box = (10.0, 20.0, 110.0, 120.0)
    limited = decode_region(str(path), (50, 50), lambda w, h: box, draft=False, limit_rows=True)
    full = decode_region(str(path), (50, 50), lambda w, h: box, draft=False, limit_rows=False)
    assert limited.image.size[1] < 600 and full.image.size == (200, 600)
    rows = int(box[3]) + 1
    np.testing.assert_array_equal(np.asarray(limited.image)[:rows], np.asarray(full.image)[:rows])


def test_unsupported_pillow_falls_back_with_one_warning(tmp_path, monkeypatch):
    path = tmp_path / "tall.jpg"
    path.write_bytes(_jpeg(200, 600))
    monkeypatch.setattr(row_limit, "row_limit_available", lambda: False)
    monkeypatch.setattr(row_limit, "_warned", False)
    choose = lambda w, h: (0.0, 0.0, 100.0, 100.0)  # noqa: E731
    with pytest.warns(RuntimeWarning, match="row_limited_decode=False"):
        region = decode_region(str(path), (50, 50), choose, draft=False)
    assert region.image.size == (200, 600)  # decoded in full
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decode_region(str(path), (50, 50), choose, draft=False)  # warned once per process only


def test_public_switch_turns_the_trick_off(tmp_path, monkeypatch):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.jpg").write_bytes(_jpeg(200, 600))
    calls = []
    original = row_limit.limit_jpeg_rows

    def spy(*args, **kwargs):
        calls.append(args[-1])
        return original(*args, **kwargs)

    import lightning_efficient.data.decode.region as region_mod

    monkeypatch.setattr(region_mod, "limit_jpeg_rows", spy)
    on = FastImageFolder(tmp_path, 32, train=False)
    off = FastImageFolder(tmp_path, 32, train=False, row_limited_decode=False)
    assert on.row_limited_decode and not off.row_limited_decode
    a, b = on[0][0], off[0][0]
    assert len(calls) == 1  # only the default dataset limited its decode
    assert torch.equal(a, b)  # and the pixels are the same
    assert off.decoder.row_limited_decode is False
