"""The demo's comparison is measured: the server counts the copies it makes.

``magicfs demo`` prints, for magicfs and for FileOutputCommitter v1, the server-side
copies and the bytes they moved during the commits. Both come from the embedded server's
own count of the ``CopyObject`` and ``UploadPartCopy`` requests it answered; these tests
hold that count against copies made on purpose, and run the demo's commits on a few
small files (tests/test_readme.py runs the whole demo once).
"""

from __future__ import annotations

from collections import Counter

import pytest

from magicfs.integrations import demo
from magicfs.integrations.embedded_s3 import CopyCount, EmbeddedS3Server

COPY_OPERATIONS = ("CopyObject", "UploadPartCopy")


def count_operations(client) -> Counter:
    """The S3 operations ``client`` sends from now on (an independent, client-side count)."""
    counts: Counter = Counter()
    client.meta.events.register("before-call.s3", lambda model, **_: counts.update([model.name]))
    return counts


def test_the_server_counts_each_copy_it_answers_and_its_bytes(s3_server, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="a", Body=b"a" * 3_000)
    s3_client.put_object(Bucket=bucket, Key="b", Body=b"b" * 5_000)
    s3_client = s3_server.boto3_client()  # its own: the count hooks the client's events
    sent = count_operations(s3_client)
    before = s3_server.copies()
    s3_client.copy_object(Bucket=bucket, Key="a2", CopySource={"Bucket": bucket, "Key": "a"})
    s3_client.copy_object(Bucket=bucket, Key="b2", CopySource={"Bucket": bucket, "Key": "b"})
    upload = s3_client.create_multipart_upload(Bucket=bucket, Key="mpu")["UploadId"]
    s3_client.upload_part_copy(
        Bucket=bucket,
        Key="mpu",
        UploadId=upload,
        PartNumber=1,
        CopySource={"Bucket": bucket, "Key": "b"},
        CopySourceRange="bytes=1000-2999",
    )
    s3_client.abort_multipart_upload(Bucket=bucket, Key="mpu", UploadId=upload)
    with pytest.raises(s3_client.exceptions.NoSuchKey):  # refused: nothing copied
        s3_client.copy_object(Bucket=bucket, Key="c2", CopySource={"Bucket": bucket, "Key": "c"})
    s3_client.put_object(Bucket=bucket, Key="d", Body=b"not a copy")
    s3_client.get_object(Bucket=bucket, Key="a2")["Body"].read()

    assert s3_server.copies() - before == CopyCount(copies=3, bytes=3_000 + 5_000 + 2_000)
    # The client sent one copy more: the refused one, which the server does not count.
    assert sum(sent[name] for name in COPY_OPERATIONS) == 4


@pytest.fixture(scope="module")
def demo_server():
    with EmbeddedS3Server(buckets=[demo.BUCKET]) as server:
        yield server


#: A few small files of the demo's shape: the task that wrote each is in its name.
FILES = {
    f"year=2024/region={region}/part-{task:05d}-0.parquet": bytes([task]) * (1_000 + 100 * task)
    for task, region in [(0, "north"), (1, "north"), (1, "south"), (2, "east"), (3, "west")]
}
TOTAL = sum(len(data) for data in FILES.values())


def test_the_magicfs_column_counts_no_copy_for_the_magic_committer(demo_server):
    before = demo_server.copies()
    run = demo.magicfs_commit(demo_server, FILES, run=0)
    assert run.copied == CopyCount(0, 0)
    assert demo_server.copies() - before == CopyCount(0, 0)  # nor while writing
    assert run.job_requests >= len(FILES)  # it did commit: a completion per file
    assert run.published == len(FILES)  # counted on the store, after the job


def test_the_magicfs_column_counts_the_copies_of_a_committer_that_renames(demo_server):
    # magicfs's own FileOutputCommitter v1 renames every file twice: on S3, two copies.
    run = demo.magicfs_commit(demo_server, FILES, run=1, committer="file-v1")
    assert run.copied[:2] == (2 * len(FILES), 2 * TOTAL)


def test_the_v1_column_counts_two_copies_of_every_file(demo_server):
    client = demo_server.boto3_client()
    for name, data in FILES.items():  # where the demo job published them
        client.put_object(Bucket=demo.BUCKET, Key=f"sales/{name}", Body=data)
    run = demo.classic_commit(demo_server, FILES, run=0)
    assert run.copied[:2] == (2 * len(FILES), 2 * TOTAL)
    assert run.published == len(FILES)
