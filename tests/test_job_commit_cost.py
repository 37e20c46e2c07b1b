"""Job commit at its floor (issue 28): clean-up off the critical path, and job setup's
requests. What is asserted is what the store shows (objects, uploads, the journal) and
which requests were sent; the speed itself is measured by ``benchmarks/job_commit.py``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import textwrap

import pytest
from helpers import object_keys, pending_uploads, visible_keys
from helpers.cli import run_cli

from magicfs import MagicCommitter
from magicfs.committers import MagicLayoutCommitter
from magicfs.errors import JobAlreadyActiveError, JobCommitError, StoreCallError
from magicfs.stores.s3.retry import RetryPolicy

SHORT_RETRIES = RetryPolicy(attempts=2, base_delay=0.01)


@pytest.fixture
def front(fault_front):
    fault_front.clear()
    yield fault_front
    fault_front.clear()


def committer_at(bucket: str, storage: dict, **options) -> MagicLayoutCommitter:
    return MagicCommitter(
        f"s3://{bucket}/out",
        storage_options={**storage, "skip_instance_cache": True},
        retry_policy=SHORT_RETRIES,
        **options,
    )


def run_tasks(committer: MagicLayoutCommitter) -> list:
    """Task 0 reports; task 1 commits but its message is lost (its upload is swept)."""
    committer.setup_job()
    messages = []
    for index in (0, 1):
        task = committer.task_attempt(index)
        committer.setup_task(task)
        committer.fs.pipe_file(task.path(f"part-{index}.csv"), f"task {index}".encode())
        messages.append(committer.commit_task(task))
    return messages[:1]


def journal_of(s3_client, bucket: str, committer: MagicLayoutCommitter) -> dict | None:
    key = f"out/__magic_job-{committer.job_id}/_magicfs_commit.json"
    try:
        return json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3_client.exceptions.NoSuchKey:
        return None


def tree_of(s3_client, bucket: str, committer: MagicLayoutCommitter) -> list[str]:
    return [k for k in object_keys(s3_client, bucket) if f"__magic_job-{committer.job_id}" in k]


def test_background_clean_up_runs_after_commit_job_returns(front, s3_client, bucket):
    committer = committer_at(bucket, front.storage_options, cleanup="background")
    messages = run_tasks(committer)
    # The sweep's listing of uploads is held 1.5 s: the clean-up cannot finish before.
    front.add_rule("ListMultipartUploads", "delay", ms=1500)
    summary = committer.commit_job(messages)
    # Committed: the output, _SUCCESS and the journal's "committed" phase are saved ...
    assert summary.files == 1 and summary.cleanup_incomplete is None
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    journal = journal_of(s3_client, bucket, committer)
    assert journal is not None and journal["phase"] == "committed"
    assert journal["result"] == {"files": 1, "bytes": 6, "tasks": 1}
    # ... and the clean-up has not run yet: the tree and the lost task's upload remain.
    assert tree_of(s3_client, bucket, committer) != []
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/part-1.csv"]
    assert committer.job_state() == "committed"
    # wait_cleanup() returns once it is done: nothing of the job is left.
    assert committer.wait_cleanup() is None
    assert tree_of(s3_client, bucket, committer) == []
    assert pending_uploads(s3_client, bucket) == []
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    assert front.rules()[0]["fired"] >= 1  # the sweep looks again after aborting


def test_background_clean_up_times_out_waiting_and_abort_job_waits_for_it(front, s3_client, bucket):
    committer = committer_at(bucket, front.storage_options, cleanup="background")
    messages = run_tasks(committer)
    front.add_rule("ListMultipartUploads", "delay", ms=1500)
    committer.commit_job(messages)
    with pytest.raises(TimeoutError, match=f"clean-up of job {committer.job_id}"):
        committer.wait_cleanup(timeout=0.01)
    committer.abort_job()  # waits for the clean-up, then keeps the committed output
    assert tree_of(s3_client, bucket, committer) == []
    assert pending_uploads(s3_client, bucket) == []
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]


def test_clean_up_off_leaves_the_job_committed_until_cleanup_job(
    s3_client, bucket, s3_options, tmp_path, monkeypatch
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    committer = committer_at(bucket, s3_options, cleanup="off")
    summary = committer.commit_job(run_tasks(committer))
    assert list(tmp_path.iterdir()) == []  # the loaded records' spill file went all the same
    assert summary.cleanup_incomplete is not None
    assert "cleanup='off'" in summary.cleanup_incomplete
    assert f"magicfs jobs cleanup --job {committer.job_id}" in summary.cleanup_incomplete
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    assert journal_of(s3_client, bucket, committer)["phase"] == "committed"
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/part-1.csv"]
    # The job id stays taken; another process finishes the clean-up.
    again = committer_at(bucket, s3_options, job_id=committer.job_id)
    with pytest.raises(JobAlreadyActiveError, match="already committed"):
        again.setup_job()
    again.cleanup_job()
    assert tree_of(s3_client, bucket, committer) == []
    assert pending_uploads(s3_client, bucket) == []
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]


def test_unknown_cleanup_mode_is_refused(bucket, s3_options):
    with pytest.raises(ValueError, match="unknown cleanup 'later': use one of background"):
        committer_at(bucket, s3_options, cleanup="later")


def test_a_process_exiting_right_after_commit_job_finishes_its_clean_up(
    s3_client, bucket, s3_options
):
    """A driver script that ends right after commit_job(): the interpreter waits for the
    clean-up (no upload of the lost task left parked, the tree gone)."""
    script = textwrap.dedent(
        f"""
        import json, sys
        from magicfs import MagicCommitter
        options = json.loads(sys.argv[1])
        committer = MagicCommitter("s3://{bucket}/out", storage_options=options,
                                   cleanup="background")
        committer.setup_job()
        messages = []
        for index in (0, 1):
            task = committer.task_attempt(index)
            committer.setup_task(task)
            committer.fs.pipe_file(task.path(f"part-{{index}}.csv"), b"x")
            messages.append(committer.commit_task(task))
        committer.commit_job(messages[:1])
        print(committer.job_id)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(s3_options)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "cannot schedule new futures" not in done.stderr
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    assert [k for k in object_keys(s3_client, bucket) if "__magic_job-" in k] == []
    assert pending_uploads(s3_client, bucket) == []


