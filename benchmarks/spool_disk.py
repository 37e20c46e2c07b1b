"""The local disk a job commit's spool takes per file (docs/guarantees.md, docs/stores/s3.md
"Large jobs": the reason to set ``TMPDIR`` on a driver with a small ``/tmp``).

    python benchmarks/spool_disk.py                     # 100,000 files, 100 per task
    python benchmarks/spool_disk.py --files 20000,200000

The magic and staging committers spool every commit of the job's task records to SQLite
(``magicfs.stores.spool.CommitSpool``), which moves to a file once past 8 MiB. This
script adds synthetic task records to a spool the way job commit does — task records of
``--files-per-task`` commits, each with a destination key, upload id and ETag of the
lengths AWS S3 gives them, written by magicfs's own record classes — then builds the
index job commit queries for files written twice, and prints the spool file's size
divided by the files. No store is involved: the figure depends only on the key, upload
id and ETag lengths (printed with it).
"""

from __future__ import annotations

import argparse
import os
import uuid

from magicfs.records import PendingSet, SinglePendingCommit
from magicfs.stores.spool import CommitSpool

BUCKET = "analytics-bucket"
#: The length of an AWS S3 multipart upload id (they vary; most are about this long).
UPLOAD_ID_LENGTH = 112


def task_record(job_id: str, task: int, files: int) -> PendingSet:
    """One task's record: ``files`` commits of one-part files, as a magic task writes."""
    commits = []
    for number in range(files):
        name = f"part-{task:05d}-{number:04d}-{uuid.uuid4()}-c000.snappy.parquet"
        key = f"warehouse/sales/year=2026/month=12/{name}"
        commits.append(
            SinglePendingCommit(
                uri=f"s3a://{BUCKET}/warehouse/sales/__magic_job-{job_id}/{name}",
                upload_id=(uuid.uuid4().hex * 4)[:UPLOAD_ID_LENGTH],
                bucket=BUCKET,
                destination_key=key,
                etags=[f'"{uuid.uuid4().hex}"'],
                length=8 * 1024 * 1024,
                job_id=job_id,
                task_id=f"attempt_{job_id}_m_{task:06d}_0",
                filename=f"s3a://{BUCKET}/warehouse/sales/__magic_job-{job_id}/{name}.pending",
            )
        )
    return PendingSet(job_id=job_id, commits=commits)


def bytes_per_file(files: int, per_task: int) -> tuple[int, float]:
    """The spool file's size and its bytes per file, for a job of ``files`` files."""
    spool = CommitSpool()
    job_id = uuid.uuid4().hex
    try:
        for task in range(-(-files // per_task)):
            count = min(per_task, files - task * per_task)
            spool.add(f"s3a://{BUCKET}/task-{task}.pendingset", task_record(job_id, task, count))
        assert spool.first_duplicate() is None  # builds the index, as validation does
        if spool.db.in_transaction:  # write out the pages the cache still holds
            spool.db.execute("COMMIT")
        if spool.path is None:
            raise SystemExit(f"{files:,} files stayed in memory: pass more --files")
        size = os.path.getsize(spool.path)
        return size, size / files
    finally:
        spool.discard()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", default="100000", help="comma-separated job sizes")
    parser.add_argument("--files-per-task", type=int, default=100)
    args = parser.parse_args()
    example = task_record("0" * 32, 0, 1).commits[0]
    print(
        f"Destination keys of {len(example.destination_key)} characters, upload ids of "
        f"{UPLOAD_ID_LENGTH}, {args.files_per_task} files per task record:\n"
    )
    print("| files | spool file | bytes per file |")
    print("|---:|---:|---:|")
    for files in (int(n) for n in args.files.split(",")):
        size, per_file = bytes_per_file(files, args.files_per_task)
        print(f"| {files:,} | {size / 1e6:.1f} MB | {per_file:.0f} |")


if __name__ == "__main__":
    main()
