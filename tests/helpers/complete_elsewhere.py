"""Run as a separate process: complete the uploads named by .pending objects, with boto3 only.

Usage: python complete_elsewhere.py ENDPOINT BUCKET PENDING_KEY...
Proves that a .pending carries everything needed to commit: no state from the writer.
"""

import sys

import boto3

endpoint, bucket, *keys = sys.argv[1:]
client = boto3.client(
    "s3",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="testing",
    aws_secret_access_key="testing",
)
sys.path.insert(0, __file__.rsplit("/", 2)[0])
from helpers import complete_from_pending  # noqa: E402

for key in keys:
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    complete_from_pending(client, body)
print(f"completed {len(keys)}")
