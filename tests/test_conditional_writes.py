"""Files opened ``xb`` never replace an object, whatever the store honours (issue 25, item 2).

magicfs probes whether the store honours ``If-None-Match: *`` on PutObject and on
CompleteMultipartUpload (:mod:`magicfs.stores.s3.conditional`) and falls back to a HEAD
where it does not. moto honours both; Ceph RGW 16.2 honours PutObject's only. A store
that ignores the completion's condition is also made on moto, by a botocore hook that
drops the header from the request (the store then never sees it, as RGW ignores it).
"""

from __future__ import annotations

import threading

import pytest
from helpers import as_another_process, object_keys, pending_uploads, visible_keys

from magicfs import MagicCommitter
from magicfs.errors import JobCommitError
from magicfs.stores.s3.conditional import PROBE_PREFIX


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
def make_committer(bucket, s3_options):
    def make(**kwargs) -> MagicCommitter:
        options = {**s3_options, "skip_instance_cache": True}
        return MagicCommitter(f"s3://{bucket}/out", storage_options=options, **kwargs)

    return make


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


# --- a store that honours If-None-Match on both (moto, as AWS) ----------------------------


@pytest.mark.parametrize("mode", ["xb", "create"])
def test_create_only_over_an_existing_object_fails_the_job(make_committer, s3_client, bucket, mode):
    s3_client.put_object(Bucket=bucket, Key="out/x.csv", Body=b"theirs")
    committer = make_committer()
    messages = run_job(committer, {"x.csv": (b"ours", mode), "y.csv": (b"y", "wb")})
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    message = str(failure.value)
    assert f"s3://{bucket}/out/x.csv already exists" in message
    assert "opened 'xb' (create only)" in message and "412 PreconditionFailed" in message
    assert_refused_cleanly(s3_client, bucket, {"out/x.csv": b"theirs"})


def test_create_only_over_a_free_name_is_published(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.commit_job(run_job(committer, {"x.csv": (b"ours", "xb"), "z": (b"z", "create")}))
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/x.csv", "out/z"]
    assert body(s3_client, bucket, "out/x.csv") == b"ours"
    assert pending_uploads(s3_client, bucket) == []


def test_the_probe_is_paid_once_per_bucket_and_leaves_nothing(make_committer, s3_client, bucket):
    committer = make_committer()
    sent = Sent(committer.store_fs)
    files = {f"f{n}.csv": (b"data", "xb") for n in range(3)}
    committer.commit_job(run_job(committer, files))
    # One probe for the writers and the job commit of this process: PUT, conditional
    # PUT (412), create, part, conditional completion (412), abort, DELETE.
    assert sent.probes() == [
        ("PutObject", None),
        ("PutObject", "*"),
        ("CreateMultipartUpload", None),
        ("UploadPart", None),
        ("CompleteMultipartUpload", "*"),
        ("AbortMultipartUpload", None),
        ("DeleteObject", None),
    ]
    # Each completion asked the store (it honours the condition): no HEAD before it.
    completions = [inm for op, url, inm in sent.requests if op == "CompleteMultipartUpload"]
    assert completions.count("*") == 3 + 1
    # A second job of the same process on the same bucket pays nothing more.
    second = make_committer()
    sent_again = Sent(second.store_fs)
    second.commit_job(run_job(second, {"g.csv": (b"data", "xb")}))
    assert sent_again.probes() == []
    assert [k for k in object_keys(s3_client, bucket) if PROBE_PREFIX in k] == []
    assert pending_uploads(s3_client, bucket) == []


def test_jobs_without_create_only_files_never_probe(make_committer, s3_client, bucket):
    committer = make_committer()
    sent = Sent(committer.store_fs)
    committer.commit_job(run_job(committer, {"a.csv": (b"a", "wb"), "b.csv": (b"b", "wb")}))
    assert sent.probes() == []
    assert [inm for op, _, inm in sent.requests if op == "CompleteMultipartUpload"] == [None] * 2


# --- a store that ignores If-None-Match on CompleteMultipartUpload (as Ceph RGW 16.2) ------


def test_ignored_condition_falls_back_to_a_head_and_refuses(make_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/x.csv", Body=b"theirs")
    committer = make_committer()
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


def test_ignored_condition_still_publishes_a_free_name(make_committer, s3_client, bucket):
    committer = make_committer()
    drop_if_none_match(committer.store_fs, "CompleteMultipartUpload")
    sent = Sent(committer.store_fs)
    committer.commit_job(run_job(committer, {"x.csv": (b"ours", "xb")}))
    assert body(s3_client, bucket, "out/x.csv") == b"ours"
    # The fallback's cost: one HEAD of the destination before its completion.
    heads = [url for op, url, _ in sent.requests if op == "HeadObject"]
    assert sum(url.endswith("/out/x.csv") for url in heads) == 1
    assert [k for k in object_keys(s3_client, bucket) if PROBE_PREFIX in k] == []


def test_ignored_condition_on_the_marker_falls_back_to_a_head(make_committer, s3_client, bucket):
    # Two writers of one task path in different processes: the second must be refused
    # even where PutObject's If-None-Match is ignored.
    committer = make_committer()
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
