"""The stored tutorials (``notebooks/*.ipynb``): shown on GitHub with their outputs, importing only the public API,
and free of Lightning's chatter and of this machine's paths. Executing them is nbmake's job (``make test``)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def _cells(path: Path, kind: str) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return "".join(output["text"])
    data = output.get("data", {})
    return "".join(data.get("text/plain", "")) + "".join(data.get("text/markdown", ""))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_cell_is_stored_executed_in_order_and_most_show_something(path: Path):
    code = [c for c in _cells(path, "code") if "".join(c["source"]).strip()]
    counts = [c["execution_count"] for c in code]
    assert all(isinstance(n, int) for n in counts), f"{path.name}: cells stored unexecuted: `make notebooks`"
    assert counts == sorted(counts), f"{path.name}: cells executed out of order: `make notebooks`"
    with_output = [c for c in code if c["outputs"]]
    assert len(with_output) >= len(code) // 2, f"{path.name}: stored without most of its outputs"
    assert not [o for c in code for o in c["outputs"] if o.get("output_type") == "error"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_import_only_the_public_api(path: Path):
    for cell in _cells(path, "code"):
        source = "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lightning_efficient"):
                assert not node.module.startswith("lightning_efficient.app"), f"{path.name}: imports the CLI app"
                assert not any(a.name.startswith("_") for a in node.names), f"{path.name}: imports a private name"
                assert not any(part.startswith("_") for part in node.module.split(".")), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_hold_no_lightning_chatter_nor_local_paths(path: Path):
    text = "\n".join(_text(o) for c in _cells(path, "code") for o in c["outputs"])
    for chatter in ("GPU available:", "TPU available:", "💡 Tip:", "LeafSpec"):
        assert chatter not in text, f"{path.name}: stored output shows Lightning's {chatter!r}"
    assert not re.search(r"/(work|root|home)/[^\s'\"]*", text), f"{path.name}: a local path in the outputs"
    assert ".venv/" not in text
