"""Shared fixtures: the reference data beside the repository (../shared/data), skipped where absent.

The tests mirror the package: ``tests/functional``, ``tests/data``, ``tests/callbacks``; tests of the top-level
modules (precision, recipe, doctor, cli, demo) stay here. The data is located in one place,
:data:`image_helpers.DATA`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import settings
from image_helpers import data

# CI runs the property tests with a fixed seed (reproducible verdicts); local runs keep exploring new examples.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


# tune()'s stored decisions go to a new, empty folder: no test or notebook (their kernels inherit this process's
# environment) depends on an earlier run or on the user's own cache.
os.environ["LIGHTNING_EFFICIENT_CACHE"] = tempfile.mkdtemp(prefix="lightning_efficient_cache_")


@pytest.fixture(autouse=True)
def _empty_tune_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty tune() cache and no result of an earlier test in this process."""
    from lightning_efficient.tuning import store

    monkeypatch.setenv("LIGHTNING_EFFICIENT_CACHE", str(tmp_path / "tune-cache"))
    store.RECENT.clear()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` skip, with the reason, where no CUDA GPU is visible."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run by benchmarks/gpu_suite.py part a on a GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


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
