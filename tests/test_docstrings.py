"""The examples in the package's docstrings, as the API pages show them.

mkdocstrings renders a Google-style ``Example:`` section as a box whose body is Markdown: a fenced block there is
shown as code, anything else as run-on prose. So every example is written one way::

    Example:
        ```python
        trainer = pl.Trainer(**recipe())
        ```

(```` ```pycon ```` for an interactive session with ``>>>`` prompts and their output). These tests read every
docstring of the package from its source, without importing it, and fail on an ``Example:`` that is not such a
block, on a doctest marker (``# doctest: +SKIP`` would be shown on the page), and on a code line too long for the
page's column. The ``>>>`` sessions are run, so the output they show stays true.

Also what the signatures and entries of the API pages (``docs/api/*.md``) need: no lambda default (shown as
``(lambda: ...)()``), and an ``Args``/``Attributes`` entry of its own for every parameter and dataclass field.
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import enum
import importlib
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_efficient"
# Code lines of an example, from the fence's indent: at 1280 px, longer ones are cut behind a horizontal scroll in
# the API pages' column (docs/check_layout.py measures it).
MAX_CODE_LINE = 76
_HEADER = re.compile(r"^(\s*)Examples?\s*:")  # "Example:", "Examples:", "Example::", "Example: prose"
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_DOCTEST_MARKER = re.compile(r"#\s*doctest\s*:", re.IGNORECASE)


def _docstrings() -> list[tuple[str, str]]:
    """``(where, docstring)`` of every module, class and function in the package's source."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    name = module if isinstance(node, ast.Module) else f"{module}.{node.name}"
                    found.append((f"{name} (line {getattr(node, 'lineno', 1)})", doc))
    return found


def example_problems(doc: str) -> list[str]:
    """What keeps the examples of ``doc`` (a cleaned docstring) from rendering as code on the API pages."""
    problems = []
    lines = doc.split("\n")
    for i, line in enumerate(lines):
        if _DOCTEST_MARKER.search(line):
            problems.append(f"doctest marker (shown on the page): {line.strip()!r}")
        header = _HEADER.match(line)
        if not header:
            continue
        if line.strip() != "Example:":
            problems.append(f"{line.strip()!r}: write 'Example:' alone on its line, the code in a fenced block")
            continue
        if i > 0 and lines[i - 1].strip():
            problems.append("'Example:' needs a blank line above it (else it is not a section)")
        below = lines[i + 1] if i + 1 < len(lines) else ""
        fence = _FENCE.match(below)
        indent = len(header.group(1))
        if not fence or len(fence.group(1)) <= indent or fence.group(2) not in ("python", "pycon"):
            problems.append(f"'Example:' not followed by an indented ```python (or ```pycon) fence: {below!r}")
            continue
        body, end = [], None
        for j in range(i + 2, len(lines)):
            if lines[j].strip() == "```" and lines[j].startswith(fence.group(1)):
                end = j
                break
            body.append(lines[j])
        if end is None:
            problems.append("the example's ``` fence is never closed")
            continue
        if not any(b.strip() for b in body):
            problems.append("an empty example")
        width = len(fence.group(1))
        for code in body:
            if code.strip() and not code.startswith(fence.group(1)):
                problems.append(f"a code line left of its fence: {code!r}")
            if len(code) - width > MAX_CODE_LINE:
                problems.append(f"a code line over {MAX_CODE_LINE} characters (cut on the page): {code.strip()!r}")
    return problems


def test_every_example_is_a_code_block() -> None:
    docstrings = _docstrings()
    examples = sum(doc.count("Example:") for _, doc in docstrings)
    assert examples >= 15, f"only {examples} examples found: is {PACKAGE} the package?"
    bad = [f"{where}: {p}" for where, doc in docstrings for p in example_problems(doc)]
    assert not bad, "\n".join(bad)


PROSE = """Do a thing.

Example::

    trainer = pl.Trainer(callbacks=[Thing()])  # doctest: +SKIP
"""


@pytest.mark.parametrize(
    "doc",
    [
        PROSE,  # the reST literal block: prose on the page
        "Do a thing.\n\nExample: pass ``n=3`` to get three.",  # a prose paragraph
        "Do a thing.\n\nExample:\n    trainer = pl.Trainer()",  # an indented block, no fence
        "Do a thing.\n\nExamples:\n    ```python\n    x = 1\n    ```",  # the other spelling
        "Do a thing.\n\nExample:\n    ```python\n    x = 1",  # never closed
        "Do a thing.\n\nExample:\n    ```python\n    x = [" + "1, " * 30 + "]\n    ```",  # too long
        "Do a thing.\nExample:\n    ```python\n    x = 1\n    ```",  # no blank line above: not a section
    ],
)
def test_the_check_catches_examples_that_are_not_code(doc: str) -> None:
    assert example_problems(doc)


def test_a_fenced_example_passes() -> None:
    assert not example_problems("Do a thing.\n\nExample:\n    ```python\n    x = 1\n\n    y = x\n    ```\n\nMore.")
    assert any(p.startswith("doctest marker") for p in example_problems(PROSE))


