"""Drivers that leave their jobs unfinished: killed while tasks run, or ending without a word.

Run as ``python -m helpers.abandoned_job SPEC_JSON`` (``tests/`` on ``sys.path``). The
spec lists jobs, run one after another in this process, and how the process ends::

    {"end": "kill" | "exit",
     "jobs": [{"dest": URL, "job_id": ID, "committer": NAME or null,
               "storage_options": {...} or null, "options": {...},
               "tasks": [{"name": "text", ...}, ...],      # each task writes and commits
               "writing": {"name": "text"} or null,        # one more task: writes, no commit
               "messages": PATH or null,                   # the committed tasks' messages
               "finish": "commit" | "abort" | null}]}      # what the driver does then

``writing`` opens its files and writes them without closing them when the process is
killed (``end: kill``; on S3 the upload exists first: the process waits for it), and
closes them uncommitted otherwise. ``messages`` gets the committed tasks' messages as
one JSON list (``TaskCommitMessage.to_json()`` objects), as a driver that saves them
would. ``end: kill`` is SIGKILL: no exit handler runs. Each job's id is printed
(``SET UP <id>``) once it is set up. Nothing in magicfs is patched.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import fsspec

import magicfs


def run_job(job: dict[str, Any], killing: bool) -> list[Any]:
    """Set the job up, run its tasks; returns the files left open (killed drivers only)."""
    committer = magicfs.committer_for(
        job["dest"],
        committer=job.get("committer"),
        job_id=job["job_id"],
        storage_options=job.get("storage_options"),
        progress=False,
        **job.get("options", {}),
    )
    committer.setup_job()
    print(f"SET UP {committer.job_id}", flush=True)
    messages = []
    for index, files in enumerate(job.get("tasks", [])):
        task = committer.task_attempt(index)
        committer.setup_task(task)
        for name, text in files.items():
            committer.fs.pipe_file(task.path(name), text.encode())
        messages.append(committer.commit_task(task))
        if job.get("messages"):
            with open(job["messages"], "w") as out:
                out.write("[" + ", ".join(m.to_json() for m in messages) + "]")
    left_open = []
    if job.get("writing"):
        task = committer.task_attempt(len(job.get("tasks", [])))
        committer.setup_task(task)
        for name, text in job["writing"].items():
            f = committer.fs.open(task.path(name), "wb")
            f.write(text.encode())
            if killing:
                left_open.append(f)
            else:
                f.close()
        if killing:
            wait_for_uploads(committer, len(job["writing"]))
    if job.get("finish") == "commit":
        committer.commit_job(messages)
    elif job.get("finish") == "abort":
        committer.abort_job()
    return left_open


def wait_for_uploads(committer: Any, count: int) -> None:
    """On S3: until the open files' uploads exist (their writers begin in the background)."""
    if "s3" not in committer.store_fs.protocol:
        return
    bucket = committer.dest.split("/", 1)[0]
    deadline = time.monotonic() + 30
    while len(committer.store_fs.list_multipart_uploads(bucket)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError("the open files' uploads did not appear within 30 s")
        time.sleep(0.05)


def main(spec: dict[str, Any]) -> None:
    killing = spec["end"] == "kill"
    left_open = [f for job in spec["jobs"] for f in run_job(job, killing)]
    if killing:
        os.kill(os.getpid(), signal.SIGKILL)
    assert not left_open


if __name__ == "__main__":
    fsspec.config.conf.clear()
    main(json.loads(sys.argv[1]))
