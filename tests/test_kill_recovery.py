"""The issue's kill table, a few randomised runs per row.

"Crash-proof jobs: a killed driver, writer or task leaves a job that can be finished or
rolled back exactly, with zero leaked uploads." Each test runs one row of the table
(``helpers.kill_harness.ROWS``): a job in a child process is SIGKILLed at a random
request of the row's phase (or runs under injected faults), a fresh process recovers it,
and the harness checks what the store holds — visible files and their bytes,
``_SUCCESS``, pending uploads, the job's tree, the staging directory — before and after
a second recovery call (the rules: ``helpers.kill_harness.judge``). A run whose kill
landed after its row's phase (the job had moved on, or finished first) is not clean: it
fails the row instead of passing for a recovery that was never needed.

The table runs on two production S3 implementations, Ceph RGW and SeaweedFS,
``MAGICFS_KILL_RUNS_EXTRA`` seeds per row (3): the rows with an S3 committer, with S3
committers only. The manifest committer's rows run on a local disk (the same whatever
the store), ``MAGICFS_KILL_RUNS`` seeds per row (1); moto, which would repeat the
production stores' S3 runs with less to find, only hosts that harness. Each S3 kill is
at one request of the phase drawn by the seed, with no added latency, so a run takes
about as long as the job.

Seeds are random per session and printed; ``MAGICFS_KILL_SEED=<seed>`` replays a run
(its timing varies, so it lands near the same request). ``python
benchmarks/kill_runs.py --runs 20`` runs many more (on moto).
"""

from __future__ import annotations

import dataclasses
import os
import random

import pytest
from helpers.kill_harness import ROWS, KillHarness, Row
from helpers.s3_targets import store_fixture

pytestmark = pytest.mark.slow

RUNS = int(os.environ.get("MAGICFS_KILL_RUNS", "1"))
EXTRA_RUNS = int(os.environ.get("MAGICFS_KILL_RUNS_EXTRA", "3"))
FIRST_SEED = int(os.environ.get("MAGICFS_KILL_SEED") or random.SystemRandom().randrange(10**6))
#: The production stores the table also runs on, leaner (module docstring).
EXTRA_STORES = ("rgw", "seaweed")


def on_s3(row: Row) -> Row | None:
    """``row`` with its S3 committers only; ``None`` if it has none."""
    committers = tuple(c for c in row.committers if c != "manifest")
    return dataclasses.replace(row, committers=committers) if committers else None


def on_disk(row: Row) -> Row | None:
    """``row`` with the manifest committer only (a local disk); ``None`` if it has none."""
    if "manifest" not in row.committers:
        return None
    return dataclasses.replace(row, committers=("manifest",))


def cases() -> list:
    """(store, row key): the manifest rows on a local disk (the harness on moto), the rows
    with an S3 committer on each production store."""
    found = [
        pytest.param("s3", key, id=f"{key}-local") for key, row in ROWS.items() if on_disk(row)
    ]
    for store in EXTRA_STORES:
        found += [
            pytest.param(store, key, id=f"{key}-{store}") for key, row in ROWS.items() if on_s3(row)
        ]
    return found


@pytest.fixture(scope="module")
def harness(request, tmp_path_factory):
    """The harness on ``request.param``'s store (moto: ``s3``), one per store."""
    server = store_fixture(request, request.param, "server")
    options = server.storage_options
    return KillHarness(
        server.endpoint_url,
        str(tmp_path_factory.mktemp("kill")),
        credentials=(options["key"], options["secret"]),
    )


@pytest.mark.parametrize(("harness", "row"), cases(), indirect=["harness"])
def test_every_run_of_the_row_is_clean(request, harness, row):
    on_moto = request.node.callspec.params["harness"] == "s3"
    table_row = on_disk(ROWS[row]) if on_moto else on_s3(ROWS[row])
    assert table_row is not None
    runs = RUNS if on_moto else EXTRA_RUNS
    calibrations = len(harness.calibration_results)
    results = [harness.run(table_row, seed) for seed in range(FIRST_SEED, FIRST_SEED + runs)]
    for result in results:
        print(result.line())

    if table_row.killed:  # every kill landed inside its phase (else the run is not clean)
        assert all(r.phase == r.target_phase for r in results if r.clean), results
    unclean = [r for r in results if not r.clean]
    assert not unclean, "\n".join(
        f"{r.line()}\n  steps: {r.steps}\n  replay: MAGICFS_KILL_SEED={r.seed} "
        f"MAGICFS_KILL_RUNS=1 MAGICFS_KILL_RUNS_EXTRA=1 pytest 'tests/test_kill_recovery.py::"
        f"{request.node.name}'  or (moto)  {r.replay()}"
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
