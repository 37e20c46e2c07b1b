"""The README tells the truth: its examples run as pasted, CI runs the README's test
command, and the demo prints what the README shows.

Every ``python`` block of the README runs verbatim in a fresh process of its own, with
nothing bound beforehand (each starts its own server with ``magicfs.local_s3``, and the
Spark block its own session); a check appended after the block then lists what it left
in the bucket. The environment keeps Spark and Ray on 127.0.0.1 (see docs/engines/ray.md),
as a reader's shell would only if they asked for it; the blocks themselves are unchanged.
tests/test_docs.py runs the other pages' examples.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from magicfs.integrations.demo import LATENCY_MS, THREADS

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def python_blocks() -> list[tuple[int, str]]:
    """``(line, code)`` of every ``python`` block of the README."""
    return [
        (README.count("\n", 0, match.start(1)) + 1, match[1])
        for match in PYTHON_BLOCK.finditer(README)
    ]


#: Run after a block, in its process: what the block left in bucket ``bkt``.
CHECK = """
import json as _json
import s3fs as _s3fs
_fs = _s3fs.S3FileSystem(skip_instance_cache=True, **opts)
_keys = sorted(_fs.find("bkt"))
_pending = _fs.call_s3("list_multipart_uploads", Bucket="bkt").get("Uploads", [])
print("CHECK " + _json.dumps({"keys": _keys, "pending": len(_pending)}))
"""


def block_params():
    for line, code in python_blocks():
        slow = bool(re.search(r"\bpyspark\b|\bimport ray\b", code))
        yield pytest.param(line, code, id=f"README.md:{line}", marks=[pytest.mark.slow] * slow)


def loopback_environment(home: pathlib.Path) -> dict[str, str]:
    """The process's environment, with Spark and Ray kept on 127.0.0.1: Spark binds its
    driver to ``SPARK_LOCAL_IP``; Ray needs no usage stats, the loopback address as its
    node address, and a ``HOME`` whose ``ray_bootstrap_config.yaml`` stops its dashboard
    probing cloud metadata (docs/engines/ray.md)."""
    (home / "ray_bootstrap_config.yaml").write_text("{}\n")
    return {
        **os.environ,
        "HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def engine(code: str) -> str:
    """The engine a block shows: the magicfs module it imports (``magicfs``: pandas)."""
    return re.search(r"^import magicfs(?:\.(\w+))?$", code, re.M)[1] or "pandas"


#: What each block prints: what it committed, or read back.
PRINTED = {
    "pandas": r"3 files, \d+ bytes\n\{2023: 3, 2024: 3, 2025: 3\}\n",
    "spark": r"3 rows in 3 partitions\n",
    "dask": r"\d+ files from 4 partitions\n",
    "ray": r"\d+ files from \d+ write tasks\n",
    "duckdb": r"3 files from one COPY, committed as one job\n",
}


def test_the_readme_is_at_most_250_lines():
    assert len(README.splitlines()) <= 250


#: The extras each block needs, as its heading names them.
EXTRAS = {
    "pandas": "`demo`",
    "spark": "`demo,spark`",
    "dask": "`demo,dask`",
    "ray": "`demo,ray`",
    "duckdb": "`demo,duckdb`",
}


def test_each_quick_start_names_the_extras_it_needs():
    for line, code in python_blocks():
        heading = README[: README.index(f"```python\n{code}")].rstrip().rsplit("\n\n", 1)[1]
        assert f"extra{'s' if ',' in EXTRAS[engine(code)] else ''} {EXTRAS[engine(code)]}" in (
            heading
        ), f"README.md:{line}: {heading}"


def test_the_readme_has_one_example_per_engine():
    assert [engine(code) for _, code in python_blocks()] == list(PRINTED)


@pytest.mark.parametrize(("line", "code"), list(block_params()))
def test_readme_examples_run_as_pasted(line, code, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", code + CHECK],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=loopback_environment(tmp_path),
    )
    assert result.returncode == 0, f"README.md:{line}\n{result.stdout}\n{result.stderr[-5000:]}"
    printed, _, check = result.stdout.rpartition("CHECK ")
    left = json.loads(check)
    dest = re.search(r'"s3://(bkt/\w+)"', code)[1]
    data = [
        key
        for key in left["keys"]
        if not key.endswith("/_SUCCESS") and f"{dest}/_magicfs/jobs/" not in key
    ]
    # The job committed: its _SUCCESS, its commit record, its files in Hive directories,
    # nothing else.
    assert f"{dest}/_SUCCESS" in left["keys"]
    assert data and all(
        re.fullmatch(rf"{dest}/(year=\d{{4}}/)(region=\w+/)?[^/]+", k) for k in data
    )
    assert left["pending"] == 0
    assert re.fullmatch(PRINTED[engine(code)], printed), printed
    if engine(code) == "spark":
        directories = {key.rsplit("/", 1)[0] for key in data}
        assert directories == {
            f"{dest}/year=2024/region=north",
            f"{dest}/year=2024/region=south",
            f"{dest}/year=2025/region=north",
        }


def test_ci_runs_exactly_the_readme_test_command():
    """The README and the development guide show the command CI runs, exactly."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert "pytest" in ci
    assert f"```bash\n{ci}\n```" in README
    assert f"```bash\n{ci}\n```" in (ROOT / "docs" / "development.md").read_text()


