"""Helpers shared by the tests (importable from any test folder: pyproject sets ``pythonpath = ["tests"]``).

``DATA`` is the one place the tests locate the reference data (``../shared/data``); ``conftest.py`` builds its
fixtures on :func:`data`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def data(*parts: str) -> Path:
    """``../shared/data/<parts>``; skips the test where it is absent."""
    path = DATA.joinpath(*parts)
    if not path.is_dir():
        pytest.skip(f"reference data {path} is absent (it lies beside the repository as ../shared/data)")
    return path


def mad(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean absolute difference on the 0..255 scale."""
    return (a.float() - b.float()).abs().mean().item()


def gradient_image(w: int, h: int) -> Image.Image:
    """Smooth RGB content with no symmetry (so any wrong flip/rotation shows)."""
    x = np.linspace(0, 1, w)[None, :]
    y = np.linspace(0, 1, h)[:, None]
    rgb = np.stack([255 * x * np.ones_like(y), 255 * y * np.ones_like(x), 255 * (1 - x) * y], axis=-1)
    return Image.fromarray(rgb.astype(np.uint8), "RGB")
