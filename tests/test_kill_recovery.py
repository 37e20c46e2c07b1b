"""The issue's kill table, a few randomised runs per row.

"Crash-proof jobs: a killed driver, writer or task leaves a job that can be finished or
rolled back exactly, with zero leaked uploads." Each test runs one row of the table
(``helpers.kill_harness.ROWS``): a job in a child process is SIGKILLed at a random
moment of the row's phase (or runs under injected faults), a fresh process recovers it,
and the harness checks what the store holds — visible files and their bytes,
``_SUCCESS``, pending uploads, the job's tree, the staging directory — before and after
a second recovery call (the rules: ``helpers.kill_harness.judge``).

Seeds are random per session and printed; ``MAGICFS_KILL_SEED=<seed>`` replays a run
(its timing varies, so it lands near the same request) and ``MAGICFS_KILL_RUNS`` sets
the runs per row. ``python benchmarks/kill_runs.py --runs 20`` runs many more.
"""

from __future__ import annotations

import os
import random

import pytest
from helpers.kill_harness import ROWS, KillHarness

pytestmark = pytest.mark.slow

RUNS = int(os.environ.get("MAGICFS_KILL_RUNS", "2"))
FIRST_SEED = int(os.environ.get("MAGICFS_KILL_SEED") or random.SystemRandom().randrange(10**6))


@pytest.fixture(scope="module")
def harness(s3_server, tmp_path_factory):
    return KillHarness(s3_server.endpoint_url, str(tmp_path_factory.mktemp("kill")))


@pytest.mark.parametrize("row", list(ROWS))
def test_every_run_of_the_row_is_clean(harness, row):
    calibrations = len(harness.calibration_results)
    results = [harness.run(ROWS[row], seed) for seed in range(FIRST_SEED, FIRST_SEED + RUNS)]
    for result in results:
        print(result.line())

    unclean = [r for r in results if not r.clean]
    assert not unclean, "\n".join(
        f"{r.line()}\n  steps: {r.steps}\n  replay: MAGICFS_KILL_SEED={r.seed} "
        f"MAGICFS_KILL_RUNS=1 pytest 'tests/test_kill_recovery.py::"
        f"test_every_run_of_the_row_is_clean[{row}]'  or  {r.replay()}"
        for r in unclean
    )
    # The unkilled runs that calibrated the phases are checked exactly the same way.
    for calibration in harness.calibration_results[calibrations:]:
        assert calibration.clean, calibration.line()
    if ROWS[row].faults:  # the faults did happen (else the run proved nothing)
        injected = sum(
            sum(sum(op["faults"].values()) for op in r.faults["stats"].values()) for r in results
        )
        assert injected > 0, [r.line() for r in results]
