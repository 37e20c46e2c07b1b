"""Another process committing jobs to one destination, for the snapshot engine tests.

``python snapshot_writer.py URL OPTIONS_JSON PLAN_JSON RETENTION``: for each ``[mode, number]`` of
the plan, one job (``conflict_mode=mode``) of three tasks, each writing one Parquet file
of ten rows ``(job=number, row=0..9)`` under a job-unique name; prints ``committed N``
after each commit. ``replace`` jobs keep the old files ``RETENTION`` seconds
(``replace_retention``) for the readers of the old snapshot: longer than a read takes.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq

import magicfs

ROWS_PER_FILE = 10
FILES_PER_JOB = 3


def main() -> None:
    url, options, plan = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    retention = float(sys.argv[4])
    for mode, number in plan:
        with magicfs.write_job(
            url, storage_options=options, conflict_mode=mode, replace_retention=retention
        ) as job:
            for task_id in range(FILES_PER_JOB):
                table = pa.table(
                    {
                        "job": pa.array([number] * ROWS_PER_FILE, pa.int64()),
                        "row": pa.array(range(ROWS_PER_FILE), pa.int64()),
                    }
                )
                with job.task(task_id) as task:
                    name = task.path(f"part-{task_id}-{job.job_id}.parquet")
                    pq.write_table(table, name, filesystem=job.fs)
        print("committed", number, flush=True)


if __name__ == "__main__":
    main()
