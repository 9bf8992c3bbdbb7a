"""Shared fixtures: the reference data beside the repository (../shared/data), skipped where absent."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _data_dir(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"reference data {path} is absent (it lies beside the repository as ../shared/data/{name})")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (skips the test where it is absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def imagenette() -> Path:
    """``../shared/data/imagenette``: 10 classes, 224x224 JPEGs (skips the test where it is absent)."""
    return _data_dir("imagenette")


@pytest.fixture(scope="session")
def hymenoptera() -> Path:
    """``../shared/data/hymenoptera``: ants/bees, large JPEGs of varied sizes (skips where absent)."""
    return _data_dir("hymenoptera")
