"""Write a Dask DataFrame as one committed job: every partition appears, or none.

Runs against an embedded S3 server on 127.0.0.1 with Dask's default (threaded)
scheduler; the same call runs unchanged under a ``dask.distributed`` Client. Point
``storage_options`` at your own store to use it for real.
"""

import dask.dataframe as dd
import pandas as pd

import magicfs.dask
from magicfs.integrations.embedded_s3 import EmbeddedS3Server

sales = pd.DataFrame(
    {
        "order": range(1_000),
        "year": [2023 + i % 3 for i in range(1_000)],
        "amount": [round(1.5 * i, 2) for i in range(1_000)],
    }
)
ddf = dd.from_pandas(sales, npartitions=4)

with EmbeddedS3Server() as server:
    server.boto3_client().create_bucket(Bucket="bkt")
    opts = server.storage_options

    summary = magicfs.dask.to_parquet(ddf, "s3://bkt/sales", storage_options=opts)
    print(summary.files, "files from", summary.tasks, "partitions")
    back = pd.read_parquet("s3://bkt/sales", storage_options=opts)
    pd.testing.assert_frame_equal(back, sales)  # every row, in order, same dtypes
    print("read back equals the source:", len(back), "rows")

    by_year = magicfs.dask.to_parquet(
        ddf, "s3://bkt/by-year", storage_options=opts, partition_on=["year"]
    )
    print(by_year.files, "files under", sorted({f.split("/")[2] for f in by_year.filenames}))

    def bad_partition(frame: pd.DataFrame) -> pd.DataFrame:
        if frame["order"].max() > 900:
            raise ValueError("bad record")
        return frame

    try:
        magicfs.dask.to_parquet(
            ddf.map_partitions(bad_partition, meta=ddf._meta),
            "s3://bkt/failed",
            storage_options=opts,
        )
    except ValueError:
        client = server.boto3_client()
        listed = client.list_objects_v2(Bucket="bkt", Prefix="failed/").get("KeyCount", 0)
        parked = len(client.list_multipart_uploads(Bucket="bkt").get("Uploads", []))
        print("failed job left", listed, "objects and", parked, "pending uploads")
