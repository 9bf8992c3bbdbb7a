"""Packaging: the wheel builds without deprecation warnings, ships ``py.typed`` and has one version."""

from __future__ import annotations

import ast
import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import lightning_efficient

REPO = Path(__file__).resolve().parents[1]


def _source_version(init: Path) -> str:
    """``__version__`` as written (a literal) in ``lightning_efficient/__init__.py``, read without importing it."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{init}: no literal __version__")


def test_one_version_source():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project, "the version is written in pyproject.toml and in __init__.py"
    assert "version" in project["dynamic"]
    dynamic = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "lightning_efficient.__version__"}
    assert _source_version(REPO / "lightning_efficient" / "__init__.py") == lightning_efficient.__version__


def test_license_is_an_spdx_string_and_py_typed_is_package_data():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["project"]["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in config["project"].get("classifiers", []))  # PEP 639
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["lightning_efficient"]
    assert (REPO / "lightning_efficient" / "py.typed").is_file()


@pytest.mark.slow
def test_wheel_builds_without_deprecation_warnings_with_py_typed_and_one_version(tmp_path):
    # Build from a copy, so that the checkout gets no build/ or egg-info changes.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "lightning_efficient", src / "lightning_efficient", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    out = tmp_path / "wheels"
    # The environment's setuptools where it is recent enough (no download), else pip's isolated build, which
    # installs what [build-system] requires.
    try:
        local_setuptools = int(importlib.metadata.version("setuptools").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        local_setuptools = 0
    isolation = ["--no-build-isolation"] if local_setuptools >= 77 else []
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-v", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "SetuptoolsDeprecationWarning" not in log and "DeprecationWarning" not in log, log[-4000:]
    assert "project.license" not in log, log[-4000:]

    (wheel,) = out.glob("lightning_efficient-*.whl")
    version = _source_version(src / "lightning_efficient" / "__init__.py")
    assert wheel.name.startswith(f"lightning_efficient-{version}-")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "lightning_efficient/py.typed" in names
        assert "lightning_efficient/app/cli.py" in names and "lightning_efficient/data/decode/limits.py" in names
        metadata = zf.read(f"lightning_efficient-{version}.dist-info/METADATA").decode()
    fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
    assert ["Version", version] in fields
    assert ["License-Expression", "Apache-2.0"] in fields
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert any(
        r.replace(" ", "").startswith("setuptools>=") and int(r.split(">=")[1].split(".")[0]) >= 77 for r in requires
    ), requires
