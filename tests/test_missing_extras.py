"""Without its extra, every optional module and command fails in one line that names the
extra to install.

Each case runs in a fresh interpreter whose import system hides the extra's packages (a
meta-path finder placed first that refuses them, as if they were not installed), then
imports the module or runs the command as a user would.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Prepended to every case: hides the top-level packages named in ``sys.argv[1]``.
HIDE = """
import importlib.abc, sys
HIDDEN = set(sys.argv[1].split(","))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
"""


def run(hidden: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE + code, hidden, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


MODULES = [
    ("pyspark", "import magicfs.spark", "spark"),
    ("dask", "import magicfs.dask", "dask"),
    ("distributed,dask", "import magicfs.dask", "dask"),
    ("ray", "import magicfs.ray", "ray"),
    ("duckdb", "import magicfs.duckdb", "duckdb"),
    ("moto", "import magicfs; magicfs.local_s3()", "demo"),
    ("flask_cors", "import magicfs; magicfs.local_s3()", "demo"),
    ("adlfs", "import magicfs; magicfs.committer_for('abfs://box/out')", "azure"),
    ("gcsfs", "import magicfs; magicfs.committer_for('gs://bkt/out')", "gcs"),
]


@pytest.mark.parametrize(("hidden", "code", "extra"), MODULES, ids=[m[1] for m in MODULES])
def test_a_module_without_its_extra_names_it(hidden, code, extra):
    result = run(hidden, code)
    assert result.returncode == 1
    # The traceback ends with one line: the error, naming the extra.
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith(f"pip install 'magicfs[{extra}]'"), result.stderr
    assert last.startswith(("ImportError: ", "ModuleNotFoundError: ")), result.stderr


COMMANDS = [
    ("moto", ["demo"], "demo"),
    ("pandas", ["demo"], "demo"),
    ("pyarrow", ["demo"], "demo"),
    ("moto", ["server"], "demo"),
    ("flask", ["server", "--bucket", "bkt"], "demo"),
    ("adlfs", ["uploads", "list", "abfs://box/out"], "azure"),
    ("gcsfs", ["jobs", "list", "gs://bkt/out"], "gcs"),
]

CLI = "import sys; from magicfs.integrations.cli import main; sys.exit(main(sys.argv[2:]))"


@pytest.mark.parametrize(
    ("hidden", "argv", "extra"), COMMANDS, ids=[f"{c[0]}-{' '.join(c[1])}" for c in COMMANDS]
)
def test_a_command_without_its_extra_says_so_in_one_line(hidden, argv, extra):
    result = run(hidden, CLI, *argv)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("magicfs: ")
    assert f"pip install 'magicfs[{extra}]'" in result.stderr
    assert hidden.split(",")[0] in result.stderr  # and which package is missing


def test_with_its_extra_the_module_imports():
    """The finder hides only what it is told to: the same interpreter, nothing hidden,
    imports every optional module (so the failures above are the hidden packages')."""
    code = "import magicfs.spark, magicfs.dask, magicfs.ray, magicfs.duckdb; print('ok')"
    result = run("nothing", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
