"""Recovery of jobs whose driver was killed at a chosen request (held by the fault front).

Each test runs a job in a child process (``tests/helpers/kill_harness.py``) through a
fault front whose ``delay`` rule holds one chosen request; the moment the rule fires the
child is SIGKILLed and the front stopped, so that request never reaches the server.
Recovery then runs in a fresh process (``commit_job`` / ``abort_job``) against the server
itself, and the test checks what the store holds: two production S3 implementations,
Ceph RGW and SeaweedFS (moto's answers would add nothing to theirs). The randomised
version of the same experiment is ``tests/test_kill_recovery.py``.
"""

from __future__ import annotations

import os
import time

import pytest
from helpers.kill_harness import (
    ROWS,
    Expectations,
    KillHarness,
    Observer,
    call,
    compare,
    leftovers,
    make_committer,
    recover_in_child,
)
from helpers.s3_targets import store_fixture


@pytest.fixture(scope="module", params=["rgw", "seaweed"])
def harness(request, tmp_path_factory):
    """The harness on Ceph RGW (``rgw``) or SeaweedFS (``seaweed``): each kill point runs on
    both (moto, ``s3``, only where a test names it: a local disk, the harness's own rule)."""
    server = store_fixture(request, request.param, "server")
    options = server.storage_options
    return KillHarness(
        server.endpoint_url,
        str(tmp_path_factory.mktemp("recovery")),
        credentials=(options["key"], options["secret"]),
    )


def killed_at(harness, rule, committer="magic", conflict_mode="append"):
    """Run a small job, kill it when the front's ``rule`` (operation, kwargs) fires.

    Returns (spec, expectations, snapshot before recovery); the spec's endpoint is then
    the server itself.
    """
    front = harness.front()
    try:
        operation, options = rule
        front.add_rule(operation, "delay", ms=60_000, **options)
        spec, old = harness.prepare(
            "small", 7, committer, conflict_mode, endpoint=front.endpoint_url, tag="recovery"
        )
        from helpers.kill_harness import ChildJob

        child = ChildJob(spec)
        assert child.kill_when_fired(front, 0), child.stderr_tail()
    finally:
        front.stop()  # the held request dies with the front; those it had sent are answered
    spec.endpoint = harness.upstream_url
    expect = Expectations(spec, old, child.phase, set(range(spec.tasks)), None)
    return spec, expect, Observer(spec, harness.client).snapshot()


def complete(expect):
    return expect.complete(set(range(expect.spec.tasks)))


def test_abort_after_a_kill_in_the_clean_up_of_a_committed_job_keeps_it_and_cleans_up(harness):
    # The second DeleteObjects of the job is its clean-up's first batch, after the journal
    # was marked committed (the first deletes an old _SUCCESS at set-up; the clean-up's
    # listings run while the journal is saved, so they are no point after it).
    spec, expect, pre = killed_at(harness, ("DeleteObjects", {"nth": 2, "count": 1}))
    assert pre.journal is not None and pre.journal["phase"] == "committed"
    assert not compare(complete(expect), pre, "before") and pre.success_job == spec.job_id

    [result] = recover_in_child(spec, ["abort"], 120)

    assert result["ok"], result
    after = Observer(spec, harness.client).snapshot()
    assert not compare(complete(expect), after, "after abort")
    assert after.success_job == spec.job_id
    assert leftovers(spec, after) == []
    again = call(make_committer(spec), "abort", spec)
    assert again["ok"], again
    assert Observer(spec, harness.client).snapshot().same_output(after)
    harness.discard(spec)


def test_abort_after_a_kill_between_success_and_journal_keeps_the_committed_output(harness):
    # The journal's second save marks it committed, just after _SUCCESS was written.
    spec, expect, pre = killed_at(
        harness, ("PutObject", {"key": r"_magicfs_commit\.json$", "nth": 2})
    )
    assert pre.journal is not None and pre.journal["phase"] == "publishing"
    assert pre.success_job == spec.job_id
    assert not compare(complete(expect), pre, "before")

    [result] = recover_in_child(spec, ["abort"], 120)

    assert result["ok"], result
    after = Observer(spec, harness.client).snapshot()
    # The job had committed: abort leaves its output (and its _SUCCESS tells the truth).
    assert not compare(complete(expect), after, "after abort")
    assert after.success_job == spec.job_id
    assert leftovers(spec, after) == []
    harness.discard(spec)


