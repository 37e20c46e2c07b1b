"""The magic committer when things go wrong: faults, tampered records, zombies, conflicts."""

from __future__ import annotations

import contextlib
import json
import logging

import pytest
from helpers import (
    as_another_process,
    object_keys,
    pending_uploads,
    tamper_record,
    visible_keys,
)
from helpers.faults import Faults, InjectedFault, s3_error
from helpers.polling import wait_until

from magicfs import MagicCommitter
from magicfs.committers import MagicLayoutCommitter
from magicfs.errors import (
    CommitConflictError,
    CommitFailedError,
    InvalidCommitData,
    JobCommitError,
    JobNotActiveError,
)
from magicfs.paths import pending_path
from magicfs.records import SuccessData
from magicfs.task_files import TASK_FILES

MiB = 1 << 20


@pytest.fixture
def options(s3_options):
    return {**s3_options, "skip_instance_cache": True}


@pytest.fixture
def make_committer(bucket, options):
    def make(dest: str = "out", **kwargs) -> MagicLayoutCommitter:
        return MagicCommitter(f"s3://{bucket}/{dest}", storage_options=options, **kwargs)

    return make


def run_tasks(committer, files_per_task: dict[int, list[str]], data=lambda name: name.encode()):
    """Set up the job, write and commit each task; returns the messages."""
    committer.setup_job()
    messages = []
    for index, names in files_per_task.items():
        task = committer.task_attempt(index)
        committer.setup_task(task)
        for name in names:
            committer.fs.pipe_file(task.path(name), data(name))
        messages.append(committer.commit_task(task))
    return messages


def assert_clean_failure(s3_client, bucket, dest="out", keep=()):
    """Nothing of the job is visible, nothing is parked, no job tree is left."""
    assert visible_keys(s3_client, bucket) == sorted(keep)
    assert pending_uploads(s3_client, bucket) == []
    assert [k for k in object_keys(s3_client, bucket) if "__magic" in k] == []


# --- faults during job commit -------------------------------------------------------------


def test_fault_at_the_nth_completion_reverts_and_aborts(make_committer, s3_client, bucket):
    # TestStagingCommitter.testJobCommitFailure: 4 tasks x 3 files, completion #5 fails.
    committer = make_committer(threads=1)
    messages = run_tasks(committer, {t: [f"t{t}/f{n}" for n in range(3)] for t in range(4)})
    Faults(committer.store_fs).fail("CompleteMultipartUpload", nth=5)
    with pytest.raises(JobCommitError, match=r"stage publish: .*could not complete") as caught:
        committer.commit_job(messages)
    assert "(4 files it had made visible were deleted again)" in str(caught.value)
    assert caught.value.stage == "publish" and not caught.value.recoverable
    assert committer.stats.counter("committer_commits_reverted") == 4
    assert_clean_failure(s3_client, bucket)


def test_fault_with_parallel_completion_leaves_nothing(make_committer, s3_client, bucket):
    committer = make_committer(threads=8)
    messages = run_tasks(committer, {t: [f"t{t}/f{n}" for n in range(10)] for t in range(5)})
    Faults(committer.store_fs).fail("CompleteMultipartUpload", nth=17)
    with pytest.raises(CommitFailedError, match="could not complete"):
        committer.commit_job(messages)
    assert_clean_failure(s3_client, bucket)


def test_failure_writing_success_reverts_everything(make_committer, s3_client, bucket):
    committer = make_committer()
    messages = run_tasks(committer, {0: ["a", "b"]})
    Faults(committer.store_fs).fail("PutObject", when=lambda p: p["Key"].endswith("_SUCCESS"))
    with pytest.raises(JobCommitError, match="failed in stage success") as caught:
        committer.commit_job(messages)
    assert isinstance(caught.value.__cause__, InjectedFault)
    assert_clean_failure(s3_client, bucket)


