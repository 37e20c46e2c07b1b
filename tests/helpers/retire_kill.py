"""A replace job to be killed after its new snapshot is published, before its old files go.

``python -m helpers.retire_kill DEST``: commits one ``replace`` job writing ``new.csv`` to
the local destination ``DEST`` through a filesystem whose first delete of an old file
(``old/...``) prints ``deleting PATH`` and then blocks, so the parent can SIGKILL the
job exactly there: its record (head and retire list) written, no old file deleted.
Nothing in magicfs is patched: the store itself stops answering.
"""

from __future__ import annotations

import sys
import threading

import fsspec

import magicfs
from helpers.faulty_fs import faulty


def main() -> None:
    dest = sys.argv[1]
    fs = faulty(fsspec.filesystem("file"))

    def block(path: str, *_: object) -> bool:
        if "/old/" in path:
            print("deleting", path, flush=True)
            threading.Event().wait()  # until the parent kills the process
        return False

    fs.fail("rm_file", when=block)
    job = magicfs.write_job(dest, fs=fs, conflict_mode="replace")
    with job, job.task(0) as task, job.fs.open(task.path("new.csv"), "wb") as out:
        out.write(b"new\n")
    print("committed", flush=True)  # not reached: the delete above blocks


if __name__ == "__main__":
    main()
