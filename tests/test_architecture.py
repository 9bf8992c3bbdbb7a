"""The layer order of ARCHITECTURE.md, checked on the source: every module imports only from its own layer and the
layers below it, the cores (``functional/``) import no Lightning, ``app/`` uses public names only, and no module
reaches into another module's private names.

:data:`LAYERS` is the table of ARCHITECTURE.md; :func:`violations` checks a set of module sources against it, so
that the tests below can show that each kind of violation, added by hand, is caught."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lightning_efficient"

#: Each module or folder of the package (relative to it) and its layer: a module imports only from its own layer
#: and lower ones. The most specific entry decides (a module before its folder). Lowest first, as ARCHITECTURE.md.
LAYERS: dict[str, int] = {
    "functional/": 0,  # pure cores: torch (kornia for augmentation), no Lightning
    "data/": 1,  # loading and decoding images on the CPU, describing them for the device
    "precision.py": 2,  # the environment: precision rules, machine description, Lightning's chatter
    "doctor.py": 2,
    "quiet.py": 2,
    "adapter.py": 2,  # the Lightning adapter: both packages' Callback, Trainer-like protocols
    "pipeline.py": 3,  # the batch pipeline on the transfer hooks
    "fetch_timing.py": 3,  # the data wait around Lightning's fetch
    "progress.py": 3,  # the position in the run, from a Trainer
    "callbacks/": 4,  # one callback per file; what each callback does to a run (roles.py)
    "recipe.py": 6,  # the Trainer keyword arguments that turn everything on
    "tuning/": 5,  # tune(), one package: its records, policy, result, store, fits and front end
    "__init__.py": 7,  # the public API
    "app/": 8,  # the command-line app: public names only
    "__main__.py": 8,
}
LIGHTNING = ("pytorch_lightning", "lightning", "lightning_fabric", "lightning_utilities")
CORES = ("functional/",)  #: folders that import no Lightning package


def layer(rel: str) -> int:
    """The layer of the module at ``rel`` (a path relative to the package, ``/`` separated)."""
    keys = [k for k in LAYERS if rel == k or (k.endswith("/") and rel.startswith(k))]
    if not keys:
        raise KeyError(f"{rel}: not in LAYERS (add it, and to ARCHITECTURE.md)")
    return LAYERS[max(keys, key=len)]


def imports(source: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``source`` (``names`` empty for ``import x``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def package_sources() -> dict[str, str]:
    """Every module of the package: its path relative to the package -> its source."""
    return {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(module: str, name: Optional[str], sources: dict[str, str]) -> Optional[str]:
    """The relative path of our module that ``from module import name`` (``name`` None: ``import module``) reads:
    the submodule ``name`` where there is one, else ``module`` itself; ``None`` for another package's module."""
    if module != "lightning_efficient" and not module.startswith("lightning_efficient."):
        return None
    parts = module.split(".")[1:]
    package = "/".join([*parts, "__init__.py"])
    if name and package in sources and name in public_names(package, sources):
        return package  # a name the package exports (lightning_efficient.recipe is the function, not the module)
    for cand in ([*parts, name] if name else None, parts):
        if cand is None:
            continue
        base = "/".join(cand)
        for rel in (f"{base}.py", f"{base}/__init__.py" if base else "__init__.py"):
            if rel in sources:
                return rel
    return None


def public_names(rel: str, sources: dict[str, str]) -> set[str]:
    """The names a package's ``__init__.py`` lists in ``__all__`` (none for a plain module)."""
    if not rel.endswith("__init__.py"):
        return set()
    for node in ast.walk(ast.parse(sources[rel])):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return set()


def violations(sources: dict[str, str]) -> list[str]:
    """Every breach of the rules in ``sources`` (relative path -> source), one sentence each."""
    found = []
    for rel, source in sources.items():
        mine = layer(rel)
        for module, names in imports(source):
            top = module.split(".")[0]
            if any(rel.startswith(core) for core in CORES) and top in LIGHTNING:
                found.append(f"{rel}: a core imports Lightning ({module})")
            for name in names or [None]:
                target = resolve(module, name, sources)
                if target is None:
                    continue
                if layer(target) > mine:
                    found.append(f"{rel} (layer {mine}) imports {target} (layer {layer(target)}): a higher layer")
                if name and name.startswith("_") and target != rel:
                    found.append(f"{rel}: imports the private name {name} of {target}")
                in_app = rel.startswith("app/") or rel == "__main__.py"
                if in_app and not target.startswith("app/") and name not in public_names(target, sources):
                    found.append(f"{rel}: uses {module}.{name or ''}, not a public name (lightning_efficient.__all__)")
    return found


def test_every_module_has_a_layer() -> None:
    for rel in package_sources():
        layer(rel)


def test_the_package_keeps_its_layers() -> None:
    found = violations(package_sources())
    assert not found, "\n".join(found)


def test_the_architecture_document_names_every_layer_folder_and_module() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    names = {key.rstrip("/").split("/")[-1] for key in LAYERS}
    for rel in package_sources():
        *folders, module = rel.split("/")
        names |= {f"{folder}/" for folder in folders} | {module.removesuffix(".py")}
    missing = sorted(name for name in names if name not in text)
    assert not missing, f"ARCHITECTURE.md does not name: {missing}"


#: One violation of each kind, added by hand to a module that keeps the rules: (module, line added, words expected).
INJECTED = {
    "higher layer": ("functional/crop.py", "from lightning_efficient.callbacks import ChannelsLast", "higher layer"),
    "higher layer (data)": ("data/loader.py", "from lightning_efficient.pipeline import add_stage", "higher layer"),
    "callbacks use tune()'s fits": ("callbacks/channels_last.py", "import lightning_efficient.tuning.tuner", "higher"),
    "non-public name in app": ("app/cli.py", "from lightning_efficient.quiet import no_lightning_info", "public"),
    "a module, not a name, in app": ("app/cli.py", "from lightning_efficient.data import samples", "public"),
    "Lightning in a core": ("functional/batch.py", "import pytorch_lightning as pl", "Lightning"),
    "lightning_utilities in a core": (
        "functional/layout.py",
        "from lightning_utilities.core.apply_func import apply_to_collection",
        "Lightning",
    ),
    "lightning.pytorch in a core": ("functional/resize.py", "from lightning.pytorch import Trainer", "Lightning"),
    "a private name": ("callbacks/gpu_decode.py", "from lightning_efficient.pipeline import _Stage", "private"),
}


@pytest.mark.parametrize("kind", list(INJECTED))
def test_each_kind_of_violation_added_by_hand_is_caught(kind: str) -> None:
    rel, line, words = INJECTED[kind]
    sources = package_sources()
    assert rel in sources and line not in sources[rel]
    sources[rel] = f"{line}\n{sources[rel]}"
    found = violations(sources)
    assert found and all(rel in f for f in found), found
    assert any(words in f for f in found), found