def test_retried_commit_after_a_crash_completes_the_job(make_committer, s3_client, bucket):
    # The first commit completes 3 of 6 uploads and then the driver dies (no clean-up).
    committer = make_committer(threads=1)
    messages = run_tasks(committer, {0: ["a", "b", "c"], 1: ["d", "e", "f"]})
    loaded = committer.flow.load_records(
        committer.flow._check_messages(messages, committer.flow.layout.tasks_dir)
    )
    first_three = list(loaded.payload.commits())[:3]
    loaded.discard()
    committer.flow.end_job()
    for commit in first_three:
        committer.flow.records.operations().complete(commit)
    assert len(visible_keys(s3_client, bucket)) == 3

    # A restarted driver (a new committer object, same job id) retries. Real S3 has
    # forgotten the completed upload ids: make the store answer NoSuchUpload for them.
    restarted = make_committer(job_id=committer.job_id)
    completed_ids = {c.upload_id for c in first_three}
    Faults(restarted.store_fs).fail(
        "CompleteMultipartUpload",
        when=lambda p: p["UploadId"] in completed_ids,
        error=lambda: s3_error("NoSuchUpload", "CompleteMultipartUpload"),
    )
    summary = restarted.commit_job(messages)
    assert summary.files == 6
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"] + [f"out/{n}" for n in "abcdef"]
    assert [
        s3_client.get_object(Bucket=bucket, Key=f"out/{n}")["Body"].read() for n in "abcdef"
    ] == [n.encode() for n in "abcdef"]
    assert pending_uploads(s3_client, bucket) == []


def test_no_such_upload_for_a_foreign_object_is_a_failure(make_committer, s3_client, bucket):
    committer = make_committer()
    messages = run_tasks(committer, {0: ["a"]})
    s3_client.put_object(Bucket=bucket, Key="out/a", Body=b"a")  # right size, not ours
    Faults(committer.store_fs).fail(
        "CompleteMultipartUpload", error=lambda: s3_error("NoSuchUpload", "CompleteMultipartUpload")
    )
    with pytest.raises(CommitFailedError, match=r"could not complete s3://.*/out/a"):
        committer.commit_job(messages)
    assert pending_uploads(s3_client, bucket) == []
    assert s3_client.get_object(Bucket=bucket, Key="out/a")["Body"].read() == b"a"  # not ours


# --- tampered and corrupt records -----------------------------------------------------------


def pending_key(committer, task_index: int, name: str) -> str:
    task = committer.task_attempt(task_index)
    return committer.flow.deferred.split(pending_path(task.path(name)))[1]


def edit_json(s3_client, bucket: str, key: str, change) -> None:
    document = json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    change(document)
    s3_client.put_object(Bucket=bucket, Key=key, Body=json.dumps(document).encode())


def write_only(committer, names: list[str], data=lambda n: n.encode()):
    """Write the files; the task will commit in another process (it reads their records)."""
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for name in names:
        committer.fs.pipe_file(task.path(name), data(name))
    as_another_process(committer, task)
    return task


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda d: d.update(bucket="other-bucket"), "bucket", "job writes to bucket"),
        (
            lambda d: d.update(destinationKey="elsewhere/a"),
            "destinationKey",
            "outside the job destination",
        ),
        (
            lambda d: d.update(destinationKey="out/b"),
            "destinationKey",
            "is not where a file written at",
        ),
        (lambda d: d.update(etags=d["etags"] + ['"abc"']), "etags", "partCount says 1"),
        (lambda d: d.update(version=7), "version", "expected 2"),
    ],
)
def test_tampered_pending_fails_the_task_and_aborts_it(
    make_committer, s3_client, bucket, change, field, problem
):
    committer = make_committer()
    task = write_only(committer, ["a", "b"])
    key = pending_key(committer, 0, "a")
    edit_json(s3_client, bucket, key, change)
    with pytest.raises(InvalidCommitData) as caught:
        committer.commit_task(task)
    assert caught.value.source == f"s3://{bucket}/{key}"
    assert caught.value.field == field
    assert problem in caught.value.problem
    # b's upload, which its record names, is aborted with the attempt; a's record cannot
    # be trusted to name its upload: the job's sweep aborts it by key at job end.
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] in ([], ["out/a"])
    committer.commit_job()
    assert_clean_failure(s3_client, bucket, keep=["out/_SUCCESS"])