def test_abort_in_replace_mode_rolls_back_while_no_old_file_was_deleted(harness):
    # DeleteObjects: 1 = setup's old _SUCCESS, 2 = the old data (replace mode: after the
    # new files and their job commit record), held: the journal says "replacing", the new
    # files are all visible and no old one is deleted yet (asserted below).
    spec, expect, pre = killed_at(harness, ("DeleteObjects", {"nth": 2}), conflict_mode="replace")
    assert pre.journal is not None and pre.journal["phase"] == "replacing"
    assert all(pre.visible.get(name) == sha for name, sha in expect.preexisting.items())
    assert len(pre.visible) == len(expect.preexisting) + len(complete(expect))

    [result] = recover_in_child(spec, ["abort"], 120)

    assert result["ok"], result
    after = Observer(spec, harness.client).snapshot()
    assert after.visible == expect.preexisting
    assert after.success_job is None
    assert leftovers(spec, after) == []
    harness.discard(spec)


def test_abort_in_replace_mode_refuses_once_old_data_was_deleted_and_commit_finishes(harness):
    # Held: the _SUCCESS, after the new files, their record and the old data's deletion.
    spec, expect, pre = killed_at(
        harness, ("PutObject", {"key": r"/_SUCCESS$", "count": 1}), conflict_mode="replace"
    )
    assert pre.journal is not None and pre.journal["phase"] == "replacing"
    assert not any(name in pre.visible for name in expect.preexisting)
    assert pre.success_job is None

    abort, commit = recover_in_child(spec, ["abort", "commit"], 120)

    assert not abort["ok"] and abort["error"] == "JobCommitError" and abort["recoverable"]
    assert commit["ok"], commit
    after = Observer(spec, harness.client).snapshot()
    assert not compare(complete(expect), after, "after commit")  # replace: no old data
    assert after.success_job == spec.job_id
    assert leftovers(spec, after) == []
    harness.discard(spec)


def test_commit_job_with_the_messages_of_a_finished_job_finds_nothing_to_commit(harness):
    from helpers.kill_harness import ChildJob

    spec, old = harness.prepare("small", 8, "magic", tag="finished")
    child = ChildJob(spec)
    assert child.finish(120) == 0, child.stderr_tail()
    expect = Expectations(spec, old, "done", set(range(spec.tasks)), None)
    before = Observer(spec, harness.client).snapshot()

    [result] = recover_in_child(spec, ["commit-messages"], 120)

    assert not result["ok"] and result["error"] == "NothingToCommitError", result
    assert "already been committed" in result["message"]
    after = Observer(spec, harness.client).snapshot()
    assert after.same_output(before)
    assert not compare(complete(expect), after, "after")
    harness.discard(spec)


@pytest.mark.parametrize("harness", ["s3"], indirect=True)  # a local disk: one run is enough
def test_manifest_abort_after_a_kill_in_publish_removes_the_directories_it_created(harness):
    from helpers.kill_harness import ChildJob

    spec, old = harness.prepare("wide", 9, "manifest", tag="manifest-dirs")  # 4,000 renames
    out = spec.dest.removeprefix("file://")
    child = ChildJob(spec)
    assert child.wait_for_phase("job_commit", 120), child.stderr_tail()
    # Job commit makes the destination directories just before the first rename: kill then.
    while not os.path.isdir(os.path.join(out, "t0")) and child.process.poll() is None:
        time.sleep(0.001)
    child.kill()
    expect = Expectations(spec, old, child.phase, set(range(spec.tasks)), None)
    pre = Observer(spec).snapshot()
    assert pre.journal is not None and pre.journal["phase"] == "publishing"
    assert "t0" in pre.directories

    [result] = recover_in_child(spec, ["abort"], 120)

    assert result["ok"], result
    after = Observer(spec).snapshot()
    assert after.visible == expect.preexisting
    assert after.directories == {"old"}  # t0, t1, t2 were the job's: gone with it
    assert leftovers(spec, after) == []
    harness.discard(spec)


@pytest.mark.parametrize("harness", ["s3"], indirect=True)  # the harness's own rule
def test_a_kill_that_lands_after_its_phase_fails_the_run(harness):
    # Job commit of this job sends far fewer than 10,000 requests: the job finishes before
    # the kill, and the run must say so rather than count as a clean recovery.
    result = harness.run(ROWS["commit"], 1, at_request=10_000)

    assert result.outcome == "kill missed its phase", result.line()
    assert result.phase == "done"
    assert not result.clean and "the job had finished" in result.problems[0]
