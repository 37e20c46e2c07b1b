"""A destination's claim: a create-only record naming the one job that holds it.

``conflict_mode="fail"`` promises that a job commits only to a destination holding no
data. Checking the destination and then publishing is not enough: two jobs checking an
empty destination at the same moment would both find it empty and both publish. So a
fail-mode job first *claims* the destination (:mod:`magicfs.protocol.job_commit`,
stage *conflict*): it writes ``<destination>/_magicfs/claims/fail``, a small JSON record
naming its job, with the store's atomic create-only write, and only then checks for
data and publishes. It releases the claim once its files and ``_SUCCESS`` are visible,
or once it is rolled back. Names starting with ``_`` are no data to readers (Spark,
Hive, pyarrow, and :class:`~magicfs.protocol.destination.Destination`), so the claim
never counts as data.

**Why exactly one job holds it.** The create-only write succeeds only where no object
has the name, and the store decides that atomically (below): of any number of jobs
writing the claim while none exists, exactly one succeeds; every later write fails
while the claim exists. Only the job the record names deletes it (:meth:`release`
reads it and compares the job id; while it exists, nobody else can have replaced it).
A write that fails reads the record to name the holder; a request retried after a lost
reply (its first attempt had succeeded) finds its own job's record and holds the claim.

**The create-only write, per store** (:func:`create_only_write`):

* S3: ``PutObject`` with ``If-None-Match: *`` (s3fs's ``pipe_file(mode="create")``),
  answered 412 where an object exists. AWS and moto check it atomically; so do Ceph
  RGW 16.2 and SeaweedFS 4.48 as tested (``tests/test_racing_jobs.py`` races the claim there, and
  measures SeaweedFS, whose *completion* of a multipart upload checks the same condition but not
  atomically, while its ``PutObject`` does: 0 of 60 pairs of racing conditional ``PutObject`` both
  succeeded, against about a third of 60 completions, a figure the test prints and that varies from
  run to run). A store that ignores the condition on ``PutObject`` cannot keep this promise (the
  conditional-write probe of :mod:`.s3.conditional` names such stores in its log): the claim is then
  written over, and :meth:`DestinationClaim.take` reads it back to see whose it is, which narrows
  the window to one round trip but cannot close
  it. So does gcp-storage-emulator, which ignores ``ifGenerationMatch=0``;
  fake-gcs-server checks it.
* Azure Blob: Put Blob without overwrite (``If-None-Match: *``, adlfs's ``mode="create"``).
* GCS: an upload with ``ifGenerationMatch=0`` (gcsfs's ``mode="create"``).
* A local disk: the record is written to a hidden temporary file beside the claim and
  hard-linked to its name (``link`` fails if the name exists, and a reader never sees
  a half-written record); then the temporary file goes.
* fsspec's in-memory filesystems: under one lock of this process (their files live in
  the process).

**A holder that dies** leaves its claim, and every later fail-mode job is refused,
naming it, until the holder's job is finished or rolled back (``magicfs jobs recover``
or ``rollback``, ``abort_job()`` from any process: each releases the claim of its own
job) or an operator who knows it dead deletes the record. A claim never expires by
itself: a job that is only slow must not lose it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ..names import CLAIMS_DIR
from ..paths import join
from .capabilities import is_local, protocols
from .registry import explain

#: The largest claim record read (a record is about 200 bytes).
MAX_RECORD_BYTES = 64 * 1024
#: How often a take that found a claim gone before it could read it tries again.
TAKE_ATTEMPTS = 3

#: The in-memory filesystems' create-only writes, one at a time in this process.
_MEMORY_LOCK = threading.Lock()
_MEMORY = {"memory", "mem-deferred"}


@dataclass(frozen=True)
class ClaimHolder:
    """The job a claim's record names, and what else it says of it."""

    job_id: str
    #: When it took the claim (milliseconds since the epoch), if the record says.
    created: int | None = None
    hostname: str | None = None
    pid: int | None = None

    def describe(self) -> str:
        """``job ID (taken 2026-12-07T02:33:09Z on host H, pid P)``."""
        details = []
        if self.created is not None:
            when = datetime.datetime.fromtimestamp(self.created / 1000, datetime.UTC)
            details.append(f"taken {when.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        if self.hostname:
            details.append(f"on host {self.hostname}")
        if self.pid is not None:
            details.append(f"pid {self.pid}")
        return f"job {self.job_id}" + (f" ({', '.join(details)})" if details else "")


class DestinationClaim:
    """The claim ``name`` on the destination ``dest`` of the store ``fs`` (fsspec)."""

    def __init__(self, fs: Any, dest: str, name: str):
        self.fs = fs
        self.path = join(dest, CLAIMS_DIR, name)

    @property
    def url(self) -> str:
        return str(self.fs.unstrip_protocol(self.path))

    def take(self, job_id: str, destination: str) -> ClaimHolder | None:
        """Take the claim for ``job_id``: ``None`` once this job holds it (taken now, or
        before), else the job that holds it. ``destination``: the URL the record names."""
        record = {
            "jobId": job_id,
            "destination": destination,
            "created": int(time.time() * 1000),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
        }
        for _ in range(TAKE_ATTEMPTS):
            try:
                create_only_write(self.fs, self.path, json.dumps(record).encode())
            except FileExistsError:
                holder = self.holder()
                if holder is None:  # released between the write and the read: again
                    continue
                return None if holder.job_id == job_id else holder
            holder = self.holder()  # a store that wrote over another's record tells here
            return None if holder is None or holder.job_id == job_id else holder
        return self.holder()

    def holder(self) -> ClaimHolder | None:
        """The job the claim's record names (``None``: no claim)."""
        try:
            data = self.fs.cat_file(self.path, start=0, end=MAX_RECORD_BYTES)
        except FileNotFoundError:
            return None
        try:
            record = json.loads(data)
            job_id = record["jobId"]
            if not isinstance(job_id, str) or not job_id:
                raise ValueError("jobId is not a job id")
        except (ValueError, KeyError, TypeError) as e:
            return ClaimHolder(
                f"<unknown: the record {self.url} is unreadable ({type(e).__name__}: {e}); "
                "delete it once no job commits there>"
            )

        def field(name: str, kind: type) -> Any:
            value = record.get(name)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        return ClaimHolder(job_id, field("created", int), field("hostname", str), field("pid", int))

    def release(self, job_id: str) -> bool:
        """Delete the claim if ``job_id`` holds it (another job's is kept); whether it did."""
        holder = self.holder()
        if holder is None or holder.job_id != job_id:
            return False
        self.fs.rm_file(self.path)
        if is_local(self.fs):  # a disk keeps directories: leave none behind
            parent = self.path.rsplit("/", 1)[0]
            for directory in (parent, parent.rsplit("/", 1)[0]):
                with contextlib.suppress(OSError):  # not empty (another claim): kept
                    os.rmdir(directory)
        return True


def create_only_write(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` at ``path`` only if nothing is there, in one atomic step of the
    store (see the module docstring for each store's way).

    Raises:
        FileExistsError: something is there.
    """
    if is_local(fs):
        _local_create(fs, path, data)
        return
    if protocols(fs) & _MEMORY:
        with _MEMORY_LOCK:
            if fs.exists(path):
                raise FileExistsError(path)
            fs.pipe_file(path, data)
        return
    try:
        fs.pipe_file(path, data, mode="create")
    except FileExistsError:
        raise
    except OSError as error:
        failure = explain(error)  # s3fs on some stores: OSError(22) behind a 412
        if failure is not None and (failure.code == "PreconditionFailed" or failure.status == 412):
            raise FileExistsError(path) from error
        raise
    fs.invalidate_cache(path)


def _local_create(fs: Any, path: str, data: bytes) -> None:
    """On a local disk: a hidden temporary file, then a hard link to ``path``."""
    parent = path.rsplit("/", 1)[0]
    temporary = join(parent, f".{path.rsplit('/', 1)[-1]}-{uuid.uuid4().hex}.tmp")
    for attempt in range(TAKE_ATTEMPTS):
        try:
            fs.makedirs(parent, exist_ok=True)
            with open(temporary, "wb") as f:
                f.write(data)
            break
        except FileNotFoundError:  # a holder's release removed an empty directory
            if attempt == TAKE_ATTEMPTS - 1:
                raise
    try:
        os.link(temporary, path)
    finally:
        os.unlink(temporary)
