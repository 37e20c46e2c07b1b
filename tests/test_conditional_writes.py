"""Files opened ``xb`` never replace an object, whatever the store honours (issue 25, item 2).

magicfs probes whether the store honours ``If-None-Match: *`` on PutObject and on
CompleteMultipartUpload (:mod:`magicfs.stores.s3.conditional`) and falls back to a HEAD
where it does not. moto and SeaweedFS honour both; Ceph RGW 16.2 honours PutObject's
only. A store
that ignores the completion's condition is also made on moto, by a botocore hook that
drops the header from the request (the store then never sees it, as RGW ignores it).
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
from helpers import as_another_process, object_keys, pending_uploads, visible_keys
from helpers.s3_targets import S3_TARGETS, magic_committer, store_fixture
from test_recovery import ALL, run_crashing_job

from magicfs import MagicCommitter
from magicfs.committers import MagicLayoutCommitter
from magicfs.errors import JobCommitError
from magicfs.stores.s3 import conditional
from magicfs.stores.s3.conditional import PROBE_PREFIX
from magicfs.stores.s3.store import error_code


class Sent:
    """Every S3 request an s3fs client sends: (operation, key, If-None-Match header)."""

    def __init__(self, fs) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        # (Handlers of a more specific event, such as drop_if_none_match's, run first.)
        fs.s3.meta.events.register("before-sign.s3", self._record)

    def _record(self, request, operation_name, **_) -> None:
        with self._lock:
            header = request.headers.get("If-None-Match")
            self.requests.append((operation_name, request.url, header))

    def probes(self) -> list[tuple[str, str | None]]:
        """(operation, If-None-Match) of the requests on probe keys."""
        return [(op, inm) for op, url, inm in self.requests if PROBE_PREFIX in url]


def drop_if_none_match(fs, operation: str) -> None:
    """Make the store ignore ``If-None-Match`` on ``operation``: it never receives it."""

    def strip(request, **_) -> None:
        if "If-None-Match" in request.headers:
            del request.headers["If-None-Match"]

    fs.s3.meta.events.register(f"before-sign.s3.{operation}", strip)


@pytest.fixture
def moto_committer(bucket, s3_options):
    def make(**kwargs) -> MagicLayoutCommitter:
        options = {**s3_options, "skip_instance_cache": True}
        return MagicCommitter(f"s3://{bucket}/out", storage_options=options, **kwargs)

    return make


#: Does the store honour If-None-Match on CompleteMultipartUpload (the atomic path)?
HONOURS_COMPLETION = {"moto": True, "rgw": False, "seaweed": True}
#: What each store does with If-None-Match on CompleteMultipartUpload, and so what the
#: refusal of a create-only file over an existing object says.
REFUSAL = {
    "moto": "the store refused to complete the upload over it (412 PreconditionFailed)",
    "seaweed": "the store refused to complete the upload over it (412 PreconditionFailed)",
    "rgw": "this store does not honour If-None-Match on CompleteMultipartUpload "
    "(PutObject: refused with 412 PreconditionFailed, as asked; CompleteMultipartUpload: "
    "answered 200 and replaced the existing object), so magicfs checked with HEAD just "
    "before and refuses to replace it",
}
#: The probe's requests on each store (RGW's completion succeeds: nothing to abort).
PROBE = {
    "moto": [
        ("PutObject", None),
        ("PutObject", "*"),
        ("CreateMultipartUpload", None),
        ("UploadPart", None),
        ("CompleteMultipartUpload", "*"),
        ("AbortMultipartUpload", None),
        ("DeleteObject", None),
    ],
    "rgw": [
        ("PutObject", None),
        ("PutObject", "*"),
        ("CreateMultipartUpload", None),
        ("UploadPart", None),
        ("CompleteMultipartUpload", "*"),
        ("DeleteObject", None),
    ],
}
PROBE["seaweed"] = PROBE["moto"]  # its completion refused: the probe's upload aborted


def run_job(committer, files: dict[str, tuple[bytes, str]]):
    """One task writing ``name -> (bytes, mode)``; returns the task commit messages."""
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for name, (data, mode) in files.items():
        if mode == "create":
            committer.fs.pipe_file(task.path(name), data, mode="create")
        else:
            with committer.fs.open(task.path(name), mode) as f:
                f.write(data)
    return [committer.commit_task(task)]


def body(s3_client, bucket: str, key: str) -> bytes:
    return s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()


def assert_refused_cleanly(s3_client, bucket: str, existing: dict[str, bytes]) -> None:
    """The existing objects are untouched; nothing of the job is visible or parked."""
    assert visible_keys(s3_client, bucket) == sorted(existing)
    for key, data in existing.items():
        assert body(s3_client, bucket, key) == data
    assert pending_uploads(s3_client, bucket) == []
    assert [k for k in object_keys(s3_client, bucket) if "__magic" in k] == []


# --- on each store: moto (honours both conditions, as AWS), Ceph RGW 16.2 (PutObject's) --


@pytest.mark.parametrize("mode", ["xb", "create"])
def test_create_only_over_an_existing_object_fails_the_job(make_committer, target, mode):
    client, bucket = target.client, target.bucket
    client.put_object(Bucket=bucket, Key="out/x.csv", Body=b"theirs")
    committer = make_committer()
    messages = run_job(committer, {"x.csv": (b"ours", mode), "y.csv": (b"y", "wb")})
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    message = str(failure.value)
    assert f"s3://{bucket}/out/x.csv already exists and the file was opened 'xb'" in message
    assert REFUSAL[target.name] in message
    assert_refused_cleanly(client, bucket, {"out/x.csv": b"theirs"})


def test_create_only_over_a_free_name_is_published(make_committer, target):
    committer = make_committer()
    committer.commit_job(run_job(committer, {"x.csv": (b"ours", "xb"), "z": (b"z", "create")}))
    assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS", "out/x.csv", "out/z"]
    assert target.body("out/x.csv") == b"ours" and target.body("out/z") == b"z"
    assert pending_uploads(target.client, target.bucket) == []


def test_pipe_file_create_outside_a_job_is_refused_by_the_store(make_committer, target):
    # Not a task path: the magic filesystem hands it to s3fs, whose conditional PUT
    # every store honours (RGW too: only its completions ignore the condition).
    target.client.put_object(Bucket=target.bucket, Key="other/x.csv", Body=b"theirs")
    committer = make_committer()
    with pytest.raises(OSError) as refused:
        committer.fs.pipe_file(f"{target.bucket}/other/x.csv", b"ours", mode="create")
    # s3fs makes a FileExistsError of moto's 412; of RGW's (no <Message>) and SeaweedFS's
    # an OSError(22, message): the store's code is behind it.
    assert error_code(refused.value) == "PreconditionFailed"
    assert isinstance(refused.value, FileExistsError) == (target.name == "moto")
    assert target.body("other/x.csv") == b"theirs"


def test_the_probe_is_paid_once_per_bucket_and_leaves_nothing(make_committer, target):
    committer = make_committer()
    sent = Sent(committer.store_fs)
    files = {f"f{n}.csv": (b"data", "xb") for n in range(3)}
    committer.commit_job(run_job(committer, files))
    # One probe for the writers and the job commit of this process.
    assert sent.probes() == PROBE[target.name]
    # Where the store honours the completion's condition, each completion carries it;
    # where not, each is preceded by one HEAD of its destination.
    completions = [inm for op, url, inm in sent.requests if op == "CompleteMultipartUpload"]
    heads = [url for op, url, _ in sent.requests if op == "HeadObject"]
    checked = sum(url.endswith(tuple(f"/out/{name}" for name in files)) for url in heads)
    if HONOURS_COMPLETION[target.name]:  # the atomic path: no HEAD
        assert completions.count("*") == 3 + 1 and checked == 0
    else:
        assert completions.count("*") == 1 and checked == 3  # the probe's, then HEADs
    # A second job of the same process on the same bucket pays nothing more.
    second = make_committer()
    sent_again = Sent(second.store_fs)
    second.commit_job(run_job(second, {"g.csv": (b"data", "xb")}))
    assert sent_again.probes() == []
    keys = object_keys(target.client, target.bucket)
    assert [k for k in keys if PROBE_PREFIX in k] == []
    assert pending_uploads(target.client, target.bucket) == []


def test_jobs_without_create_only_files_never_probe(make_committer, target):
    committer = make_committer()
    sent = Sent(committer.store_fs)
    committer.commit_job(run_job(committer, {"a.csv": (b"a", "wb"), "b.csv": (b"b", "wb")}))
    assert sent.probes() == []
    assert [inm for op, _, inm in sent.requests if op == "CompleteMultipartUpload"] == [None] * 2
    heads = [url for op, url, _ in sent.requests if op == "HeadObject"]
    assert not any(url.endswith(("/out/a.csv", "/out/b.csv")) for url in heads)


def test_a_second_writer_of_a_create_only_path_is_refused(make_committer, target):
    # Another process opening the same task path 'xb': the marker's conditional PUT,
    # which both stores honour, refuses it.
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("x.csv"), "xb") as f:
        f.write(b"first")
    as_another_process(committer, task)
    with pytest.raises(FileExistsError, match="another writer has already opened this path"):
        committer.fs.open(task.path("x.csv"), "xb")
    committer.commit_job([committer.commit_task(task)])
    assert target.body("out/x.csv") == b"first"
    assert pending_uploads(target.client, target.bucket) == []


# --- two jobs racing for one create-only name: exactly one publishes, on every store -----

#: How many times the race for one create-only name is run on each store. SeaweedFS's
#: completions alone let both jobs publish in about a third of pairs (20 and 22 of 60 on
#: two runs of test_racing_jobs.py): 10 rounds would see it with a probability of about
#: 0.98 if the claim did not hold.
XB_ROUNDS = 10


def race_for_x(
    target: Any, dest: str
) -> tuple[dict[str, JobCommitError | None], dict[str, Any], dict[str, str]]:
    """Two jobs (``first``, ``second``) write ``x.csv`` create-only and ``<job>.csv`` to one
    destination, then commit at once: each job's failure (``None``: committed), what each
    sent, and each one's job id."""
    jobs = {name: magic_committer(target, dest) for name in ("first", "second")}
    sent = {name: Sent(job.store_fs) for name, job in jobs.items()}
    messages = {
        name: run_job(job, {"x.csv": (name.encode() * 5, "xb"), f"{name}.csv": (b"own", "wb")})
        for name, job in jobs.items()
    }
    barrier = threading.Barrier(len(jobs))
    failures: dict[str, JobCommitError | None] = {}

    def commit(name: str) -> None:
        barrier.wait()
        try:
            jobs[name].commit_job(messages[name])
            failures[name] = None
        except JobCommitError as failure:
            failures[name] = failure

    threads = [threading.Thread(target=commit, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures, sent, {name: job.job_id for name, job in jobs.items()}


def completions_on_x(requests: Sent, dest: str) -> list[tuple[str, str | None]]:
    """(operation, If-None-Match) of one job's requests on ``<dest>/x.csv``."""
    return [
        (op, inm)
        for op, url, inm in requests.requests
        if url.split("?")[0].endswith(f"/{dest}/x.csv")
    ]


@pytest.mark.parametrize("target", S3_TARGETS, indirect=True)
def test_two_jobs_racing_for_one_create_only_name_publish_exactly_one(target):
    """Two jobs write ``x.csv`` create-only to one destination and commit at once, on each
    store (RGW ignores the completion's condition, SeaweedFS checks it but not
    atomically): each claims the name first (a conditional PutObject, atomic on all
    three), so exactly one publishes; the other fails naming the file (and the winner,
    when the claim refused it), publishes nothing of its own, leaves nothing parked and
    no claim. Where the store honours the completion's condition, no HEAD precedes it."""
    for round_number in range(XB_ROUNDS):
        dest = f"out{round_number}"
        failures, sent, ids = race_for_x(target, dest)
        (winner,) = [name for name, failure in failures.items() if failure is None]
        (loser,) = [name for name, failure in failures.items() if failure is not None]
        refusal = str(failures[loser])
        x_url = f"s3://{target.bucket}/{dest}/x.csv"
        assert (
            f"{x_url} already exists" in refusal
            or f"{x_url} is being created by job {ids[winner]}" in refusal
        ), refusal
        assert target.body(f"{dest}/x.csv") == winner.encode() * 5
        assert visible_keys(target.client, target.bucket, f"{dest}/") == sorted(
            [f"{dest}/_SUCCESS", f"{dest}/x.csv", f"{dest}/{winner}.csv"]
        )
        assert object_keys(target.client, target.bucket, "_magicfs/") == []  # no claim
        assert pending_uploads(target.client, target.bucket) == []
        for name, requests in sent.items():
            on_x = completions_on_x(requests, dest)
            completions = [inm for op, inm in on_x if op == "CompleteMultipartUpload"]
            assert len(completions) == (1 if name == winner else len(completions))
            assert len(completions) <= 1
            if HONOURS_COMPLETION[target.name] and completions:  # the conditional path
                assert completions == ["*"]
                before = on_x[: on_x.index(("CompleteMultipartUpload", "*"))]
                assert ("HeadObject", None) not in before, name


def test_a_create_claim_left_by_a_dead_job_refuses_by_its_id_until_rolled_back(
    tmp_path, s3_options, s3_client, bucket
):
    """A job killed while it held a create-only name's claim (just before completing the
    file) leaves the claim: another job creating that name is refused naming the dead
    job, and leaves nothing; ``abort_job()`` of the dead job from another process rolls
    it back and releases the claim, and the name can be created again."""
    dest = f"s3://{bucket}/out"
    dead = f"crash-{uuid.uuid4().hex[:8]}"
    die = {"op": "CompleteMultipartUpload", "when": "before", "nth": 1}
    run_crashing_job(
        tmp_path, dest, die, job_id=dead, storage_options=s3_options, pipe_mode="create"
    )
    (claim,) = object_keys(s3_client, bucket, "_magicfs/")
    record = json.loads(body(s3_client, bucket, claim))
    assert record["jobId"] == dead
    name = record["key"].removeprefix("out/")
    options = {**s3_options, "skip_instance_cache": True}
    other = MagicCommitter(dest, storage_options=options)
    with pytest.raises(JobCommitError) as refused:
        other.commit_job(run_job(other, {name: (b"other", "xb")}))
    assert f"{dest}/{name} is being created by job {dead}" in str(refused.value)
    assert f"magicfs jobs rollback --job {dead}" in str(refused.value)
    assert visible_keys(s3_client, bucket, "out/") == []  # the refused job left nothing
    assert [k for k in object_keys(s3_client, bucket) if other.job_id in k] == []
    assert object_keys(s3_client, bucket, "_magicfs/") == [claim]
    MagicCommitter(dest, job_id=dead, storage_options=options).abort_job()
    assert object_keys(s3_client, bucket, "_magicfs/") == []
    assert pending_uploads(s3_client, bucket) == []
    again = MagicCommitter(dest, storage_options=options)
    again.commit_job(run_job(again, {name: (b"again", "xb")}))
    assert body(s3_client, bucket, f"out/{name}") == b"again"


# --- moto made to ignore If-None-Match (a botocore hook drops the header), as RGW does ---


def test_ignored_condition_falls_back_to_a_head_and_refuses(moto_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/x.csv", Body=b"theirs")
    committer = moto_committer()
    drop_if_none_match(committer.store_fs, "CompleteMultipartUpload")
    sent = Sent(committer.store_fs)
    messages = run_job(committer, {"x.csv": (b"ours", "xb"), "y.csv": (b"y", "wb")})
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    message = str(failure.value)
    assert f"s3://{bucket}/out/x.csv already exists" in message
    assert "does not honour If-None-Match on CompleteMultipartUpload" in message
    assert "answered 200 and replaced the existing object" in message  # what the probe saw
    assert_refused_cleanly(s3_client, bucket, {"out/x.csv": b"theirs"})
    # The probe found the completion's condition ignored (no abort: the upload completed).
    assert [op for op, _ in sent.probes()] == [
        "PutObject",
        "PutObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "DeleteObject",
    ]


def test_ignored_condition_still_publishes_a_free_name(moto_committer, s3_client, bucket):
    committer = moto_committer()
    drop_if_none_match(committer.store_fs, "CompleteMultipartUpload")
    sent = Sent(committer.store_fs)
    committer.commit_job(run_job(committer, {"x.csv": (b"ours", "xb")}))
    assert body(s3_client, bucket, "out/x.csv") == b"ours"
    # The fallback's cost: one HEAD of the destination before its completion.
    heads = [url for op, url, _ in sent.requests if op == "HeadObject"]
    assert sum(url.endswith("/out/x.csv") for url in heads) == 1
    assert [k for k in object_keys(s3_client, bucket) if PROBE_PREFIX in k] == []


def test_ignored_condition_on_the_marker_falls_back_to_a_head(moto_committer, s3_client, bucket):
    # Two writers of one task path in different processes: the second must be refused
    # even where PutObject's If-None-Match is ignored.
    committer = moto_committer()
    drop_if_none_match(committer.store_fs, "PutObject")
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("x.csv"), "xb") as f:
        f.write(b"first")
    as_another_process(committer, task)  # the second writer knows nothing of the first
    with pytest.raises(FileExistsError, match="does not honour If-None-Match on PutObject"):
        committer.fs.open(task.path("x.csv"), "xb")
    committer.commit_job([committer.commit_task(task)])
    assert body(s3_client, bucket, "out/x.csv") == b"first"
    assert pending_uploads(s3_client, bucket) == []


def test_a_failed_probe_is_not_kept_for_good(moto_committer, s3_client, bucket, monkeypatch):
    # A passing fault during the probe (here: its first PUT fails) must not turn the
    # store's atomic condition into HEAD-then-write for the rest of the process.
    monkeypatch.setattr(conditional, "FAILED_PROBE_TTL", 0.0)
    first = moto_committer()

    def fail_probe(params, **_) -> None:
        if PROBE_PREFIX in params.get("Key", ""):
            raise OSError("injected: the probe's PUT failed")

    first.store_fs.s3.meta.events.register("before-parameter-build.s3.PutObject", fail_probe)
    sent = Sent(first.store_fs)
    first.commit_job(run_job(first, {"x.csv": (b"first", "xb")}))
    assert body(s3_client, bucket, "out/x.csv") == b"first"
    heads = [url for op, url, _ in sent.requests if op == "HeadObject"]
    assert sum(url.endswith("/out/x.csv") for url in heads) == 1  # the fallback's HEAD
    # The next job of the process probes again, learns the condition is honoured, and
    # sends it instead of a HEAD.
    second = moto_committer()
    sent_again = Sent(second.store_fs)
    second.commit_job(run_job(second, {"y.csv": (b"second", "xb")}))
    assert sent_again.probes() == PROBE["moto"]
    heads = [url for op, url, _ in sent_again.requests if op == "HeadObject"]
    assert sum(url.endswith("/out/y.csv") for url in heads) == 0
    completions = [
        inm
        for op, url, inm in sent_again.requests
        if op == "CompleteMultipartUpload" and url.split("?")[0].endswith("/out/y.csv")
    ]
    assert completions == ["*"]
    assert [k for k in object_keys(s3_client, bucket) if PROBE_PREFIX in k] == []
    assert pending_uploads(s3_client, bucket) == []


# --- a job commit killed half-way, then finished: its own files are no conflict ----------


@pytest.mark.parametrize("store", ["s3", "rgw", "seaweed"])
def test_killed_mid_publish_then_finished_with_create_only_files(request, store, tmp_path):
    client = store_fixture(request, store, "client")
    bucket = store_fixture(request, store, "bucket")
    server = store_fixture(request, store, "server")
    job_id = f"crash-{uuid.uuid4().hex[:8]}"
    messages = run_crashing_job(
        tmp_path,
        f"s3://{bucket}/out",
        {"op": "CompleteMultipartUpload", "nth": 5},
        job_id=job_id,
        storage_options=server.storage_options,
        pipe_mode="create",
    )
    assert len(visible_keys(client, bucket, "out/t")) == 5  # published before the kill
    committer = MagicCommitter(
        f"s3://{bucket}/out",
        job_id=job_id,
        storage_options={**server.storage_options, "skip_instance_cache": True},
    )
    summary = committer.commit_job(messages)
    assert summary.files == 12
    assert {
        key.removeprefix("out/"): client.get_object(Bucket=bucket, Key=key)["Body"].read()
        for key in visible_keys(client, bucket, "out/t")
    } == ALL
    assert pending_uploads(client, bucket) == []
    assert [k for k in object_keys(client, bucket) if "__magic" in k] == []
