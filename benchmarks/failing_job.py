"""How long a job takes to fail when the store refuses every completion and every abort.

    python benchmarks/failing_job.py                  # 200 and 1,000 files
    python benchmarks/failing_job.py --files 200      # one size
    python benchmarks/failing_job.py --budget 30      # with RetryPolicy(budget=30)

The scenario of issue 25: a magic job writes N small files, then, before job commit, the
store starts answering every ``CompleteMultipartUpload`` and every
``AbortMultipartUpload`` with ``503 SlowDown`` (an outage, or a policy that refuses
them). The job commit fails in publish, rolls back (a HEAD per file, to find what it had
published), and its clean-up cannot abort the uploads. Before the bounds of
``magicfs.stores.s3.retry`` this took over 14 minutes for 200 files (3,630 abort
requests); now each stage ends within about one call's retries.

The store is the embedded moto server (``magicfs.integrations.embedded_s3``) behind the
fault-injecting front of the tests (``tests/helpers/fault_front.py``), both on 127.0.0.1.
Reported per size: the seconds from ``commit_job`` to its error, when each stage's
requests started and ended (seen by a botocore hook on the committer's client), and the
requests the front received per operation during the commit. Each run checks the
outcome, and fails loudly otherwise: the error names the uploads left and the command
``magicfs uploads abort --force --job ...``; N uploads are parked; with the store healthy
again that command (run in-process) aborts them all.

The committers' default client (3 attempts, 1.5 s connect timeout: ``.client``) and the
default retry policy are used unless ``--budget`` is given. Absolute times are this
machine's and include the rate control slowing down after the 503s (as it should).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from helpers.fault_front import FaultFront  # noqa: E402

import magicfs  # noqa: E402
from magicfs.errors import JobCommitError  # noqa: E402
from magicfs.integrations.cli import main as cli  # noqa: E402
from magicfs.integrations.embedded_s3 import EmbeddedS3Server  # noqa: E402
from magicfs.stores.s3.retry import DEFAULT_POLICY, RetryPolicy  # noqa: E402

BUCKET = "failing-job"


def run(server: EmbeddedS3Server, files: int, policy: RetryPolicy) -> dict[str, Any]:
    client = server.boto3_client()
    with FaultFront(server.endpoint_url, seed=0) as front:
        storage = {**front.storage_options, "skip_instance_cache": True}
        committer = magicfs.committer_for(
            f"s3://{BUCKET}/out{files}", storage_options=storage, retry_policy=policy
        )
        committer.setup_job()
        task = committer.task_attempt(0)
        committer.setup_task(task)
        for n in range(files):
            committer.fs.pipe_file(task.path(f"f{n}.csv"), f"{n}\n".encode())
        messages = [committer.commit_task(task)]

        front.reset_stats()
        front.add_rule(["CompleteMultipartUpload", "AbortMultipartUpload"], "503")
        start = time.monotonic()
        stages: dict[str, list[float]] = {}

        def seen(model: Any, **_: Any) -> None:
            moment = time.monotonic() - start
            stages.setdefault(model.name, [moment, moment])[1] = moment

        committer.store_fs.s3.meta.events.register("before-call.s3", seen)
        try:
            committer.commit_job(messages)
        except JobCommitError as e:
            message = str(e)
        else:
            raise SystemExit(f"{files} files: the job committed; the faults did not apply")
        seconds = time.monotonic() - start
        requests = {op: s["requests"] for op, s in front.stats().items()}

        command = f"magicfs uploads abort --force --job {committer.job_id} s3://{BUCKET}/out{files}"
        if command not in message or f"could not abort {files:,} of {files:,}" not in message:
            raise SystemExit(f"{files} files: the error does not name what is left:\n{message}")
        parked = _parked(client, f"out{files}/")
        if parked != files:
            raise SystemExit(f"{files} files: {parked} uploads parked, expected {files}")

        front.clear()  # the store is healthy again: release them with the named command
        store = ["--endpoint-url", front.endpoint_url, "-o", "key=testing", "-o", "secret=testing"]
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli(shlex.split(command)[1:] + store)
        if code != 0 or _parked(client, f"out{files}/"):
            raise SystemExit(f"{files} files: the named command did not release the uploads")
    return {"seconds": seconds, "stages": stages, "requests": requests}


def _parked(client: Any, prefix: str) -> int:
    count = 0
    for page in client.get_paginator("list_multipart_uploads").paginate(
        Bucket=BUCKET, Prefix=prefix
    ):
        count += len(page.get("Uploads", []))
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="200,1000", help="comma-separated job sizes")
    parser.add_argument("--budget", type=float, help="RetryPolicy budget in seconds")
    args = parser.parse_args()
    policy = RetryPolicy(budget=args.budget) if args.budget is not None else DEFAULT_POLICY
    with EmbeddedS3Server() as server:
        server.boto3_client().create_bucket(Bucket=BUCKET)
        for files in (int(n) for n in args.files.split(",")):
            result = run(server, files, policy)
            print(f"{files:,} files: failed after {result['seconds']:.1f} s")
            for operation, (first, last) in sorted(
                result["stages"].items(), key=lambda item: item[1][0]
            ):
                sent = result["requests"].get(operation, 0)
                print(f"  {operation:<24} {first:6.1f} s .. {last:6.1f} s  {sent:6,} requests")


if __name__ == "__main__":
    main()