def _sessions() -> list[tuple[str, str, str]]:
    """``(module, where, code)`` of every ```pycon example."""
    found = []
    for where, doc in _docstrings():
        for block in re.findall(r"^( *)```pycon\n(.*?)^\1```", doc, re.MULTILINE | re.DOTALL):
            found.append((where.split(" ")[0], where, textwrap.dedent(block[1])))
    return found


@pytest.mark.parametrize("module, where, code", _sessions(), ids=lambda v: v if "\n" not in v else "")
def test_session_examples_show_what_runs(module: str, where: str, code: str) -> None:
    namespace = None
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):  # a function's or class's module
        try:
            namespace = dict(vars(importlib.import_module(".".join(parts[:cut]))))
            break
        except ImportError:
            continue
    assert namespace is not None, where
    test = doctest.DocTestParser().get_doctest(code, namespace, where, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=lambda s: pytest.fail(f"{where}:\n{s}"))
    assert runner.summarize(verbose=False).attempted > 0


def test_no_lambda_defaults_in_signatures() -> None:
    """A lambda default shows on the API pages as ``(lambda: ...)()``; a named function reads."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "default_factory" and isinstance(node.value, ast.Lambda):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.value.lineno}: default_factory=lambda")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defaults = node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
                bad += [
                    f"{path.relative_to(PACKAGE.parent)}:{d.lineno}: a lambda default of {node.name}()"
                    for d in defaults
                    if isinstance(d, ast.Lambda)
                ]
    assert not bad, "\n".join(bad)


# Lightning's own hooks (documented by Lightning) and the state-dict protocol: their parameters need no entry.
_HOOKS = re.compile(r"^(on_\w+|setup|teardown|state_dict|load_state_dict)$")


def _api_entries() -> list[str]:
    """The ``::: lightning_efficient...`` identifiers of the API pages (docs/api/*.md)."""
    pages = sorted((PACKAGE.parent / "docs" / "api").glob("*.md"))
    found = [
        i for page in pages for i in re.findall(r"^:::\s*(lightning_efficient(?:\.\w+)+)\s*$", page.read_text(), re.M)
    ]
    assert found, "no API pages found"
    return found


def _resolve(identifier: str) -> Any:
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(identifier)


def _entries(doc: str | None, titles: tuple[str, ...]) -> set[str]:
    """The names of the entries of a docstring's Google-style sections ``titles`` (``**kwargs`` as ``kwargs``)."""
    names, inside = set(), False
    for line in inspect.cleandoc(doc or "").split("\n"):
        if re.match(rf"^({'|'.join(titles)}):\s*$", line):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            inside = False
        entry = re.match(r"^    (\*{0,2}\w+)\s*(\([^)]*\))?:", line) if inside else None
        if entry:
            names.add(entry.group(1).lstrip("*"))
    return names


def _documented_objects() -> list[tuple[str, Any]]:
    """Every function, class and public method the API pages show (a module entry: its own classes, functions)."""
    objects = []
    for identifier in _api_entries():
        obj = _resolve(identifier)
        if inspect.ismodule(obj):
            tops = [
                (f"{identifier}.{name}", member)
                for name, member in vars(obj).items()
                if not name.startswith("_")
                and getattr(member, "__module__", None) == obj.__name__
                and (inspect.isclass(member) or inspect.isfunction(member))
            ]
        else:
            tops = [(identifier, obj)]
        for name, top in tops:
            objects.append((name, top))
            if inspect.isclass(top):
                objects += [
                    (f"{name}.{attr}", member)
                    for attr, member in vars(top).items()
                    if inspect.isfunction(member) and not attr.startswith("_") and not _HOOKS.match(attr)
                ]
    return objects


def test_api_entries_document_every_parameter_and_field() -> None:
    """Each parameter of a function or class on the API pages, and each field of a dataclass there, has its own
    ``Args``/``Attributes`` entry (the page shows its type and default beside it)."""
    missing = []
    for name, obj in _documented_objects():
        if not callable(obj) or inspect.isclass(obj) and issubclass(obj, (BaseException, enum.Enum, tuple)):
            continue  # constants; exceptions, enums, named tuples: no constructor called with documented arguments
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            wanted = {f.name for f in dataclasses.fields(obj)}
            have = _entries(obj.__doc__, ("Attributes", "Args"))
        elif inspect.isclass(obj):
            wanted = set(inspect.signature(obj.__init__).parameters) - {"self"}
            have = _entries(f"{obj.__doc__}\n\n{obj.__init__.__doc__ or ''}", ("Args", "Attributes"))
        else:
            wanted = set(inspect.signature(obj).parameters) - {"self", "cls"}
            have = _entries(obj.__doc__, ("Args",))
        if wanted - have:
            missing.append(f"{name}: {', '.join(sorted(wanted - have))}")
    assert len(_documented_objects()) > 50, "the API pages' objects were not found"
    assert not missing, "no entry of their own on the API pages:\n" + "\n".join(missing)