def test_malformed_pending_names_the_file(make_committer, s3_client, bucket):
    committer = make_committer()
    task = write_only(committer, ["a"])
    key = pending_key(committer, 0, "a")
    s3_client.put_object(Bucket=bucket, Key=key, Body=b'{"version": 2, "uploadId": ')
    with pytest.raises(InvalidCommitData, match=rf"s3://{bucket}/{key}: malformed JSON"):
        committer.commit_task(task)
    committer.abort_job()
    assert_clean_failure(s3_client, bucket)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            lambda d: d["commits"][0].update(bucket="other-bucket"),
            r"commits\[0\].bucket: upload is for bucket",
        ),
        (
            lambda d: d["commits"][0].update(destinationKey="../x"),
            r"commits\[0\].destinationKey: has an empty, '.' or '..' path element",
        ),
        (lambda d: d.update(jobId="another-job"), r"jobId: Mismatch in Job ID"),
        (
            lambda d: d["commits"].append(dict(d["commits"][0], uploadId="x")),
            r"more than one pending commit",
        ),
        (lambda d: d["commits"][0]["etags"].pop(), r"etags: lists 1 parts but partCount says 2"),
    ],
)
@pytest.mark.parametrize("carried", [True, False], ids=["carried", "read"])
def test_tampered_pendingset_fails_the_job_before_anything_is_visible(
    make_committer, s3_client, bucket, change, match, carried
):
    committer = make_committer()
    big = 8 * MiB + 10  # two parts of the default 8 MiB
    messages = run_tasks(committer, {0: ["a", "b"], 1: ["c"]}, data=lambda n: n.encode() * big)
    messages[0] = tamper_record(committer.store_fs, messages[0], change, carried)
    with pytest.raises(JobCommitError, match=match) as caught:
        committer.commit_job(messages)
    assert caught.value.stage in ("load", "validate")
    assert isinstance(caught.value.__cause__, InvalidCommitData)
    source = caught.value.__cause__.source
    assert source is not None and source.startswith(f"s3://{messages[0].record}")
    assert ("commit message carried it" in source) == carried
    assert_clean_failure(s3_client, bucket)


@pytest.mark.parametrize("carried", [True, False], ids=["carried", "read"])
def test_reordered_etags_are_refused_by_the_store(make_committer, s3_client, bucket, carried):
    committer = make_committer()
    messages = run_tasks(committer, {0: ["a"]}, data=lambda n: b"1" * (8 * MiB) + b"2" * 10)
    messages[0] = tamper_record(
        committer.store_fs,
        messages[0],
        lambda d: d["commits"][0]["etags"].reverse(),
        carried,
    )
    assert (messages[0].record_json is not None) == carried
    with pytest.raises(CommitFailedError, match=r"InvalidPart|could not complete"):
        committer.commit_job(messages)
    assert_clean_failure(s3_client, bucket)


def test_two_tasks_writing_the_same_file_fail_the_job_before_completion(
    make_committer, s3_client, bucket, request_log
):
    committer = make_committer()
    messages = run_tasks(committer, {0: ["same.csv"], 1: ["same.csv"]})
    request_log.attach(committer.store_fs)
    with pytest.raises(JobCommitError, match="two tasks write the same file"):
        committer.commit_job(messages)
    assert request_log.counts()["CompleteMultipartUpload"] == 0
    assert_clean_failure(s3_client, bucket)


def test_one_task_writing_two_paths_to_one_destination_fails_the_task(
    make_committer, s3_client, bucket
):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    work = task.work_path.removesuffix("/__base")
    committer.fs.pipe_file(f"{work}/x/part.csv", b"1")  # no __base: both flatten to part.csv
    committer.fs.pipe_file(f"{work}/y/part.csv", b"2")
    with pytest.raises(InvalidCommitData, match="also written by"):
        committer.commit_task(task)
    committer.abort_job()
    assert_clean_failure(s3_client, bucket)


def test_task_commit_refuses_files_still_open(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("closed.csv"), b"1")
    still_open = committer.fs.open(task.path("open.csv"), "wb")
    still_open.write(b"2")
    wait_until(lambda: still_open._start.done(), "the open file's marker and upload exist")
    with pytest.raises(CommitFailedError, match=r"1 files are still open, e.g. s3://.*open.csv"):
        committer.commit_task(task)
    with pytest.raises(OSError, match="its task attempt was aborted"):
        still_open.close()  # its data was discarded with the attempt: it says so
    assert pending_uploads(s3_client, bucket) == []
    still_open.discard()
    committer.abort_job()
    assert_clean_failure(s3_client, bucket)


