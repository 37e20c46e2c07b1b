"""Ceph RGW's beast frontend with and without ``tcp_nodelay``: the latency of each small
request a magic job sends (the table in docs/benchmarks-history.md, "RGW and
``tcp_nodelay``").

Without ``tcp_nodelay`` a reply RGW sends in two writes waits for the client's delayed
ACK (Nagle's algorithm), so requests whose reply has a body take about 40 ms on loopback.
This script starts a throwaway RGW (``tests/helpers/rgw.py``) with beast's default, then
one with ``tcp_nodelay=1`` (as the test suite's), and times the same requests with one
boto3 client on each: the median of ``--requests`` calls per request type, after one
warm-up call (a fresh cluster creates its pools on first use). Run::

    python benchmarks/rgw_nodelay.py            # about a minute: two RGW starts
    python benchmarks/rgw_nodelay.py --json out.json

Prints the table as Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from helpers.rgw import RgwServer, missing_programs  # noqa: E402


def requests(client: Any, bucket: str) -> dict[str, Callable[[int], object]]:
    """Each request type, as a call taking the call's number (its key's suffix)."""
    client.put_object(Bucket=bucket, Key="small", Body=b"x" * 100)
    return {
        "PutObject, 0 bytes": lambda n: client.put_object(Bucket=bucket, Key=f"e{n}", Body=b""),
        "HeadObject": lambda n: client.head_object(Bucket=bucket, Key="small"),
        "GetObject, 100 bytes": lambda n: client.get_object(Bucket=bucket, Key="small")[
            "Body"
        ].read(),
        "ListObjectsV2": lambda n: client.list_objects_v2(Bucket=bucket, MaxKeys=10),
        "CreateMultipartUpload": lambda n: client.create_multipart_upload(
            Bucket=bucket, Key=f"m{n}"
        ),
        "DeleteObjects": lambda n: client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": f"e{n}"}]}
        ),
    }


def measure(tcp_nodelay: bool, count: int) -> dict[str, float]:
    """Median milliseconds of each request type on a fresh RGW."""
    with (
        tempfile.TemporaryDirectory(prefix="magicfs-rgw-nodelay-") as workdir,
        RgwServer(pathlib.Path(workdir), tls=False, tcp_nodelay=tcp_nodelay) as rgw,
    ):
        client = rgw.boto3_client()
        client.create_bucket(Bucket="nodelay")
        medians = {}
        for name, call in requests(client, "nodelay").items():
            call(-1)  # warm-up
            times = []
            for n in range(count):
                start = time.perf_counter()
                call(n)
                times.append((time.perf_counter() - start) * 1000)
            medians[name] = round(statistics.median(times), 1)
        return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=20, help="calls per request type")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if missing := missing_programs():
        raise SystemExit(f"Ceph RGW is not installed ({', '.join(missing)} not found)")
    default = measure(False, args.requests)
    nodelay = measure(True, args.requests)
    print(f"Median of {args.requests} requests each, one boto3 client on 127.0.0.1:\n")
    print("| request | default (ms) | `tcp_nodelay=1` (ms) |")
    print("|---|---:|---:|")
    for name in default:
        print(f"| {name} | {default[name]} | {nodelay[name]} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"default": default, "tcp_nodelay": nodelay}, out, indent=2)


if __name__ == "__main__":
    main()
