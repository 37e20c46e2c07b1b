"""What an install of magicfs costs on a fresh machine: pip's resolve time, the install
time, the packages and the megabytes of a fresh venv.

    python benchmarks/install_footprint.py                 # the base install and `demo`
    python benchmarks/install_footprint.py --extras demo   # one extra ('' is the base)
    python benchmarks/install_footprint.py --python python3.13

For each install, in a fresh venv of its own (in a temporary directory, deleted after):

1. ``pip install --dry-run --ignore-installed --report``: how long pip takes to resolve,
   and how many candidates of each package it looked at (more than one: backtracking);
2. ``pip install .[EXTRAS]`` from this clone (not editable), timed;
3. the venv's size on disk (every file under it, as ``du`` counts) less the size of
   the same venv before the install (pip and its own files), the number of packages
   installed and the five largest.

Times depend on the network and the machine's load; sizes and counts do not (for the
same releases on the index). The README's figures come from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MB = 1_000_000


def size(path: pathlib.Path) -> int:
    """Bytes of every regular file under ``path`` (symlinks not followed)."""
    return sum(
        (pathlib.Path(d) / f).lstat().st_size for d, _, files in os.walk(path) for f in files
    )


def site_packages(venv: pathlib.Path) -> pathlib.Path:
    return next(venv.glob("lib/python*/site-packages"))


def package_sizes(venv: pathlib.Path) -> dict[str, int]:
    """Installed distribution -> bytes of the files its RECORD lists."""
    sizes: dict[str, int] = {}
    site = site_packages(venv)
    for record in site.glob("*.dist-info/RECORD"):
        name = record.parent.name.split("-")[0]
        total = 0
        for line in record.read_text().splitlines():
            target = site / line.split(",")[0]
            if target.is_file() and not target.is_symlink():
                total += target.stat().st_size
        sizes[name] = total
    return sizes


def measure(python: str, extras: str) -> dict[str, object]:
    spec = f"{ROOT}[{extras}]" if extras else str(ROOT)
    with tempfile.TemporaryDirectory(prefix="magicfs-footprint-") as tmp:
        venv = pathlib.Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        subprocess.run([*pip, "install", "-q", "-U", "pip"], check=True)
        empty = size(venv)
        before = set(package_sizes(venv))

        report = pathlib.Path(tmp) / "report.json"
        started = time.monotonic()
        resolved = subprocess.run(
            [
                *pip,
                "install",
                "--dry-run",
                "--ignore-installed",
                "-v",
                "--report",
                str(report),
                spec,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        resolve_seconds = time.monotonic() - started
        looked_at: dict[str, set[str]] = {}
        for name, version in re.findall(
            r"(?:Downloading|Using cached) ([A-Za-z0-9_.]+)-(\d[^-]*)-", resolved.stdout
        ):
            looked_at.setdefault(name.lower().replace("_", "-"), set()).add(version)

        started = time.monotonic()
        subprocess.run([*pip, "install", "-q", spec], check=True)
        install_seconds = time.monotonic() - started
        sizes = {k: v for k, v in package_sizes(venv).items() if k not in before}
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
        return {
            "extras": extras or "(base)",
            "python": subprocess.run(
                [str(venv / "bin" / "python"), "--version"], capture_output=True, text=True
            ).stdout.strip(),
            "resolve_seconds": round(resolve_seconds, 1),
            "backtracked": {k: len(v) for k, v in looked_at.items() if len(v) > 1},
            "install_seconds": round(install_seconds, 1),
            "packages": len(json.loads(report.read_text())["install"]),
            "megabytes": round((size(venv) - empty) / MB),
            "largest": {name: round(n / MB, 1) for name, n in largest},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the venvs' interpreter")
    parser.add_argument(
        "--extras", action="append", help="an extra to measure (repeatable; '' = the base)"
    )
    args = parser.parse_args()
    for extras in args.extras if args.extras is not None else ["", "demo"]:
        print(json.dumps(measure(args.python, extras)), flush=True)


if __name__ == "__main__":
    main()