def test_an_abort_elsewhere_of_an_ended_job_succeeds_even_if_its_marker_stays(
    make_committer, s3_client, bucket, caplog
):
    """An abort in a process that did not set the attempt up saves its ``.aborted``
    marker alongside a job check; the job is not active, so the marker is deleted again.
    If that delete fails too, the abort still succeeds (nothing of the attempt can commit
    now) and the marker waits for the job's clean-up."""
    committer = make_committer()
    other = make_committer()  # a different, self-generated job id: never set up
    committer.setup_job()
    other.store_fs.exists(f"{bucket}/out")  # its S3 client exists: faults can attach
    Faults(other.store_fs).fail("DeleteObjects", nth=1)  # the marker's delete, not the clean-up's
    task = other.task_attempt(0)
    with caplog.at_level(logging.WARNING, logger="magicfs"):
        other.abort_task(task)
    left = [k for k in object_keys(s3_client, bucket) if other.job_id in k]
    assert len(left) == 1 and left[0].endswith(f"{task.attempt_id}.aborted")
    assert "left for the job's clean-up to delete" in caplog.text
    make_committer(job_id=other.job_id).cleanup_job()
    assert [k for k in object_keys(s3_client, bucket) if other.job_id in k] == []


def test_failed_pendingset_save_aborts_the_task(make_committer, s3_client, bucket):
    committer = make_committer()
    task = write_only(committer, ["a", "b"])
    Faults(committer.store_fs).fail("PutObject", when=lambda p: p["Key"].endswith(".pendingset"))
    with pytest.raises(InjectedFault):
        committer.commit_task(task)
    assert pending_uploads(s3_client, bucket) == []
    committer.abort_job()
    assert_clean_failure(s3_client, bucket)


# --- zombies: attempts that go on after their job ended ------------------------------------


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_writer_that_keeps_writing_after_its_job_ended(make_committer, s3_client, bucket, ending):
    committer = make_committer()
    committer.setup_job()
    zombie = committer.task_attempt(0)
    committer.setup_task(zombie)
    stream = committer.fs.open(zombie.path("zombie.bin"), "wb")
    stream.write(b"z" * (6 * MiB))  # a part is on its way
    wait_until(lambda: stream._start.done(), "the zombie's upload exists")
    if ending == "commit":
        committer.commit_job([])
    else:
        committer.abort_job()
    # The job is over; the zombie goes on writing and tries to finish. Its close may
    # already know (a failed part, its job check) or not yet (the close finishes in the
    # background): either way its task commit fails and nothing is published or parked.
    with contextlib.suppress(OSError, JobNotActiveError):
        stream.write(b"z" * (6 * MiB))
        stream.close()
    late = committer.fs.open(zombie.path("opened-late.bin"), "wb")  # opened after the end
    late.write(b"late")
    with contextlib.suppress(JobNotActiveError):
        late.close()
    with pytest.raises((JobNotActiveError, CommitFailedError), match="not active"):
        committer.commit_task(zombie)
    TASK_FILES.settle()
    assert pending_uploads(s3_client, bucket) == []
    assert [k for k in visible_keys(s3_client, bucket) if not k.endswith("_SUCCESS")] == []
    assert [k for k in object_keys(s3_client, bucket) if "__magic" in k] == []


def test_task_commit_racing_the_job_end_is_rejected(make_committer, s3_client, bucket):
    committer = make_committer()
    task = write_only(committer, ["a"])
    # The job ends between the task's save and its check: simulate by ending it
    # whenever the attempt's pendingset is written.
    faults = Faults(committer.store_fs)

    def end_job(params):
        if params["Key"].endswith(f"{task.attempt_id}.pendingset"):
            s3_client.delete_object(
                Bucket=bucket,
                Key=committer.flow.deferred.split(committer.flow.layout.job_marker)[1],
            )
        return False

    faults.fail("PutObject", when=end_job)
    with pytest.raises(JobNotActiveError, match="ended before task attempt"):
        committer.commit_task(task)
    assert pending_uploads(s3_client, bucket) == []


# --- conflict modes ----------------------------------------------------------------------------


