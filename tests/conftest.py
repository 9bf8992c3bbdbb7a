"""Shared fixtures: the reference data beside the repository (../shared/data), skipped where absent.

The tests mirror the package: ``tests/functional``, ``tests/data``, ``tests/callbacks``; tests of the top-level
modules (precision, recipe, doctor, cli, demo) stay here. The data is located in one place,
:data:`image_helpers.DATA`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from image_helpers import data


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (skips the test where it is absent)."""
    return data()


@pytest.fixture(scope="session")
def imagenette() -> Path:
    """``../shared/data/imagenette``: 10 classes, 224x224 JPEGs (skips the test where it is absent)."""
    return data("imagenette")


@pytest.fixture(scope="session")
def hymenoptera() -> Path:
    """``../shared/data/hymenoptera``: ants/bees, large JPEGs of varied sizes (skips where absent)."""
    return data("hymenoptera")