def test_setup_of_a_fresh_job_id_sends_no_lookups(request_log, bucket, s3_options):
    committer = committer_at(bucket, s3_options)
    request_log.attach(committer.store_fs)
    committer.setup_job()
    # no GET of a journal or _SUCCESS, no HEAD of a job marker: the old _SUCCESS is
    # deleted and the job marker written, with the job's index entry alongside (one round
    # trip for the three: tests/test_job_index.py); then the intent-marker mode is decided
    # (other jobs' trees at "" and "out", the snapshot of pending uploads, the unmarked
    # record)
    assert request_log.counts() == {
        "DeleteObjects": 1,
        "PutObject": 3,
        "ListObjectsV2": 2,
        "ListMultipartUploads": 1,
    }
    request_log.clear()
    with pytest.raises(JobAlreadyActiveError, match="already active"):
        committer.setup_job()  # set up once: now its id is looked up
    assert request_log.counts()["HeadObject"] == 1


def test_setup_of_a_given_job_id_looks_it_up(request_log, bucket, s3_options):
    committer = committer_at(bucket, s3_options, job_id="given-job")
    request_log.attach(committer.store_fs)
    committer.setup_job()
    counts = request_log.counts()
    assert counts["GetObject"] == 2 and counts["HeadObject"] == 1  # journal, _SUCCESS; marker


def test_the_old_success_file_is_deleted_while_the_job_is_set_up(front, s3_client, bucket):
    """The old _SUCCESS's delete runs alongside the job marker's save (one round trip):
    here the delete fails, yet the marker was saved. The set-up fails; retried, it
    succeeds, and the job publishes with no trace of the old _SUCCESS."""
    s3_client.put_object(Bucket=bucket, Key="out/_SUCCESS", Body=b"{}")
    committer = committer_at(bucket, front.storage_options)
    front.add_rule("DeleteObjects", "500")
    marker = front.add_rule("PutObject", "delay", ms=0, key=r"_magicfs_job\.json$")
    with pytest.raises(StoreCallError, match=r"DeleteObjects .*_SUCCESS"):
        committer.setup_job()
    assert [r["fired"] for r in front.rules() if r["id"] == marker["id"]] == [1]
    front.clear()
    messages = run_tasks(committer)  # set-up again, then the tasks
    assert committer.commit_job(messages).files == 1
    success = json.loads(s3_client.get_object(Bucket=bucket, Key="out/_SUCCESS")["Body"].read())
    assert success["jobId"] == committer.job_id
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    assert pending_uploads(s3_client, bucket) == []
    assert tree_of(s3_client, bucket, committer) == []


