"""Running the ``magicfs`` command as operators do: a separate process, real exit codes."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CliResult:
    """What one ``magicfs`` process printed and how it exited."""

    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> CliResult:
    """``python -m magicfs ARGS`` in a child process with this interpreter.

    Every run is checked for a Python traceback: expected errors must end in one line.
    """
    completed = subprocess.run(
        [sys.executable, "-m", "magicfs", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
    result = CliResult(tuple(args), completed.returncode, completed.stdout, completed.stderr)
    assert "Traceback" not in result.output, result.output
    return result
