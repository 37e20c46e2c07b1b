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

**The marker is needed only where another job may share the keys.** What the sweep
gets from markers is ownership by key, so that it never aborts the uploads of another
magicfs job writing under the same destination. A job that finds, at set-up, no other
job's tree covering its destination (:func:`magicfs.stores.s3.sweep.other_jobs_cover`)
is *unmarked*: it records that in its tree (:data:`~magicfs.names.UNMARKED_FILE`, a small
JSON document that stays until the tree's last delete) and its writers PUT no marker
(``xb`` files keep theirs: it is the create-only mechanism). Its sweep then finds its
uploads by time instead: every upload under the destination initiated since the job
began, on the store's clock, less a margin, that no committed record keeps and no other
job's tree may own (:func:`magicfs.stores.s3.sweep.sweep_job` states and proves the
rule). What that gives up: a plain (non-magicfs) multipart upload under the destination
started during the job is aborted by its sweep, as Hadoop's committers do with
``fs.s3a.committer.abort.pending.uploads``; ``intent_markers="always"`` keeps markers
for destinations shared with other writers. A writer that does not know the mode
(``intent_markers=True``, the default of :class:`~magicfs.filesystems.MagicFileSystem`)
writes markers: that is always safe.

**The ``.pending`` names the upload** once the file is closed (Hadoop's
``SinglePendingCommit``). In ``in_memory`` mode (HADOOP-19047) the commit data stays in
the writing process (:data:`magicfs.task_files.TASK_FILES`) instead; in a marked job the
marker is still written, because it is what finds the upload of a writer whose process
dies. Decision (differs from Hadoop, whose in-memory mode writes no marker): one PUT per
file buys the guarantee that no upload is ever parked unrecorded; an unmarked job gets
the same guarantee from its sweep by time, with no PUT.

Uploads carry the job id and task attempt in their own metadata, which the completed
object keeps: a retried job commit recognises its own completed files by it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

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


#: How far the store's clocks may disagree (seconds): an unmarked job's uploads are those
#: initiated since its tree's unmarked record was written, less this margin. Cost: plain
#: uploads started this long before the job are in its window too.
CLOCK_MARGIN = 60.0


@dataclass(frozen=True)
class UnmarkedRecord:
    """An unmarked job's record (:data:`~magicfs.names.UNMARKED_FILE`): since when the job
    may own uploads, on the store's clock."""

    written: datetime  # the record's LastModified (the store's clock)
    margin: float  # seconds

    @property
    def born(self) -> datetime:
        """Uploads initiated before this are never the job's."""
        return self.written - timedelta(seconds=self.margin)

    @staticmethod
    def document(job_id: str, margin: float) -> bytes:
        return json.dumps({"jobId": job_id, "intentMarkers": False, "clockMargin": margin}).encode()

    @classmethod
    def parse(cls, data: bytes, written: datetime) -> UnmarkedRecord:
        """The record read back; an unreadable body keeps the default margin (the record's
        presence is what matters: the job is unmarked)."""
        try:
            margin = float(json.loads(data).get("clockMargin", CLOCK_MARGIN))
        except (ValueError, TypeError, AttributeError):
            margin = CLOCK_MARGIN
        return cls(written, max(margin, 0.0))
