"""How a magic write on S3 is recorded: the intent marker, then the ``.pending`` record.

**The marker is an intent, written before the upload exists.** Opening a magic file
first PUTs a zero-byte object at the magic path itself, its user metadata naming the
job, the task attempt and a nonce unique to this writer; only then is the multipart
upload created. So every upload has a record naming its key from the moment it
exists — also when the writer is killed right after the create, or when the create's
reply is lost and botocore's retry creates a second upload (S3 acted twice, we learnt
one id). ListMultipartUploads shows keys, never metadata, so the key is what ties an
upload to a job: the job's sweep (:mod:`.sweep`) aborts every upload on a key named by
one of its markers that no committed record names.

**The ``.pending`` names the upload** once the file is closed (Hadoop's
``SinglePendingCommit``). In ``in_memory`` mode (HADOOP-19047) the commit data stays in
the writing process (:data:`magicfs.task_files.TASK_FILES`) instead; the marker is
still written, because it is what finds the upload of a writer whose process dies.
Decision (differs from Hadoop, whose in-memory mode writes no marker): one PUT per
file buys the guarantee that no upload is ever parked unrecorded.

Uploads carry the job id and task attempt in their own metadata, which the completed
object keeps: a retried job commit recognises its own completed files by it.
"""

from __future__ import annotations

META_JOB_ID = "magicfs-job-id"
META_TASK_ATTEMPT = "magicfs-task-attempt-id"
#: A nonce per writer: lets a writer recognise its own marker after a lost reply.
META_WRITER = "magicfs-writer"


def marker_metadata(job_id: str | None, attempt_id: str | None, writer: str) -> dict[str, str]:
    """User metadata for an intent marker: who writes here."""
    return {**upload_metadata(job_id, attempt_id), META_WRITER: writer}


def upload_metadata(job_id: str | None, attempt_id: str | None) -> dict[str, str]:
    """User metadata for the upload itself; it ends up on the committed object."""
    metadata = {}
    if job_id:
        metadata[META_JOB_ID] = _ascii(job_id)
    if attempt_id:
        metadata[META_TASK_ATTEMPT] = _ascii(attempt_id)
    return metadata


def is_magicfs_marker(metadata: dict[str, str] | None) -> bool:
    """Was this object written by a magicfs writer as its marker?"""
    return bool(metadata) and META_WRITER in (metadata or {})


def _ascii(value: str) -> str:
    # S3 user metadata must be ASCII.
    return value.encode("ascii", "backslashreplace").decode("ascii")
