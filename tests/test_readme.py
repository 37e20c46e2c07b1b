"""The README tells the truth: CI runs the README's test command, and the demo prints
what the README shows.

The README's code examples run in tests/test_docs.py, with the documentation's.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


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
    assert got["bytes copied on the server"][0] == "0"
    assert got["server-side copies"][0] == "0"
    # v1 copies every committed byte twice: at task commit and again at job commit.
    committed = number(re.search(r"committed \d+ files \(([\d,]+) B\)", printed).group(1))
    assert number(got["bytes copied on the server"][1]) == 2 * committed
    # Times: the median of the runs with their range, min <= median <= max.
    for label in ("seconds, task commits", "seconds, job commit"):
        for cell in got[label]:
            median, low, high = map(
                float, re.fullmatch(r"(\d+\.\d\d) \((\d+\.\d\d)-(\d+\.\d\d)\)", cell).groups()
            )
            assert low <= median <= high
