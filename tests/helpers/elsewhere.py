"""Run code in another process, as the engines do: what it needs pickled to a child
Python whose import path puts this checkout first (so it runs the magicfs under test)."""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_elsewhere(script: str, payload: Any, tmp_path: pathlib.Path, name: str = "child") -> str:
    """``script`` in a child Python, the path of the pickled ``payload`` its ``argv[1]``;
    what it printed (stripped). A child that fails fails the caller."""
    spec = tmp_path / f"{name}.pkl"
    spec.write_bytes(pickle.dumps(payload))
    search = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    done = subprocess.run(
        [sys.executable, "-c", script, str(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": search},
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


#: Runs ``code`` with the pickled names bound; prints ``done``, or ``refused: <type>
#: <error>`` (a failure while one of its files closed in the background included).
EXEC = textwrap.dedent(
    """
    import pickle, sys
    from magicfs.task_files import TASK_FILES
    names, code = pickle.load(open(sys.argv[1], "rb"))
    try:
        exec(code, names)
        for _, error in TASK_FILES.settle():
            raise error
    except Exception as error:
        print("refused:", type(error).__name__, error, flush=True)
    else:
        print("done", flush=True)
    """
)


def run_code_elsewhere(code: str, tmp_path: pathlib.Path, **names: Any) -> str:
    """``code`` run in another process with ``names`` bound (pickled); what it printed."""
    return run_elsewhere(EXEC, (names, code), tmp_path)
