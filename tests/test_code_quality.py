"""The house rules a machine can check, run by the README's one test command.

ruff (lint and format) and mypy run on the repository as a contributor would run them;
each test fails with the tool's own report, which names the file and line to fix.
"""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    "command",
    [("ruff", "check", "."), ("ruff", "format", "--check", ".")],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff(command):
    result = run(*command)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_no_type_errors():
    # Settings in pyproject.toml ([tool.mypy]): the magicfs package, strict mode.
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def _committer_and_layout_classes() -> dict[str, pathlib.Path]:
    """Every class of magicfs named ``...Committer``, ``...Layout``, ``CommitterHooks`` or
    ``CommitterOptions``, with the module that defines it."""
    defined = {}
    for source in (ROOT / "magicfs").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ClassDef) and re.search(
                r"(Committer|Layout|^CommitterHooks|^CommitterOptions)$", node.name
            ):
                defined[node.name] = source
    return defined


def _named_classes(node: ast.expr) -> list[str]:
    """The class names in an ``isinstance``/``issubclass`` second argument."""
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _named_classes(element)]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return [node.id] if isinstance(node, ast.Name) else []


def test_no_type_questions_on_committers_or_layouts_outside_their_modules():
    """Operator and engine code ask a committer family what it can answer
    (``magicfs.committers.job_families``), never what class a committer or layout is:
    an ``isinstance``/``issubclass`` naming a committer or layout class stands only in
    the module that defines that class."""
    defined = _committer_and_layout_classes()
    assert {"MagicLayoutCommitter", "ManifestCommitter", "MagicJobLayout"} <= set(defined)
    asked = []
    for source in sorted((ROOT / "magicfs").rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                for name in _named_classes(node.args[1]):
                    if name in defined and defined[name] != source:
                        where = source.relative_to(ROOT)
                        asked.append(f"{where}:{node.lineno}: {node.func.id}(..., {name})")
    assert asked == [], "ask the committer family instead:\n" + "\n".join(asked)
