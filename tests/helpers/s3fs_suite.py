"""s3fs's own test suite, run on plain s3fs and through ``magicfs.install()`` (issue 54).

    python tests/helpers/s3fs_suite.py [--cache DIR] [-k EXPRESSION]

Fetches the sdist of the *installed* s3fs release (``pip download --no-binary :all:
--no-deps s3fs==<version>``, once, into ``--cache``), runs its tests unmodified with this
Python twice, first as they are, then with ``-p s3fs_suite_plugin`` (``s3fs.S3FileSystem``
resolved to the class ``magicfs.install()`` registers), prints both counts and every test
that passed on s3fs and not through magicfs, and exits 1 if there is one (0 otherwise).
Each side's pytest output is kept beside the sources (``report-s3fs.log``,
``report-magicfs.log``).
``tests/test_s3fs_suite.py`` runs it in the suite.

s3fs's tests start their own moto servers on fixed ports (127.0.0.1:5555 and :5556,
constants in their files, no option to change them). Nothing of magicfs's suite uses
those ports (its servers take free ports the system gives, which on Linux are 32768 and
up), but two runs of this script at once would share them; so the two sides run one
after the other, each holding an exclusive lock (``magicfs-s3fs-suite.lock`` in the
system's temporary directory): a second run, from another worker or checkout, waits.
A port already taken by another program is reported by name before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.metadata
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: The fixed ports of s3fs's own moto servers (``s3fs/tests/test_s3fs.py`` and
#: ``s3fs/tests/derived/s3fs_fixtures.py``).
S3FS_PORTS = (5555, 5556)
LOCK = Path(tempfile.gettempdir()) / "magicfs-s3fs-suite.lock"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "magicfs-s3fs-sdist"
#: Seconds one of s3fs's tests may take (its slowest took 140 s on a machine under heavy load).
TEST_TIMEOUT = 600


@dataclass
class Side:
    """One run of the suite: each test's outcome by its id, and the seconds it took."""

    name: str
    outcomes: dict[str, str]
    seconds: float

    def passed(self) -> set[str]:
        return {test for test, outcome in self.outcomes.items() if outcome == "passed"}


def s3fs_sources(cache: Path) -> Path:
    """The unpacked sdist of the installed s3fs release (downloaded on first use)."""
    version = importlib.metadata.version("s3fs")
    unpacked = cache / f"s3fs-{version}"
    if (unpacked / "s3fs" / "tests").is_dir():
        return unpacked
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"s3fs=={version}",
                "-d",
                download,
            ],
            check=True,
        )
        (archive,) = Path(download).glob("s3fs-*.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(download, filter="data")
        (Path(download) / f"s3fs-{version}").rename(unpacked)
    return unpacked


@contextlib.contextmanager
def exclusive_ports() -> Iterator[None]:
    """Hold the machine-wide lock of s3fs's fixed ports; refuse if a stranger holds them."""
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for port in S3FS_PORTS:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    raise SystemExit(
                        f"s3fs's tests start moto on 127.0.0.1:{port}, which another "
                        "program is listening on: stop it and run again"
                    )
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_side(sources: Path, name: str, plugin: bool, pytest_args: list[str]) -> Side:
    """s3fs's tests on one side; outcomes read from pytest's JUnit XML report."""
    report = sources / f"report-{name}.xml"
    command = [sys.executable, "-m", "pytest", "s3fs/tests", "-q", "-p", "no:cacheprovider"]
    command += ["--rootdir", str(sources), "--confcutdir", str(sources)]
    command += ["--junitxml", str(report), "-o", "junit_family=xunit1", *pytest_args]
    # a test that hangs fails (pytest-timeout, from the test extra), on both sides alike
    command += ["--timeout", str(TEST_TIMEOUT)]
    env = dict(os.environ)
    # s3fs and its tests from the sdist (the installed release's own files, as s3fs's
    # developers run them: its wheel ships no tests); the plugin and magicfs from this
    # checkout.
    env["PYTHONPATH"] = os.pathsep.join([str(sources), str(HERE), str(REPO)])
    if plugin:
        command += ["-p", "s3fs_suite_plugin"]
    start = time.monotonic()
    with exclusive_ports(), (sources / f"report-{name}.log").open("w") as log:
        subprocess.run(command, cwd=sources, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Side(name, read_outcomes(report), time.monotonic() - start)


def read_outcomes(report: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcome = next((kind for kind in ("error", "failure", "skipped") if kind in kinds), None)
        outcomes[test] = outcome or "passed"
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("-k", dest="keyword", help="only the tests pytest's -k selects")
    args = parser.parse_args(argv)
    pytest_args = ["-k", args.keyword] if args.keyword else []
    sources = s3fs_sources(args.cache)
    version = importlib.metadata.version("s3fs")
    plain = run_side(sources, "s3fs", plugin=False, pytest_args=pytest_args)
    magic = run_side(sources, "magicfs", plugin=True, pytest_args=pytest_args)
    lost = sorted(plain.passed() - magic.passed())
    print(f"s3fs {version}'s own tests ({len(plain.outcomes)} run):")
    for side in (plain, magic):
        label = "plain s3fs" if side is plain else "through magicfs.install()"
        print(f"  {label:<26} {len(side.passed()):>4} passed  ({side.seconds:.0f} s)")
    print(f"  passed on s3fs, not through magicfs: {len(lost)}")
    for test in lost:
        print(f"    {test}: {magic.outcomes.get(test, 'not run')}")
    return 1 if lost or not plain.passed() else 0


if __name__ == "__main__":
    sys.exit(main())