@pytest.mark.parametrize("carried", [False, True], ids=["named", "carried"])
def test_records_named_by_messages_are_read_while_the_job_ends(
    front, s3_client, bucket, tmp_path, monkeypatch, carried
):
    """The pendingset a message names is read alongside the job marker's DELETE (one
    round trip): here the DELETE fails (the end_job stage's failure, left for a retried
    commit), yet the record was read. Nothing is visible, no
    local spill file stays, the upload waits, and the retried commit publishes it. A
    record the message carries (a small one) is not read at all."""
    spills = tmp_path / "spills"
    spills.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spills))
    committer = committer_at(bucket, front.storage_options)
    messages = run_tasks(committer)
    assert messages[0].record_json is not None
    if not carried:  # as a task too large to carry its record would report
        messages = [dataclasses.replace(m, record_json=None) for m in messages]
    front.add_rule("DeleteObject", "500", key=r"_magicfs_job\.json$")
    read = front.add_rule("GetObject", "delay", ms=0, key=r"\.pendingset$")
    with pytest.raises(JobCommitError, match=r"DeleteObject .*_magicfs_job\.json failed") as e:
        committer.commit_job(messages)
    assert e.value.stage == "end_job" and e.value.recoverable  # nothing undone: commit again
    if carried:  # the journal was saved while the job ended: any process finishes it
        advice = f"or from any process magicfs jobs recover --job {committer.job_id} "
    else:  # no journal yet: the same messages say what to publish
        advice = (
            "again with the same messages (from another process, with them as JSON lines in "
            "FILE: "
            f"magicfs jobs recover --messages FILE --job {committer.job_id} "
        )
    assert advice in str(e.value)
    assert [r["fired"] for r in front.rules() if r["id"] == read["id"]] == [0 if carried else 1]
    assert visible_keys(s3_client, bucket) == []
    assert list(spills.iterdir()) == []
    assert sorted(u["Key"] for u in pending_uploads(s3_client, bucket)) == [
        "out/part-0.csv",
        "out/part-1.csv",
    ]
    front.clear()
    assert committer.commit_job(messages).files == 1
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    assert pending_uploads(s3_client, bucket) == []
    assert list(spills.iterdir()) == []


def test_the_end_job_advice_followed_from_another_process_finishes_the_job(
    front, s3_client, bucket, tmp_path
):
    """A commit whose job could not be ended before its journal was saved says to run
    ``magicfs jobs recover --messages FILE``: done word for word from another process
    (the operator's shell), with the same messages as JSON lines, the job is whole."""
    committer = committer_at(bucket, front.storage_options)
    messages = [dataclasses.replace(m, record_json=None) for m in run_tasks(committer)]
    front.add_rule("DeleteObject", "500", key=r"_magicfs_job\.json$")
    with pytest.raises(JobCommitError) as failed:
        committer.commit_job(messages)
    advised = re.search(
        r"magicfs jobs recover --messages FILE --job [^ ]+ [^ )]+", str(failed.value)
    )
    assert advised is not None, str(failed.value)
    front.clear()
    lines = tmp_path / "messages.jsonl"
    lines.write_text("".join(m.to_json() + "\n" for m in messages))
    args = [str(lines) if word == "FILE" else word for word in advised.group(0).split()[1:]]
    options = front.storage_options
    keys = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]}
    endpoint = options["client_kwargs"]["endpoint_url"]
    recovered = run_cli(*args, "--endpoint-url", endpoint, env=keys)
    assert recovered.code == 0, recovered.output
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    assert s3_client.get_object(Bucket=bucket, Key="out/part-0.csv")["Body"].read() == b"task 0"
    assert pending_uploads(s3_client, bucket) == []  # task 1's, whose message was lost
    assert tree_of(s3_client, bucket, committer) == []


def test_a_resumed_commit_with_messages_loads_the_journal_s_records(
    front, s3_client, bucket, tmp_path, monkeypatch
):
    """A commit that stopped after its journal was saved (its completion and then its roll
    back failed), retried with its messages: the records read while the job ended are
    dropped (no spill file stays) and the journal's are published."""
    spills = tmp_path / "spills"
    spills.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spills))
    committer = committer_at(bucket, front.storage_options)
    messages = run_tasks(committer)
    front.add_rule("CompleteMultipartUpload", "500")
    front.add_rule(["ListMultipartUploads", "DeleteObjects"], "500")
    with pytest.raises(JobCommitError, match="abort_job"):
        committer.commit_job(messages)
    journal = journal_of(s3_client, bucket, committer)
    assert journal is not None and journal["phase"] == "publishing"
    front.clear()
    again = committer_at(bucket, front.storage_options, job_id=committer.job_id)
    assert again.commit_job(messages).files == 1
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv"]
    assert pending_uploads(s3_client, bucket) == []
    assert list(spills.iterdir()) == []


