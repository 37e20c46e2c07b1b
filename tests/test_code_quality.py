"""The house rules a machine can check, run by the README's one test command.

ruff (lint and format) and mypy run on the repository as a contributor would run them;
each test fails with the tool's own report, which names the file and line to fix.
"""

from __future__ import annotations

import pathlib
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
