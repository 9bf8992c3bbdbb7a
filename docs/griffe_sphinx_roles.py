"""A griffe extension for the API pages (mkdocs.yml, mkdocstrings ``extensions``): reST markup in docstrings.

The package's docstrings are Google style with a few reStructuredText habits, which Markdown shows literally.
At build time (the package itself is not changed) this rewrites, in every docstring:

- cross-reference roles, ``:func:`~lightning_efficient.tune``` and the like, into a link to that object's API
  entry where the site has one, else into plain code (an *optional* autorefs reference: never a broken link);
  ``~`` keeps the last name only, as in Sphinx; a relative name is looked up in the object, its parent and its
  module, else taken as a public name ``lightning_efficient.<name>``;
- a literal-block marker: a line ``Example::`` becomes a bold ``Example:`` (the indented block after it is shown
  as code, as before), and ``text::`` at the end of a line becomes ``text:``;
- a ``Raises:`` or ``Warns:`` section written as free text rather than ``Name: description`` entries: shown as a
  bold label and the text, instead of being split at its first colon (or dropped) with a griffe warning.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):`(~?)([^`<>]+?)`")
_TITLE_LINE = re.compile(r"^(\s*)([A-Z][\w ]*)::\s*$", re.MULTILINE)
_TRAILING = re.compile(r"(\S)::[ \t]*$", re.MULTILINE)
_ITEM_SECTION = re.compile(r"^(\s*)(Raises|Warns|Warnings):\s*$")
_ITEM = re.compile(r"^\s+[A-Za-z_][\w.]*\s*(\([^)]*\))?:(\s|$)")


def _free_text_sections(text: str) -> str:
    """A ``Raises:``/``Warns:`` section whose first entry is not ``Name: description`` becomes a bold label.

    griffe would otherwise split its text at the first colon or drop it, with a warning; as a label, the text
    after it is shown as written.
    """
    lines = text.split("\n")
    for i, line in enumerate(lines):
        match = _ITEM_SECTION.match(line)
        if match:
            following = next((nxt for nxt in lines[i + 1 :] if nxt.strip()), "")
            if not _ITEM.match(following):
                lines[i] = f"{match.group(1)}**{match.group(2)}:**"
    return "\n".join(lines)


def _resolve(target: str, obj: griffe.Object, package: griffe.Module) -> str:
    """The full path of ``target`` as written in ``obj``'s docstring (Sphinx looks in the current module first)."""
    if target.startswith(package.name + "."):
        return target
    first = target.split(".", 1)[0]
    scopes = [obj, obj.parent, obj.module] if obj.parent is not None else [obj, obj.module]
    for scope in scopes:
        if scope is not None and first in scope.members:
            return f"{scope.path}.{target}"
    return f"{package.name}.{target}"  # the public names: lightning_efficient.<name>


def rewrite(text: str, resolve=lambda target: target) -> str:
    """The docstring ``text`` with reST roles and ``::`` markers rewritten for Markdown."""

    def role(match: re.Match) -> str:
        tilde, target = match.group(1), match.group(2).strip()
        title = target.rsplit(".", 1)[-1] if tilde else target
        return f'<autoref identifier="{resolve(target)}" optional><code>{title}</code></autoref>'

    text = _free_text_sections(text)  # before the roles, whose own colons would look like entries
    text = _ROLE.sub(role, text)
    text = _TITLE_LINE.sub(r"\1**\2:**", text)
    return _TRAILING.sub(r"\1:", text)


def _objects(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of a package once it is loaded (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj.docstring.value, lambda t, o=obj: _resolve(t, o, pkg))
