"""pandas and pyarrow writing through magic paths: invisible output, valid .pending files."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from helpers import complete_from_pending, object_keys, pending_uploads, visible_keys

from magicfs import MagicFileSystem
from magicfs.records import SinglePendingCommit


@pytest.fixture
def magic(s3):
    return MagicFileSystem(fs=s3)


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "year": [2023, 2024, 2024, 2025],
            "city": ["Oslo", "Lima", "Pune", "Kyiv"],
            "value": [1.5, 2.5, 3.5, 4.5],
        }
    )


def work(bucket: str) -> str:
    return f"{bucket}/out/__magic/job-1/task_7/__base"


def commit_everything(s3, s3_client, bucket: str) -> list[str]:
    """What job commit will do: complete every upload from its validated .pending."""
    destinations = []
    for key in object_keys(s3_client, bucket):
        if key.endswith(".pending"):
            commit = SinglePendingCommit.load(s3, f"{bucket}/{key}")
            commit.check_destination(bucket, "out", None)
            complete_from_pending(s3_client, commit.to_json())
            destinations.append(commit.destination_key)
    return sorted(destinations)


def assert_invisible(s3_client, bucket: str, expected_destinations: list[str]) -> None:
    assert visible_keys(s3_client, bucket) == []
    assert sorted(u["Key"] for u in pending_uploads(s3_client, bucket)) == expected_destinations


def test_pandas_to_parquet_through_the_filesystem(magic, s3, s3_client, bucket, frame):
    frame.to_parquet(f"{work(bucket)}/part-0000.parquet", filesystem=magic, index=False)
    assert_invisible(s3_client, bucket, ["out/part-0000.parquet"])
    assert commit_everything(s3, s3_client, bucket) == ["out/part-0000.parquet"]
    back = pd.read_parquet(f"{bucket}/out/part-0000.parquet", filesystem=s3)
    pd.testing.assert_frame_equal(back, frame)


def test_pandas_to_csv_through_a_chained_url(s3, s3_options, s3_client, bucket, frame):
    url = f"magic::s3://{work(bucket)}/part-0000.csv"
    frame.to_csv(url, index=False, storage_options={"s3": s3_options})
    assert_invisible(s3_client, bucket, ["out/part-0000.csv"])
    commit_everything(s3, s3_client, bucket)
    back = pd.read_csv(f"s3://{bucket}/out/part-0000.csv", storage_options=s3_options)
    pd.testing.assert_frame_equal(back, frame)


def test_pandas_to_parquet_through_a_chained_url(s3, s3_options, s3_client, bucket, frame):
    url = f"magic::s3://{work(bucket)}/chained.parquet"
    frame.to_parquet(url, index=False, storage_options={"s3": s3_options})
    assert_invisible(s3_client, bucket, ["out/chained.parquet"])
    commit_everything(s3, s3_client, bucket)
    pd.testing.assert_frame_equal(
        pd.read_parquet(f"{bucket}/out/chained.parquet", filesystem=s3), frame
    )


def test_pyarrow_write_table(magic, s3, s3_client, bucket, frame):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table, f"{work(bucket)}/table.parquet", filesystem=magic)
    assert_invisible(s3_client, bucket, ["out/table.parquet"])
    commit_everything(s3, s3_client, bucket)
    assert pq.read_table(f"{bucket}/out/table.parquet", filesystem=s3).equals(table)


def test_pyarrow_partitioned_write_dataset(magic, s3, s3_client, bucket, frame):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    ds.write_dataset(
        table,
        work(bucket),
        format="parquet",
        partitioning=["year"],
        partitioning_flavor="hive",
        filesystem=magic,
        basename_template="part-{i}.parquet",
        existing_data_behavior="overwrite_or_ignore",
    )
    expected = sorted(f"out/year={y}/part-0.parquet" for y in (2023, 2024, 2025))
    assert_invisible(s3_client, bucket, expected)
    assert commit_everything(s3, s3_client, bucket) == expected
    back = ds.dataset(f"{bucket}/out", filesystem=s3, format="parquet", partitioning="hive")
    assert back.to_table().num_rows == 4
    assert sorted(back.to_table().column("city").to_pylist()) == sorted(frame["city"])


def test_pandas_partitioned_to_parquet(magic, s3, s3_client, bucket, frame):
    frame.to_parquet(work(bucket), filesystem=magic, partition_cols=["year"], index=False)
    pendings = [k for k in object_keys(s3_client, bucket) if k.endswith(".pending")]
    assert len(pendings) == 3
    assert visible_keys(s3_client, bucket) == []
    destinations = commit_everything(s3, s3_client, bucket)
    assert [d.split("/")[1] for d in destinations] == ["year=2023", "year=2024", "year=2025"]


def test_failing_pyarrow_write_leaves_nothing(magic, s3_client, bucket):
    class Boom(Exception):
        pass

    schema = pa.schema([("x", pa.int64())])
    with (
        pytest.raises(Boom),
        pq.ParquetWriter(f"{work(bucket)}/failing.parquet", schema, filesystem=magic) as writer,
    ):
        writer.write_table(pa.table({"x": list(range(1000))}))
        raise Boom("the producer failed half-way")
    assert pending_uploads(s3_client, bucket) == []
    assert object_keys(s3_client, bucket) == []
