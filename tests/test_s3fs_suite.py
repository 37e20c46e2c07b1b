"""s3fs's own test suite passes through ``magicfs.install()`` as on plain s3fs (issue 54).

Runs ``tests/helpers/s3fs_suite.py``: the sdist of the installed s3fs release, its tests
unmodified, once on s3fs and once with ``s3fs.S3FileSystem`` resolved to the class
``install()`` registers; every test that passes on s3fs must pass through magicfs. Both
sides start s3fs's own moto servers on its fixed ports (5555, 5556), one side at a time
under a machine-wide lock (the script's docstring). Slow: s3fs's ~380 tests, twice.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "helpers" / "s3fs_suite.py"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_s3fs_own_suite_passes_through_install_as_on_s3fs():
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=3500
    )
    report = result.stdout + result.stderr
    run = re.search(r"own tests \((\d+) run\)", report)
    plain = re.search(r"plain s3fs\s+(\d+) passed", report)
    magic = re.search(r"through magicfs.install\(\)\s+(\d+) passed", report)
    assert run and plain and magic, report
    # the run itself works (moto started, the sdist's tests collected): s3fs passes
    # all of its tests here but the few skipped and those needing pytest-asyncio
    assert int(plain.group(1)) >= 0.95 * int(run.group(1)), report
    assert "passed on s3fs, not through magicfs: 0" in report, report
    assert int(magic.group(1)) >= int(plain.group(1)), report
    assert result.returncode == 0, report