def comparison(text: str) -> dict[str, tuple[str, str]]:
    """The rows of the demo's comparison table: label -> (magicfs, v1 rename)."""
    start = re.search(r"^5\. ", text, flags=re.M).start()
    rows = {}
    for line in text[start:].splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) == 3:
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def words(text: str) -> list[str]:
    """The text without its numbers and layout."""
    return re.findall(r"[a-zA-Z]+", text)


def number(cell: str) -> int:
    return int(cell.replace(",", ""))


def test_the_demo_prints_what_the_readme_shows():
    shown = README.split("```text\n", 1)[1].split("```", 1)[0]
    result = subprocess.run(
        [sys.executable, "-m", "magicfs", "demo"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout
    # The same section, the same explanation around the table (the shape of the output).
    section = printed[printed.index("\n5. ") :].split("\ndemo finished")[0].strip()
    assert words(section) == words(shown)

    expected, got = comparison(shown), comparison(printed)
    assert list(got) == list(expected)
    # What does not depend on the machine's load is exactly the README's (bytes within
    # 2%: Parquet's footer names the pyarrow version that wrote it).
    for label in (
        "files published",
        "server-side copies",
        "requests, task commits",
        "requests, job commit",
    ):
        assert got[label] == expected[label], label
    for side in (0, 1):
        shown_bytes = number(expected["bytes copied on the server"][side])
        got_bytes = number(got["bytes copied on the server"][side])
        assert abs(got_bytes - shown_bytes) <= 0.02 * shown_bytes
    # Counted by the server: no copy by magicfs, two of every file by v1.
    assert got["bytes copied on the server"][0] == "0"
    assert got["server-side copies"][0] == "0"
    assert number(got["server-side copies"][1]) == 2 * number(got["files published"][1])
    # v1 copies every committed byte twice: at task commit and again at job commit.
    committed = number(re.search(r"committed \d+ files \(([\d,]+) B\)", printed).group(1))
    assert number(got["bytes copied on the server"][1]) == 2 * committed
    # The files a reader lists after each run (the demo counts them on the store, with
    # their sizes): every file the demo job committed, on both sides.
    job_files = re.search(r"committed (\d+) files \(", printed).group(1)
    assert got["files published"] == (job_files, job_files)
    # Times, the README's and this run's: no phase can beat what its own request count
    # costs on the costly server, where every request waits LATENCY_MS and at most THREADS
    # are in flight (the demo's settings, read from its module): requests / THREADS *
    # LATENCY_MS. A table whose seconds were not measured on that server, or not of those
    # requests (a phase timed around nothing, milliseconds printed as seconds), fails.
    for table in (expected, got):
        for phase in ("task commits", "job commit"):
            for side in (0, 1):
                median, low, high = map(
                    float,
                    re.fullmatch(
                        r"(\d+\.\d\d) \((\d+\.\d\d)-(\d+\.\d\d)\)", table[f"seconds, {phase}"][side]
                    ).groups(),
                )
                floor = number(table[f"requests, {phase}"][side]) / THREADS * LATENCY_MS / 1000
                assert floor <= low <= median <= high, (phase, side, floor, table)
