"""Write a dataset with pandas as a committed job: nothing is visible until the job commits.

Runs against an embedded S3 server on 127.0.0.1; point ``storage_options`` at your own
store (e.g. ``{"profile": "prod"}``) to use it for real.
"""

import pandas as pd

import magicfs
from magicfs.integrations.embedded_s3 import EmbeddedS3Server

with EmbeddedS3Server() as server:
    server.boto3_client().create_bucket(Bucket="bkt")
    opts = server.storage_options

    with magicfs.write_job("s3://bkt/sales", storage_options=opts) as job:
        for task_id, year in enumerate([2023, 2024, 2025]):
            frame = pd.DataFrame({"amount": [1.5, 2.5, 3.5]})  # year comes from the path
            with job.task(task_id) as task:  # commits the task, or aborts it on error
                frame.to_parquet(
                    task.path(f"year={year}/part-{task_id:05d}.parquet"),
                    filesystem=job.fs,
                    index=False,
                )
    # leaving the block committed the job: every file is at its final name
    print(job.summary.files, "files,", job.summary.bytes, "bytes")
    sales = pd.read_parquet("s3://bkt/sales", storage_options=opts)
    print(sales.groupby("year", observed=True).size().to_dict())
