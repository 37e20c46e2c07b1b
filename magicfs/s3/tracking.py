"""Where a magic write records its upload: the marker object, and the in-memory alternative.

**Marker (default).** When a magic file is opened, a zero-byte object is PUT at the
magic path itself, its user metadata naming the upload id, job and task attempt. It
costs no extra request beyond the marker Hadoop also writes, and it makes every
upload findable from the moment it exists: ListMultipartUploads shows no metadata, so
without the marker an upload whose writer was killed mid-write could not be told
apart from another job's. On a clean close the ``.pending`` record is saved next to
the marker.

**In memory (opt-in, Hadoop's HADOOP-19047).** Writers that run in the task's own
process can skip the marker and the ``.pending`` file: the commit data stays in
:data:`IN_MEMORY_COMMITS` until that process commits the task, saving two PUTs and a
GET per file. The price: an upload whose process dies before task commit is recorded
nowhere, and only the job's abort (by destination listing) or a bucket lifecycle rule
reclaims it.
"""

from __future__ import annotations

import threading

from ..records import SinglePendingCommit

META_UPLOAD_ID = "magicfs-upload-id"
META_JOB_ID = "magicfs-job-id"
META_TASK_ATTEMPT = "magicfs-task-attempt-id"


def marker_metadata(upload_id: str, job_id: str | None, attempt_id: str | None) -> dict[str, str]:
    """User metadata for a marker: the upload id (the key is the path's destination)."""
    metadata = {META_UPLOAD_ID: upload_id}
    if job_id:
        metadata[META_JOB_ID] = _ascii(job_id)
    if attempt_id:
        metadata[META_TASK_ATTEMPT] = _ascii(attempt_id)
    return metadata


def upload_metadata(job_id: str | None, attempt_id: str | None) -> dict[str, str]:
    """User metadata for the upload itself; it ends up on the committed object."""
    metadata = {}
    if job_id:
        metadata[META_JOB_ID] = _ascii(job_id)
    if attempt_id:
        metadata[META_TASK_ATTEMPT] = _ascii(attempt_id)
    return metadata


def _ascii(value: str) -> str:
    # S3 user metadata must be ASCII.
    return value.encode("ascii", "backslashreplace").decode("ascii")


class InMemoryCommits:
    """Process-wide pending commits of in-memory writers, by (job id, task attempt id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, str], dict[str, SinglePendingCommit]] = {}

    def add(self, job_id: str, attempt_id: str, path: str, commit: SinglePendingCommit) -> None:
        with self._lock:
            self._attempts.setdefault((job_id, attempt_id), {})[path] = commit

    def take(self, job_id: str, attempt_id: str) -> list[SinglePendingCommit]:
        """Remove and return the attempt's commits (task commit or abort)."""
        with self._lock:
            return list(self._attempts.pop((job_id, attempt_id), {}).values())

    def length_of(self, path: str) -> int | None:
        """Bytes written to ``path``, if an in-memory writer of this process wrote it."""
        with self._lock:
            for commits in self._attempts.values():
                if path in commits:
                    return commits[path].length
        return None


IN_MEMORY_COMMITS = InMemoryCommits()
