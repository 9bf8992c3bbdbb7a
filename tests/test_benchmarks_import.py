"""Every benchmark module imports: a benchmark that no longer runs is found here, not when someone measures."""

import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_benchmark_module_imports(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    assert module.__doc__, f"benchmarks/{name}.py has no module docstring (its command and what it measures)"
