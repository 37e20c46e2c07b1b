"""The contract suite and the task-path table on S3: moto (``s3``) and two production S3
implementations, Ceph RGW (``rgw``, marked ``rgw``) and SeaweedFS (``seaweed``, its own S3
gateway, honouring conditional completions; marked ``seaweed``).

The committers: ``magic``, the staging committers ``directory`` and ``partitioned``, and
the classic ``file-v1`` and ``file-v2``. What is pending is the bucket's multipart
uploads, listed with boto3.
"""

from __future__ import annotations

from typing import Any

import fsspec
import pytest
from helpers import pending_uploads, visible_keys
from helpers.contract import CommitterContract, Pair, Target
from helpers.s3_targets import store_fixture
from helpers.task_paths import Destination, TaskPathContract, TaskStore

import magicfs


class TestS3Contract(CommitterContract):
    store = "s3"
    committers = ("magic", "directory", "partitioned", "file-v1", "file-v2")

    def make_target(self, request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
        bucket = store_fixture(request, self.store, "bucket")
        server = store_fixture(request, self.store, "server")
        options = {**server.storage_options, "skip_instance_cache": True}
        # One s3fs for the committers and the observer: a client costs 0.1-0.4 s to make.
        fs = fsspec.filesystem("s3", **options)
        target = Target(
            self,
            pair,
            fs,
            f"s3://{bucket}/out",
            {"fs": fs},
            client=store_fixture(request, self.store, "client"),
            bucket=bucket,
        )
        if pair.committer.stages_locally:
            buffer = str(tmp_path / "buffer")
            target.options["buffer_dir"] = buffer
            target.local_dirs.append(buffer)
        return target

    def lists_pending(self, target: Target) -> bool:
        return True  # whichever the committer: the bucket's multipart uploads

    def pending(self, target: Target) -> list[str]:
        """The keys of the bucket's multipart uploads, relative to the destination."""
        uploads = target.client.list_multipart_uploads(Bucket=target.bucket)
        prefix = target.root.partition("/")[2] + "/"
        return sorted(u["Key"].removeprefix(prefix) for u in uploads.get("Uploads", []))


class TestRgwContract(TestS3Contract):
    store = "rgw"


class TestS3InMemoryContract(TestS3Contract):
    """The magic committer with ``in_memory=True``: its attempts' commits stay in the
    process that set them up (a commit anywhere else is refused)."""

    committers = ("magic",)
    committer_options = {"in_memory": True}


class TestRgwInMemoryContract(TestS3InMemoryContract):
    store = "rgw"


class TestSeaweedContract(TestS3Contract):
    store = "seaweed"


class TestS3TaskPaths(TaskPathContract):
    """The magic committer's task paths: multipart uploads on the final keys."""

    store = "s3"
    deferred = True
    staged_bytes = "an unfinished multipart upload"
    suggests_staging = True

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        bucket = store_fixture(request, self.store, "bucket")
        server = store_fixture(request, self.store, "server")
        options = {**server.storage_options, "skip_instance_cache": True}
        committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=options)
        client = store_fixture(request, self.store, "client")
        return Destination(committer, f"{bucket}/plain", client, bucket)

    def published(self, ts: TaskStore) -> dict[str, bytes]:
        # boto3: s3fs would read a key "q?versionId=1" as version 1 of "q"
        return {
            key.removeprefix("out/"): ts.client.get_object(Bucket=ts.bucket, Key=key)["Body"].read()
            for key in visible_keys(ts.client, ts.bucket, "out/")
            if not key.removeprefix("out/").startswith(("_", "."))
        }

    def parked(self, ts: TaskStore) -> list[dict]:
        """The multipart uploads pending in the bucket."""
        return pending_uploads(ts.client, ts.bucket)

    def test_deleting_a_task_directory_aborts_each_upload_once(self, ts, request_log):
        for name in ("a.csv", "d/b.csv", "d/e/c.csv"):
            ts.fs.pipe_file(ts.path(name), b"x")
        request_log.attach(ts.raw)
        ts.fs.rm(ts.task.work_path, recursive=True)  # lists each marker and its .pending
        assert request_log.counts()["AbortMultipartUpload"] == 3  # not once more per .pending
        assert ts.parked() == []
        assert ts.commit() == {}


class TestRgwTaskPaths(TestS3TaskPaths):
    store = "rgw"


class TestSeaweedTaskPaths(TestS3TaskPaths):
    store = "seaweed"
