"""Deferred writes with plain fsspec: a ``magic::`` URL, no committer involved.

The file is uploaded but invisible; its ``.pending`` record is all another process needs
to publish it (here done by hand with boto3; a committer does it for whole jobs).
"""

import json

import pandas as pd

from magicfs.integrations.embedded_s3 import EmbeddedS3Server

with EmbeddedS3Server() as server:
    client = server.boto3_client()
    client.create_bucket(Bucket="bkt")
    url = "magic::s3://bkt/out/__magic/job-1/task-1/__base/year=2024/part-0.csv"
    pd.DataFrame({"a": [1, 2]}).to_csv(
        url, index=False, storage_options={"s3": server.storage_options}
    )

    print(
        "visible:",
        [
            o["Key"]
            for o in client.list_objects_v2(Bucket="bkt", Prefix="out/year").get("Contents", [])
        ],
    )
    # The record's name is the file's, each element staged as ``_<name>.magicfs-task`` so
    # that no glob of the destination's data matches it:
    # out/__magic/job-1/task-1/__base/_year=2024.magicfs-task/_part-0.csv.magicfs-task.pending
    listed = client.list_objects_v2(Bucket="bkt", Prefix="out/__magic/job-1/")["Contents"]
    (record,) = [o["Key"] for o in listed if o["Key"].endswith(".pending")]
    print("record:", record)
    pending = json.loads(client.get_object(Bucket="bkt", Key=record)["Body"].read())
    client.complete_multipart_upload(
        Bucket=pending["bucket"],
        Key=pending["destinationKey"],
        UploadId=pending["uploadId"],
        MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(pending["etags"], 1)]
        },
    )
    print(
        "published:", client.get_object(Bucket="bkt", Key="out/year=2024/part-0.csv")["Body"].read()
    )
