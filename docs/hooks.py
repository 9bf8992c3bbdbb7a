"""MkDocs hooks of the documentation site (mkdocs.yml: ``hooks: [docs/hooks.py]``).

- ``on_files``: adds ``benchmarks/results/*`` (pages ``benchmarks/<name>.md``, their images and JSON) and
  ``notebooks/*.ipynb`` (rendered by mkdocs-jupyter with their stored outputs) to the site from where they live
  in the repository, so they are never duplicated under ``docs/`` in git; and checks that every public name of
  ``lightning_efficient.__all__`` has an API entry (``::: lightning_efficient.<name>`` in ``docs/api/*.md``).
- ``on_config``: the package version (``lightning_efficient.__version__``, read without importing) in the site name.
- ``on_files`` also adds ``CHANGELOG.md`` as the page ``changelog.md``.
- ``on_page_markdown`` fills the command-line page (``docs/api/cli.md``): each ``<!-- cli-help: CMD -->`` line
  becomes the ``--help`` text of ``lightning-efficient CMD``, from the parser in ``lightning_efficient/app/cli.py``
  (loaded from its file, without importing the package), wrapped to the page's code width.
- ``on_page_markdown``: a note on each results page saying which repository file it is; nested lists indented
  by 2 spaces (as GitHub reads them) made readable for Python-Markdown; the changelog's links to results files
  pointed at their pages.
- ``on_page_content``: removes the CDN scripts (MathJax, Mermaid) that nbconvert's template adds to every
  notebook page (the notebooks use neither), rebuilds a notebook page's table of contents from its headings,
  adds a download link to the ``.ipynb`` under its title, and halves the notebook's weight in the search.
- ``on_post_build``: fails the build (a warning, under ``--strict``) if any built page or stylesheet still
  loads a script, stylesheet, font or image from the network, so the site keeps working offline.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.toc import get_toc

log = logging.getLogger("mkdocs.hooks.lightning_efficient")

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOKS = ROOT / "notebooks"
PACKAGE_INIT = ROOT / "lightning_efficient" / "__init__.py"
API_DIR = Path(__file__).resolve().parent / "api"

RESULT_SUFFIXES = {".md", ".png", ".svg", ".jpg", ".json"}
NOT_DOCUMENTED = {"__version__"}  # in __all__, but not an object with a docstring
CHANGELOG = ROOT / "CHANGELOG.md"
CLI = ROOT / "lightning_efficient" / "app" / "cli.py"
CLI_COLUMNS = 80  # argparse wraps its help to $COLUMNS - 2: lines that fit the page's code blocks


def _version() -> str:
    match = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", PACKAGE_INIT.read_text(encoding="utf-8"), re.MULTILINE)
    return match.group(1) if match else "unknown"


def on_config(config):
    config.site_name = f"{config.site_name} {_version()}"
    return config


def _add(files: Files, config, src_uri: str, path: Path) -> None:
    if files.get_file_from_path(src_uri) is not None:
        log.warning("%s exists in docs/ and in %s: keep it in one place", src_uri, path.relative_to(ROOT))
        return
    if path == ROOT / src_uri:
        # Same relative path as in the repository (the notebooks): a plain File rooted at the repository, as
        # mkdocs-jupyter finds a notebook's path through the file's src_dir (it does not see generated files).
        file = File(src_uri, src_dir=str(ROOT), dest_dir=config.site_dir, use_directory_urls=config.use_directory_urls)
    else:
        # NOT_IN_NAV: results files that the nav does not list are still built, without a warning.
        file = File.generated(config, src_uri, abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV)
    files.append(file)


def _public_names() -> list[str]:
    tree = ast.parse(PACKAGE_INIT.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    return []


def _check_api_coverage() -> None:
    documented = set()
    for page in API_DIR.glob("*.md"):
        # e.g. "::: lightning_efficient.ChannelsLast", or "::: lightning_efficient.recipe.recipe" (the function;
        # "lightning_efficient.recipe" is the module of the same name)
        ids = re.findall(r"^:::\s*(lightning_efficient(?:\.\w+)+)\s*$", page.read_text(), re.MULTILINE)
        documented |= {i.rsplit(".", 1)[-1] for i in ids}
    missing = [n for n in _public_names() if n not in documented and n not in NOT_DOCUMENTED]
    if missing:
        log.warning(
            "public names without an API entry: %s; add '::: lightning_efficient.<name>' to a page in docs/api/",
            ", ".join(missing),
        )


# Before mkdocs-jupyter's on_files (priority 0), which turns .ipynb files into pages.
@event_priority(100)
def on_files(files: Files, config) -> Files:
    for path in sorted(RESULTS.rglob("*")):  # subfolders too (e.g. results/gpu/ -> benchmarks/gpu/)
        if path.is_file() and path.suffix in RESULT_SUFFIXES:
            _add(files, config, f"benchmarks/{path.relative_to(RESULTS).as_posix()}", path)
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        _add(files, config, f"notebooks/{path.name}", path)
    files.append(File.generated(config, "changelog.md", abs_src_path=str(CHANGELOG)))
    _check_api_coverage()
    return files


_CLI_HELP = re.compile(r"^<!-- cli-help:\s*(\w*)\s*-->$", re.MULTILINE)


def _cli_help(command: str) -> str:
    """``lightning-efficient [command] --help`` as the parser prints it, in a fenced block."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location("_lightning_efficient_cli", CLI)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # argparse only: the commands import the package when they run
    parser = module.build_parser()
    if command:
        subparsers = next(a for a in parser._actions if a.dest == "command")
        if command not in subparsers.choices:
            log.warning("docs/api/cli.md: no command %r in %s", command, CLI.relative_to(ROOT))
            return ""
        parser = subparsers.choices[command]
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(CLI_COLUMNS)
    try:
        text = parser.format_help()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return f"```text\n$ lightning-efficient {command + ' ' if command else ''}--help\n{text.rstrip()}\n```"


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    if src == "api/cli.md":
        return _CLI_HELP.sub(lambda m: _cli_help(m.group(1)), markdown)
    if src == "changelog.md":
        return markdown.replace("](benchmarks/results/", "](benchmarks/")
    if src.startswith("benchmarks/") and src != "benchmarks/index.md":
        name = src.split("/", 1)[1]  # e.g. "tune.md" or "gpu/input_pipeline.md"
        raw = Path(name).with_suffix(".json")
        data = f" Raw figures: [{raw.name}]({raw.name})." if (RESULTS / raw).is_file() else ""
        overview = "../" * name.count("/") + "index.md"
        note = (
            f'!!! info "Results file"\n    `benchmarks/results/{name}` as the benchmark wrote it, with the machine '
            f"it ran on at the end.{data} All benchmarks: [overview]({overview}).\n\n"
        )
        markdown = _gfm_indents(markdown)
        # after the page's title, so the title stays the first heading
        head, sep, rest = markdown.partition("\n")
        return head + sep + "\n" + note + rest if head.startswith("# ") else note + markdown
    return markdown


