"""Sizes a reader can hold in mind: no class over 400 lines, no function over 60, in magicfs/.

Lines are counted from ``def``/``class`` to the unit's last line, less its own docstring
(a public entry point may explain itself at length: that is not code to hold in mind).

A unit bigger than that is where two jobs hide in one (docs/development.md, "Code a newcomer
can read"). :data:`ALLOWED` names the exceptions, each with why it stays whole; a new
exception needs a line there, which a reviewer sees.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "magicfs"
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 60

#: ``"module.py:Qualified.name"`` -> why it stays longer than the limit.
ALLOWED: dict[str, str] = {}


def units() -> list[tuple[str, str, int, int]]:
    """(where, kind, lines, limit) of every class and function in magicfs/."""
    found: list[tuple[str, str, int, int]] = []
    for source in sorted(PACKAGE.rglob("*.py")):
        relative = source.relative_to(PACKAGE).as_posix()
        _visit(ast.parse(source.read_text()), f"{relative}:", found)
    return found


def _docstring_lines(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of the unit's own docstring: words for the reader, not code to hold in mind."""
    first = node.body[0]
    is_text = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if is_text and isinstance(first.value.value, str):  # type: ignore[attr-defined]
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def _visit(node: ast.AST, prefix: str, found: list[tuple[str, str, int, int]]) -> None:
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            _visit(child, prefix, found)
            continue
        name = f"{prefix}{child.name}"
        lines = (child.end_lineno or child.lineno) - child.lineno + 1 - _docstring_lines(child)
        if isinstance(child, ast.ClassDef):
            found.append((name, "class", lines, MAX_CLASS_LINES))
        else:
            found.append((name, "function", lines, MAX_FUNCTION_LINES))
        _visit(child, name + ".", found)


def test_no_unit_is_oversize_and_every_allowance_is_needed():
    sizes = {where: (kind, lines, limit) for where, kind, lines, limit in units()}
    oversize = [
        f"{where}: {kind} of {lines} lines (limit {limit})"
        for where, (kind, lines, limit) in sizes.items()
        if lines > limit and where not in ALLOWED
    ]
    stale = [
        f"{where}: no longer over its limit (or gone): remove it from ALLOWED"
        for where in ALLOWED
        if where not in sizes or sizes[where][1] <= sizes[where][2]
    ]
    assert oversize + stale == [], "split these, or say in ALLOWED why they stay whole:\n" + (
        "\n".join(oversize + stale)
    )
