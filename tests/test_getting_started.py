"""The complete script of docs/getting-started.md ("A first run") runs as written, and prints what the page shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "getting-started.md"
FENCE = re.compile(r'^```python title="first_run\.py"\n(.*?)^```$', re.DOTALL | re.MULTILINE)


def first_run_script() -> str:
    """The one code block of the page titled first_run.py, exactly as a reader copies it."""
    blocks = FENCE.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == 1, "docs/getting-started.md should hold exactly one first_run.py block"
    return blocks[0]


def test_first_run_script_is_on_the_page():
    script = first_run_script()
    assert "recipe(" in script and "load_digits" in script


@pytest.mark.slow
def test_first_run_script_runs(tmp_path):
    pytest.importorskip("sklearn")
    (tmp_path / "first_run.py").write_text(first_run_script(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(PAGE.parent.parent)}  # this checkout's package, as in the other tests
    proc = subprocess.run(
        [sys.executable, "first_run.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Efficiency report:" in out, out[-2000:]
    assert "checklist:" in out
    accuracy = float(re.search(r"^val_acc: ([0-9.]+)$", out, re.MULTILINE).group(1))
    assert accuracy > 0.5, out[-2000:]
