"""The benchmarks' stub S3 (``benchmarks/stub_s3.py``) speaks S3 as botocore and s3fs expect.

The stub is what ``benchmarks/large_jobs.py`` measures a 1,000,000-file job commit
against; these tests hold it to the parts of S3 that benchmark relies on, through the
same clients magicfs uses (boto3 and s3fs), on a free 127.0.0.1 port.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import s3fs
from botocore.exceptions import ClientError

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from stub_s3 import StubS3Process  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def stub():
    with StubS3Process() as server:
        yield server


@pytest.fixture
def client(stub):
    return stub.boto3_client(retries={"total_max_attempts": 1, "mode": "standard"})


@pytest.fixture
def bucket(client, request):
    name = request.node.name.replace("_", "-").lower()[:60]
    client.create_bucket(Bucket=name)
    return name


def code(error: ClientError) -> str:
    return error.response["Error"]["Code"]


def test_put_get_head_with_metadata_ranges_and_conditions(client, bucket):
    body = b"0123456789" * 10
    put = client.put_object(Bucket=bucket, Key="a/b c.txt", Body=body, Metadata={"who": "me"})
    assert put["ETag"] == '"' + hashlib.md5(body).hexdigest() + '"'

    head = client.head_object(Bucket=bucket, Key="a/b c.txt")
    assert head["ContentLength"] == 100
    assert head["Metadata"] == {"who": "me"}
    assert head["ETag"] == put["ETag"]
    ranged = client.get_object(Bucket=bucket, Key="a/b c.txt", Range="bytes=10-14")
    assert ranged["Body"].read() == b"01234"
    assert ranged["ContentRange"] == "bytes 10-14/100"
    # A range past the end is clipped, as magicfs's record reads rely on.
    assert client.get_object(Bucket=bucket, Key="a/b c.txt", Range="bytes=0-9999")[
        "Body"
    ].read() == (body)

    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=bucket, Key="a/b c.txt", Body=b"other", IfNoneMatch="*")
    assert code(refused.value) == "PreconditionFailed"
    assert client.get_object(Bucket=bucket, Key="a/b c.txt")["Body"].read() == body

    client.delete_object(Bucket=bucket, Key="a/b c.txt")
    with pytest.raises(ClientError) as missing:
        client.get_object(Bucket=bucket, Key="a/b c.txt")
    assert code(missing.value) == "NoSuchKey"
    with pytest.raises(ClientError) as missing_head:
        client.head_object(Bucket=bucket, Key="a/b c.txt")
    assert missing_head.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404

    client.put_object(Bucket=bucket, Key="empty", Body=b"")
    with pytest.raises(ClientError) as empty:
        client.get_object(Bucket=bucket, Key="empty", Range="bytes=0-10")
    assert code(empty.value) == "InvalidRange"


def test_listings_page_by_1000_and_roll_up_common_prefixes(stub, client, bucket):
    keys = [*sorted(f"d/{i % 7:02d}/f-{i:05d}" for i in range(1100)), "top.txt"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))

    pages = list(
        client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, PaginationConfig={"PageSize": 5000}
        )
    )
    assert [page["KeyCount"] for page in pages] == [1000, 101]
    assert [o["Key"] for page in pages for o in page["Contents"]] == sorted(keys)

    small = list(
        client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix="d/", Delimiter="/", PaginationConfig={"PageSize": 3}
        )
    )
    prefixes = [p["Prefix"] for page in small for p in page.get("CommonPrefixes", [])]
    assert prefixes == [f"d/{i:02d}/" for i in range(7)]
    assert len(small) == 3  # 3 + 3 + 1 prefixes, each page's token skipping a whole prefix

    top = client.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == ["top.txt"]
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["d/"]

    v1 = list(client.get_paginator("list_objects").paginate(Bucket=bucket, Prefix="d/03/"))
    assert [o["Key"] for page in v1 for o in page["Contents"]] == [
        k for k in keys if k.startswith("d/03/")
    ]

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **stub.storage_options)
    assert len(fs.find(bucket)) == len(keys)
    assert fs.ls(f"{bucket}/d", detail=False) == [f"{bucket}/d/{i:02d}" for i in range(7)]
    assert fs.cat_file(f"{bucket}/top.txt") == b"x"

    client.delete_object(Bucket=bucket, Key="d/00/f-00000")
    after = client.list_objects_v2(Bucket=bucket, Prefix="d/00/", MaxKeys=2)
    assert [o["Key"] for o in after["Contents"]] == ["d/00/f-00007", "d/00/f-00014"]


def test_delete_objects_quiet_and_verbose(client, bucket):
    for key in ("a", "b", "c"):
        client.put_object(Bucket=bucket, Key=key, Body=b"1")
    verbose = client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "nothing"}]}
    )
    assert sorted(d["Key"] for d in verbose["Deleted"]) == ["a", "nothing"]
    quiet = client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "b"}, {"Key": "c"}], "Quiet": True}
    )
    assert "Deleted" not in quiet and "Errors" not in quiet
    assert client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_multipart_upload_checks_parts_and_declared_size(client, bucket):
    upload = client.create_multipart_upload(Bucket=bucket, Key="big", Metadata={"job": "j1"})
    upload_id = upload["UploadId"]
    first, last = b"a" * (5 * MiB), b"tail"
    etags = [
        client.upload_part(Bucket=bucket, Key="big", UploadId=upload_id, PartNumber=n, Body=body)[
            "ETag"
        ]
        for n, body in ((1, first), (2, last))
    ]
    parts = client.list_parts(Bucket=bucket, Key="big", UploadId=upload_id)["Parts"]
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in parts] == [
        (1, len(first), etags[0]),
        (2, len(last), etags[1]),
    ]
    listed = client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in listed] == [("big", upload_id)]
    manifest = {"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]}

    with pytest.raises(ClientError) as wrong_size:
        client.complete_multipart_upload(
            Bucket=bucket, Key="big", UploadId=upload_id, MultipartUpload=manifest, MpuObjectSize=3
        )
    assert code(wrong_size.value) == "InvalidRequest"
    with pytest.raises(ClientError) as wrong_etag:
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="big",
            UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"0000"'}]},
        )
    assert code(wrong_etag.value) == "InvalidPart"

    done = client.complete_multipart_upload(
        Bucket=bucket,
        Key="big",
        UploadId=upload_id,
        MultipartUpload=manifest,
        MpuObjectSize=len(first) + len(last),
    )
    assert done["ETag"].endswith('-2"')
    head = client.head_object(Bucket=bucket, Key="big")
    assert head["ContentLength"] == len(first) + len(last)
    assert head["Metadata"] == {"job": "j1"}
    assert client.get_object(Bucket=bucket, Key="big", Range="bytes=5242878-5242881")[
        "Body"
    ].read() == (b"aata")
    with pytest.raises(ClientError) as again:
        client.complete_multipart_upload(
            Bucket=bucket, Key="big", UploadId=upload_id, MultipartUpload=manifest
        )
    assert code(again.value) == "NoSuchUpload"
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def _upload_parts(client, bucket: str, key: str, bodies: list[bytes]) -> tuple[str, dict]:
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = [
        {
            "PartNumber": n,
            "ETag": client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=body
            )["ETag"],
        }
        for n, body in enumerate(bodies, 1)
    ]
    return upload_id, {"Parts": parts}


def test_multipart_upload_holds_the_bytes_written(stub, client, bucket):
    first, last = os.urandom(5 * MiB + 3), os.urandom(1234)
    upload_id, manifest = _upload_parts(client, bucket, "out/f.bin", [first, last])
    client.complete_multipart_upload(
        Bucket=bucket, Key="out/f.bin", UploadId=upload_id, MultipartUpload=manifest
    )
    assert client.get_object(Bucket=bucket, Key="out/f.bin")["Body"].read() == first + last

    # Through s3fs, as magicfs writes: a file bigger than one block goes up as a
    # multipart upload (its ETag says so).
    fs = s3fs.S3FileSystem(**stub.storage_options, skip_instance_cache=True)
    chunks = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(17)]
    with fs.open(f"{bucket}/out/s3fs.bin", "wb", block_size=5 * MiB) as f:
        for chunk in chunks:
            f.write(chunk)
    assert fs.cat_file(f"{bucket}/out/s3fs.bin") == b"".join(chunks)
    assert "-" in client.head_object(Bucket=bucket, Key="out/s3fs.bin")["ETag"]


def test_aborted_upload_leaves_nothing(stub, client, bucket):
    upload_id, manifest = _upload_parts(client, bucket, "gone", [os.urandom(1000)])
    client.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=upload_id)

    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert client.list_objects_v2(Bucket=bucket).get("Contents", []) == []
    with pytest.raises(ClientError) as parts:
        client.list_parts(Bucket=bucket, Key="gone", UploadId=upload_id)
    assert code(parts.value) == "NoSuchUpload"
    with pytest.raises(ClientError) as complete:
        client.complete_multipart_upload(
            Bucket=bucket, Key="gone", UploadId=upload_id, MultipartUpload=manifest
        )
    assert code(complete.value) == "NoSuchUpload"


def test_conditional_complete_is_refused_over_an_existing_object(client, bucket):
    client.put_object(Bucket=bucket, Key="taken", Body=b"first writer")
    upload_id, manifest = _upload_parts(client, bucket, "taken", [b"second writer"])

    with pytest.raises(ClientError) as refused:
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="taken",
            UploadId=upload_id,
            MultipartUpload=manifest,
            IfNoneMatch="*",
        )
    assert code(refused.value) == "PreconditionFailed"
    assert client.get_object(Bucket=bucket, Key="taken")["Body"].read() == b"first writer"
    # As on S3, the refused upload is still pending: its owner aborts it.
    listed = client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [u["UploadId"] for u in listed] == [upload_id]
    client.abort_multipart_upload(Bucket=bucket, Key="taken", UploadId=upload_id)

    # Onto a free key the same condition holds, and the bytes land.
    upload_id, manifest = _upload_parts(client, bucket, "free", [b"only writer"])
    client.complete_multipart_upload(
        Bucket=bucket, Key="free", UploadId=upload_id, MultipartUpload=manifest, IfNoneMatch="*"
    )
    assert client.get_object(Bucket=bucket, Key="free")["Body"].read() == b"only writer"


def test_request_log_names_operation_and_key_while_on(stub, client, bucket):
    stub.reset_stats()
    client.put_object(Bucket=bucket, Key="before", Body=b"1")
    stub.configure(log=True)
    try:
        client.put_object(Bucket=bucket, Key="a/x.pending", Body=b"2")
        with pytest.raises(ClientError):
            client.head_object(Bucket=bucket, Key="missing")
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "before"}]})
        assert stub.request_log() == [
            ("PutObject", "a/x.pending", 200),
            ("HeadObject", "missing", 404),
            ("DeleteObjects", "", 200),
        ]
    finally:
        stub.configure(log=False)
    client.put_object(Bucket=bucket, Key="after", Body=b"3")
    assert len(stub.request_log()) == 3  # nothing logged once off
    stub.reset_stats()
    assert stub.request_log() == []


def test_phases_of_a_magic_job_add_up_to_the_servers_count(stub, bucket):
    from bench_servers import StubTarget
    from job_phases import PHASES, ServerLog, phased_job

    from magicfs import committer_for

    target = StubTarget(stub)
    committer = committer_for(
        f"s3://{bucket}/out",
        committer="magic",
        storage_options={**stub.storage_options, "skip_instance_cache": True},
        progress=False,
    )

    def write_task(attempt) -> None:
        for n in range(2):
            with committer.fs.open(attempt.path(f"f{attempt.task_index}-{n}"), "wb") as f:
                f.write(b"x" * 100)

    def executors(work, count: int) -> list:
        return [work(task) for task in range(count)]

    target.log_requests(True)
    try:
        counts = phased_job(ServerLog(target), committer, 2, write_task, executors, 0.0)
    finally:
        target.log_requests(False)
    assert list(counts) == list(PHASES)
    total = sum((c for c in counts.values()), start=collections.Counter())
    # Each of the 4 files: one upload created, one part, one completion, one .pending.
    assert (total["create"], total["part"], total["complete"]) == (4, 4, 4)
    assert counts["job commit"]["complete"] == 4 and counts["write"]["part"] == 4
    assert total["record"] >= 4 + 2 + 1  # .pending per file, .pendingset per task, _SUCCESS
    assert counts["clean-up"]["delete"] >= 1
    # The last phases' requests are exactly what the server counted since its last reset.
    last = sum(counts["job commit"].values()) + sum(counts["clean-up"].values())
    assert last == len(stub.request_log()) == stub.stats()["total"]


def test_upload_listing_pages_by_key_and_upload_id_markers(client, bucket):
    made = sorted(
        (key, client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"])
        for key in ("p/a", "p/a", "p/b", "p/c", "q/x")
    )
    pages = list(
        client.get_paginator("list_multipart_uploads").paginate(
            Bucket=bucket, Prefix="p/", PaginationConfig={"PageSize": 2}
        )
    )
    assert len(pages) == 2
    assert pages[0]["IsTruncated"] and not pages[1]["IsTruncated"]
    listed = [(u["Key"], u["UploadId"]) for page in pages for u in page["Uploads"]]
    assert listed == [m for m in made if m[0].startswith("p/")]

    key, upload_id = made[0]
    client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    with pytest.raises(ClientError) as gone:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    assert code(gone.value) == "NoSuchUpload"
    left = client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert len(left) == len(made) - 1


def test_synthetic_uploads_complete_once_and_are_never_listed(client, bucket):
    manifest = {"Parts": [{"PartNumber": 1, "ETag": '"abc"'}]}
    client.complete_multipart_upload(
        Bucket=bucket,
        Key="out/p=1/f.parquet",
        UploadId="synthetic-job-1",
        MultipartUpload=manifest,
        MpuObjectSize=4321,
    )
    head = client.head_object(Bucket=bucket, Key="out/p=1/f.parquet")
    assert head["ContentLength"] == 4321
    assert client.get_object(Bucket=bucket, Key="out/p=1/f.parquet", Range="bytes=0-3")[
        "Body"
    ].read() == (bytes(4))
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    with pytest.raises(ClientError) as again:
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="out/p=1/f.parquet",
            UploadId="synthetic-job-1",
            MultipartUpload=manifest,
            MpuObjectSize=4321,
        )
    assert code(again.value) == "NoSuchUpload"

    # Another synthetic upload onto the same key, completed only if the key is free.
    with pytest.raises(ClientError) as exclusive:
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="out/p=1/f.parquet",
            UploadId="synthetic-job-2",
            MultipartUpload=manifest,
            MpuObjectSize=1,
            IfNoneMatch="*",
        )
    assert code(exclusive.value) == "PreconditionFailed"
    client.abort_multipart_upload(
        Bucket=bucket, Key="out/p=1/f.parquet", UploadId="synthetic-job-2"
    )
    with pytest.raises(ClientError) as aborted:
        client.complete_multipart_upload(
            Bucket=bucket, Key="out/other", UploadId="synthetic-job-2", MultipartUpload=manifest
        )
    assert code(aborted.value) == "NoSuchUpload"
    with pytest.raises(ClientError) as unknown:
        client.complete_multipart_upload(
            Bucket=bucket, Key="out/x", UploadId="not-synthetic", MultipartUpload=manifest
        )
    assert code(unknown.value) == "NoSuchUpload"


def test_counters_by_operation_and_status_reset_on_request(stub, client, bucket):
    stub.reset_stats()
    client.put_object(Bucket=bucket, Key="k", Body=b"1")
    client.head_object(Bucket=bucket, Key="k")
    with pytest.raises(ClientError):
        client.get_object(Bucket=bucket, Key="missing")
    stats = stub.stats()
    assert stats["requests"] == {
        "PutObject": {"200": 1},
        "HeadObject": {"200": 1},
        "GetObject": {"404": 1},
    }
    assert stats["total"] == 3 and stats["throttled"] == 0
    assert stats["cpu_seconds"] > 0 and stats["objects"] >= 1
    stub.reset_stats()
    assert stub.stats()["total"] == 0


def test_throttling_answers_slowdown_above_the_rate():
    with StubS3Process(rate=20) as stub:
        client = stub.boto3_client(retries={"total_max_attempts": 1, "mode": "standard"})
        client.create_bucket(Bucket="t")

        def put(n: int) -> str:
            try:
                client.put_object(Bucket="t", Key=f"k{n}", Body=b"1")
                return "ok"
            except ClientError as e:
                assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503
                return code(e)

        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(put, range(60)))
        elapsed = time.monotonic() - start
        accepted = outcomes.count("ok")
        assert outcomes.count("SlowDown") == 60 - accepted > 0
        assert accepted <= 2 + 20 * elapsed + 1
        stats = stub.stats()
        assert stats["throttled"] == 60 - accepted
        assert stats["requests"]["PutObject"]["503"] == 60 - accepted
        # Reads are never throttled; and the limit can be lifted at run time.
        assert all(client.list_objects_v2(Bucket="t")["KeyCount"] == accepted for _ in range(30))
        stub.configure(rate=0)
        assert [put(n) for n in range(100, 130)] == ["ok"] * 30


def test_latency_is_added_to_every_request(stub, client, bucket):
    stub.configure(latency_ms=150)
    try:
        start = time.monotonic()
        client.list_objects_v2(Bucket=bucket)
        assert time.monotonic() - start >= 0.15
    finally:
        stub.configure(latency_ms=0)


def test_command_line_prints_ready_and_stops_cleanly_on_sigterm():
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "stub_s3.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:")
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=line.split()[1],
            region_name="us-east-1",
            aws_access_key_id="any",
            aws_secret_access_key="thing",
        )
        client.create_bucket(Bucket="cli")
        assert client.list_objects_v2(Bucket="cli")["KeyCount"] == 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


def test_requests_get_their_purpose_from_operation_and_key():
    from job_phases import purpose, split_clean_up

    job = "out/__magic_job-1/job-1/00/tasks/attempt_1_0000_m_000000_0"
    assert purpose("PutObject", f"{job}.started") == "marker"
    assert purpose("PutObject", f"{job}/__base/f.bin") == "marker"
    assert purpose("PutObject", f"{job}/__base/f.bin.pending") == "record"
    assert purpose("GetObject", f"{job}.pendingset") == "record"
    assert purpose("PutObject", "out/_SUCCESS") == "record"
    assert purpose("GetObject", "out/_SUCCESS") == "check"
    assert purpose("HeadObject", "out/__magic_job-1/_magicfs_job.json") == "check"
    assert purpose("PutObject", "out/f.bin") == "other"
    assert purpose("AbortMultipartUpload", "out/f.bin") == "delete"
    assert purpose("ListMultipartUploads", "") == "list"
    log = [
        ("CompleteMultipartUpload", "out/f"),
        ("PutObject", "out/_SUCCESS"),
        ("DeleteObjects", ""),
    ]
    assert split_clean_up(log) == (log[:2], log[2:])