def _gfm_indents(markdown: str) -> str:
    """Nested lists as the results files write them (2 spaces, as GitHub reads them) for Python-Markdown (4).

    Doubles the leading spaces of every indented line outside fenced code blocks: in these files only list items
    and their continuation lines are indented.
    """
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            line = re.sub(r"^( +)(?=\S)", lambda m: m.group(1) * 2, line)
        lines.append(line)
    return "\n".join(lines)


_CDN_BLOCKS = [
    # nbconvert's MathJax loader and its configuration
    re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL),
    # nbconvert's Mermaid loader (imports mermaid from a CDN when a diagram is present)
    re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*?</script>', re.DOTALL),
]


_HEADING = re.compile(r"<h([1-6])\b[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</h\1>", re.DOTALL)


def _notebook_toc(html: str):
    """The page's table of contents from the headings of the rendered notebook.

    mkdocs-jupyter builds it from a Markdown conversion of the notebook, which drops inline code from a heading's
    text and so from its anchor ("3. In a Trainer: `StepwiseLR()` with ..."), leaving TOC links that point nowhere.
    """
    root: list[dict] = []
    stack: list[dict] = []
    for level, anchor, inner in _HEADING.findall(html):
        inner = re.sub(r"<a class=\"anchor-link\".*?</a>", "", inner, flags=re.DOTALL)
        name = re.sub(r"<[^>]+>", "", inner).strip()
        token = {"level": int(level), "id": anchor, "name": name, "children": []}
        while stack and stack[-1]["level"] >= token["level"]:
            stack.pop()
        (stack[-1]["children"] if stack else root).append(token)
        stack.append(token)
    return get_toc(root)


def on_page_content(html: str, page, config, files) -> str:
    if page.file.src_uri.endswith(".ipynb"):
        for pattern in _CDN_BLOCKS:
            html = pattern.sub("", html)
        page.toc = _notebook_toc(html)
        # a download link under the notebook's title (the .ipynb is copied beside the page)
        name = Path(page.file.src_uri).name
        link = (
            f'<p class="le-download"><a href="{name}" download>Download this notebook ({name})</a>: '
            f"run it from the clone's <code>notebooks/</code> folder.</p>"
        )
        head, sep, rest = html.partition("</h1>")
        html = head + sep + link + rest if sep else link + html
        # Material's search: notebook cells below the guide and API pages that explain the same names
        page.meta["search"] = {"boost": 0.5}
    return html


# A network URL where a browser would fetch something by itself: script/img/iframe/source src, <link href>
# (stylesheets, icons, preconnect), CSS url(...) and @import, and dynamic import("...") in inline scripts.
_REMOTE = re.compile(
    r"""<(?:script|img|iframe|source|audio|video|embed)\b[^>]*?\ssrc\s*=\s*["']?(?:https?:)?//"""
    r"""|<link\b[^>]*?\shref\s*=\s*["']?(?:https?:)?//"""
    r"""|url\(\s*["']?(?:https?:)?//"""
    r"""|@import\s+["'](?:https?:)?//"""
    r"""|\bimport\(\s*["'](?:https?:)?//""",
    re.IGNORECASE,
)


def on_post_build(config) -> None:
    site = Path(config.site_dir)
    for path in sorted(site.rglob("*")):
        if path.suffix not in {".html", ".css"} or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in _REMOTE.finditer(text):
            snippet = text[m.start() : m.start() + 120].replace("\n", " ")
            log.warning("%s loads from the network (the site must work offline): %s", path.relative_to(site), snippet)
