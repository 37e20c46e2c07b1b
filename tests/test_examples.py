"""The examples in examples/ and the demo run as documented."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_runs(example):
    result = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr
    if example.name == "pandas_job.py":
        assert result.stdout.splitlines()[0].startswith("3 files,")
        assert result.stdout.splitlines()[1] == "{2023: 3, 2024: 3, 2025: 3}"
    if example.name == "azure_job.py":
        assert result.stdout.splitlines() == [
            "visible before job commit: []",
            "committer: block-list",
            "server-side copies at job commit: 0",
            "{'north': 3, 'south': 3}",
        ]
    if example.name == "filesystem_urls.py":
        assert result.stdout.splitlines() == [
            "visible: []",
            "record: out/__magic/job-1/task-1/__base/_year=2024.magicfs-task/"
            "_part-0.csv.magicfs-task.pending",
            "published: b'a\\n1\\n2\\n'",
        ]


def test_demo_runs_and_leaves_nothing_pending():
    result = subprocess.run(
        [sys.executable, "-m", "magicfs", "demo"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "task 2 attempt 0 failed" in out
    assert "pending multipart uploads left in s3://demo: 0" in out
    assert "order ids unique: True" in out
    assert re.search(r"bytes copied on the server\s+\|\s+0 \|", out)
