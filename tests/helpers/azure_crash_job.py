"""A block-list job on Azurite, run as a process the test kills with SIGKILL.

Run as ``python -m helpers.azure_crash_job SPEC_JSON`` (``tests/`` on ``sys.path``).
The spec names the Azurite ``connection_string``, the ``dest`` (``abfs://...``), the
``job_id`` and what to do (``"phase"``):

* ``"commit"``: set the job up, write and commit each task of ``tasks`` (a list of
  ``{relative path: size}``; the bytes are :func:`content` of the path), save the
  messages to ``messages`` (JSON) as a driver would, print ``COMMITTING`` and run
  ``commit_job(messages)`` with one thread (one Put Block List at a time), then print
  ``COMMITTED``. The test kills it somewhere in between, watching Azurite's request log.
* ``"write"``: in the job the test set up, start attempt 0 of task 0 and write
  ``relative`` through ``committer.fs`` forever, one block at a time, printing
  ``WROTE <bytes>`` after each; the test kills it mid-write.

Nothing in magicfs is patched: the process dies where a real driver or task could.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any

import adlfs

import magicfs


def content(relative: str, size: int, salt: str = "") -> bytes:
    """Deterministic bytes for ``relative``: the test recomputes them to check the output."""
    seed = hashlib.sha256(f"{salt}{relative}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def main(spec: dict[str, Any]) -> None:
    fs = adlfs.AzureBlobFileSystem(
        skip_instance_cache=True, connection_string=spec["connection_string"]
    )
    committer = magicfs.committer_for(
        spec["dest"],
        fs=fs,
        job_id=spec["job_id"],
        threads=spec.get("threads", 1),
        block_size=spec.get("block_size", 64 << 10),
    )
    if spec["phase"] == "write":
        task = committer.task_attempt(0)
        committer.setup_task(task)
        block = content(spec["relative"], spec.get("block_size", 64 << 10))
        written = 0
        with committer.fs.open(task.path(spec["relative"]), "wb") as f:
            while True:
                f.write(block)
                written += len(block)
                print(f"WROTE {written}", flush=True)
    committer.setup_job()
    messages = []
    for index, files in enumerate(spec["tasks"]):
        with committer.attempt(index) as run:
            for relative, size in files.items():
                with committer.fs.open(run.path(relative), "wb") as f:
                    f.write(content(relative, size))
        assert run.message is not None
        messages.append(dataclasses.asdict(run.message))
    with open(spec["messages"], "w") as out:
        json.dump(messages, out)
    print("COMMITTING", flush=True)
    committer.commit_job([magicfs.TaskCommitMessage(**m) for m in messages])
    print("COMMITTED", flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