def test_append_keeps_existing_data(make_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/old.csv", Body=b"old")
    committer = make_committer()
    committer.commit_job(run_tasks(committer, {0: ["new.csv"]}))
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/new.csv", "out/old.csv"]


def test_fail_mode_refuses_existing_data_at_setup(make_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/year=2024/old.csv", Body=b"old")
    committer = make_committer(conflict_mode="fail")
    with pytest.raises(CommitConflictError, match=r"already holds data .* at job setup"):
        committer.setup_job()
    assert visible_keys(s3_client, bucket) == ["out/year=2024/old.csv"]


def test_fail_mode_ignores_hidden_entries(make_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/_SUCCESS", Body=b"")
    s3_client.put_object(Bucket=bucket, Key="out/.hidden", Body=b"")
    committer = make_committer(conflict_mode="fail")
    committer.commit_job(run_tasks(committer, {0: ["new.csv"]}))
    assert "out/new.csv" in visible_keys(s3_client, bucket)


def test_fail_mode_checks_again_before_completing(make_committer, s3_client, bucket):
    committer = make_committer(conflict_mode="fail")
    messages = run_tasks(committer, {0: ["new.csv"]})
    s3_client.put_object(Bucket=bucket, Key="out/appeared.csv", Body=b"meanwhile")
    with pytest.raises(JobCommitError, match="at job commit") as caught:
        committer.commit_job(messages)
    assert isinstance(caught.value.__cause__, CommitConflictError)
    assert_clean_failure(s3_client, bucket, keep=["out/appeared.csv"])


def test_replace_deletes_old_data_only_at_commit(make_committer, s3_client, bucket):
    for key in ("out/old.csv", "out/year=2023/old.csv", "out/_keep_hidden"):
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"old")
    committer = make_committer(conflict_mode="replace")
    messages = run_tasks(committer, {0: ["new.csv", "year=2024/new.csv"]})
    assert "out/old.csv" in visible_keys(s3_client, bucket)  # untouched until commit
    committer.commit_job(messages)
    assert visible_keys(s3_client, bucket) == [
        "out/_SUCCESS",
        "out/_keep_hidden",
        "out/new.csv",
        "out/year=2024/new.csv",
    ]


def test_replace_keeps_old_data_when_the_job_fails_before_completion(
    make_committer, s3_client, bucket
):
    s3_client.put_object(Bucket=bucket, Key="out/old.csv", Body=b"old")
    committer = make_committer(conflict_mode="replace")
    messages = run_tasks(committer, {0: ["a"], 1: ["a"]})  # invalid: same file twice
    with pytest.raises(JobCommitError, match="stage validate"):
        committer.commit_job(messages)
    assert visible_keys(s3_client, bucket) == ["out/old.csv"]


# --- _SUCCESS ------------------------------------------------------------------------------------


def test_success_file_summarises_the_job(make_committer, s3_client, bucket):
    committer = make_committer(threads=4)
    names = [f"part-{n:04d}.csv" for n in range(120)]
    messages = run_tasks(committer, {0: names[:60], 1: names[60:]}, data=lambda n: b"x" * 10)
    summary = committer.commit_job(messages)
    success = SuccessData.from_json(
        s3_client.get_object(Bucket=bucket, Key="out/_SUCCESS")["Body"].read()
    )
    assert success.success and success.committer == "magic"
    assert (success.job_id, success.job_id_source) == (committer.job_id, "Generated Locally")
    assert success.hostname and success.timestamp > 0 and "UTC" in success.date
    assert success.filenames == [f"/out/{n}" for n in names[:100]]  # the first 100 only
    assert success.metrics["files"] == 120 and success.metrics["bytes"] == 1200
    counters = success.iostatistics.counters
    assert counters["committer_files_committed"] == 120
    assert counters["committer_bytes_committed"] == 1200
    assert counters["committer_tasks_completed"] == 2
    assert counters["stream_write_bytes"] == 1200  # the writers' statistics, aggregated
    assert "committer_materialize_file.max" in success.iostatistics.maximums
    assert success.diagnostics["magicfs.committer.threads"] == "4"
    assert summary.files == 120 and len(summary.filenames) == 100


def test_success_file_can_be_disabled(make_committer, s3_client, bucket):
    committer = make_committer(success_file=False)
    committer.commit_job(run_tasks(committer, {0: ["a"]}))
    assert visible_keys(s3_client, bucket) == ["out/a"]


def test_setup_deletes_an_old_success_file(make_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/_SUCCESS", Body=b"{}")
    make_committer().setup_job()
    assert "out/_SUCCESS" not in object_keys(s3_client, bucket)
