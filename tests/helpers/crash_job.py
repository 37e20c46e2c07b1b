"""A job that kills its own process (SIGKILL) at an exact point of its commit.

Run as ``python -m helpers.crash_job SPEC_JSON`` (``tests/`` on ``sys.path``). The spec
names the destination, committer, job id, conflict mode, the files of each task, and the
point to die at:

* ``{"op": "CompleteMultipartUpload", "when": "after", "nth": 3}``: a botocore hook on
  the S3 client kills the process right after the 3rd completion succeeded (``before``:
  just before the request is sent);
* ``{"op": "mv", "nth": 5}``: a wrapper around the local filesystem kills it just
  before its 5th rename (the manifest committer's publish);
* ``"during": "task_commit", "task": 2``: count the calls of task 2's commit instead
  of the job commit's (e.g. the staging committer's uploads).

``"hold": {"op": "DeleteObject", "seconds": 30}`` delays each request of that operation
in the job commit (an asynchronous botocore hook: the other requests go on meanwhile),
so a kill elsewhere finds it still unsent.

Messages of committed tasks are written to ``<messages>`` as JSON lines as soon as each
task commits, as a driver that saves them would. Nothing in magicfs is patched: the
process dies where a real driver could.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

import magicfs

#: Set once the tasks have committed: only the job commit's calls count.
_ARMED: list[bool] = []


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Countdown:
    """Dies on the ``nth`` tick counted once armed (after the task commits)."""

    def __init__(self, nth: int):
        self.left = nth

    def tick(self) -> None:
        if not _ARMED:
            return
        self.left -= 1
        if self.left == 0:
            die()


def dying_local(nth: int) -> LocalFileSystem:
    countdown = Countdown(nth)

    class DyingLocal(LocalFileSystem):
        cachable = False

        def mv(self, path1: Any, path2: Any, **kwargs: Any) -> Any:
            if "/tasks/" in str(path1):  # a task file's rename, not a record's
                countdown.tick()
            return super().mv(path1, path2, **kwargs)

    return DyingLocal()


def main(spec: dict[str, Any]) -> None:
    die_at = spec.get("die")
    options = dict(spec.get("storage_options") or {})
    extra: dict[str, Any] = {}
    if die_at and die_at.get("op") == "mv":
        extra["fs"] = dying_local(die_at["nth"])
    committer = magicfs.committer_for(
        spec["dest"],
        committer=spec.get("committer"),
        job_id=spec["job_id"],
        storage_options=options or None,
        conflict_mode=spec.get("conflict_mode", "append"),
        threads=1,
        progress=False,
        **extra,
        **spec.get("options", {}),
    )
    if die_at and die_at.get("op") != "mv":
        countdown = Countdown(die_at["nth"])
        event = "after-call" if die_at.get("when", "after") == "after" else "before-call"
        committer.store_fs.s3.meta.events.register(
            f"{event}.s3.{die_at['op']}", lambda **kwargs: countdown.tick()
        )
    if hold := spec.get("hold"):

        async def held(**kwargs: Any) -> None:
            if _ARMED:
                await asyncio.sleep(hold["seconds"])

        committer.store_fs.s3.meta.events.register(f"before-call.s3.{hold['op']}", held)
    committer.setup_job()
    messages = []
    for index, files in enumerate(spec["tasks"]):
        task = committer.task_attempt(index)
        committer.setup_task(task)
        for name, text in files.items():
            mode = spec.get("pipe_mode", "overwrite")  # "create": files opened 'xb'
            committer.fs.pipe_file(task.path(name), text.encode(), mode=mode)
        if die_at and die_at.get("during") == "task_commit" and index == die_at.get("task", 0):
            _ARMED.append(True)  # count this task commit's calls
        message = committer.commit_task(task)
        messages.append(message)
        with open(spec["messages"], "a") as out:
            out.write(message.to_json() + "\n")
    _ARMED.append(True)  # only the job commit's calls count
    committer.commit_job(messages if spec.get("with_messages", True) else None)
    print("COMMITTED", flush=True)


if __name__ == "__main__":
    fsspec.config.conf.clear()
    main(json.loads(sys.argv[1]))