# --- task commit: its listing starts while the attempt's files finish closing ----------------


class CallOrder:
    """The S3 calls a committer's client starts and finishes, in order (botocore hooks)."""

    def __init__(self, committer: MagicLayoutCommitter) -> None:
        self.events: list[tuple[str, str, str]] = []
        events = committer.store_fs.s3.meta.events
        events.register("before-parameter-build.s3", self._named)
        events.register("before-call.s3", self._sent)
        events.register("after-call.s3", self._done)

    def _named(self, params, context, **kwargs) -> None:
        context["test_key"] = params.get("Key", "")

    def _sent(self, model, context, **kwargs) -> None:
        self.events.append(("sent", model.name, context.get("test_key", "")))

    def _done(self, model, context, **kwargs) -> None:
        self.events.append(("done", model.name, context.get("test_key", "")))

    def index(self, what: str, operation: str, key: str = "") -> int:
        """Where the first call of ``operation`` (of a key ending ``key``) was ``what``."""
        found = [
            n
            for n, (w, op, k) in enumerate(self.events)
            if (w, op) == (what, operation) and k.endswith(key)
        ]
        assert found, f"no {operation} {what}: {self.events}"
        return found[0]


def write_three(committer: MagicLayoutCommitter, task) -> dict[str, bytes]:
    files = {f"part-{n}.csv": f"file {n}".encode() for n in range(3)}
    for name, data in files.items():
        committer.fs.pipe_file(task.path(name), data)
    return files


def assert_published(s3_client, bucket, committer, files: dict[str, bytes]) -> None:
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", *(f"out/{n}" for n in files)]
    for name, data in files.items():
        assert s3_client.get_object(Bucket=bucket, Key=f"out/{name}")["Body"].read() == data
    assert pending_uploads(s3_client, bucket) == []
    assert tree_of(s3_client, bucket, committer) == []


@pytest.mark.parametrize(
    ("in_memory", "markers", "attempt"), [(False, "always", 0), (True, "auto", 1)]
)
def test_task_commit_lists_its_attempt_while_the_last_upload_finishes(
    front, s3_client, bucket, in_memory, markers, attempt
):
    """In file mode; in ``in_memory`` mode a later attempt (the first trusts its memory
    and lists nothing), after its task's touched marker."""
    committer = committer_at(
        bucket, front.storage_options, in_memory=in_memory, intent_markers=markers
    )
    committer.setup_job()
    task = committer.task_attempt(0, attempt)
    committer.setup_task(task)
    order = CallOrder(committer)
    front.add_rule("UploadPart", "delay", ms=1000, key=r"part-2\.csv$")
    files = write_three(committer, task)
    message = committer.commit_task(task)
    # The attempt's one listing went out before the held part had been answered.
    held = order.index("done", "UploadPart", "part-2.csv")
    assert order.index("sent", "ListObjectsV2") < held
    if attempt:
        marker = committer.flow.deferred.split(
            committer.flow.layout.touched_marker(task.attempt_id)
        )[1]
        touched = order.index("done", "PutObject", marker)
        assert touched < order.index("sent", "ListObjectsV2")
    assert message.files == 3
    committer.commit_job([message])
    assert_published(s3_client, bucket, committer, files)


@pytest.mark.parametrize("in_memory", [False, True])
def test_task_commit_lists_its_attempt_only_once_every_file_has_begun(
    front, s3_client, bucket, in_memory
):
    """A listing before the last file's marker is saved would miss it, and a file written
    here whose marker is gone is thrown away: the listing waits for the begins."""
    committer = committer_at(
        bucket, front.storage_options, in_memory=in_memory, intent_markers="always"
    )
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    order = CallOrder(committer)
    held = front.add_rule(
        "PutObject", "delay", ms=1000, key=r"__base/_part-2\.csv\.magicfs-task\.magicfs-marker$"
    )
    files = write_three(committer, task)
    message = committer.commit_task(task)
    assert front.rules()[0]["fired"] == 1, held
    marker = order.index("done", "PutObject", "__base/_part-2.csv.magicfs-task.magicfs-marker")
    assert marker < order.index("sent", "ListObjectsV2")
    assert message.files == 3
    committer.commit_job([message])
    assert_published(s3_client, bucket, committer, files)
