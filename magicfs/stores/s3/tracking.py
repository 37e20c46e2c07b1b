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

**The marker is needed only where another job may share the keys.** What the sweep gets
from markers is ownership by key, so that it never aborts the uploads of another magicfs
job writing under the same destination. A job that finds, at set-up, no other job's tree
covering its destination (:func:`magicfs.stores.s3.sweep.other_jobs_cover`) is
*unmarked*: it records that in its tree (:data:`~magicfs.names.UNMARKED_FILE`, a small
JSON document that stays until the tree's last delete) and its writers PUT no marker
(``xb`` files keep theirs: it is the create-only mechanism). Before that, set-up lists
the uploads already pending under the destination (one page, at most
:data:`SNAPSHOT_LIMIT`; more, and the job stays marked) and keeps their ids in the
record (``uploadsBefore``): the job's *snapshot*. Its writers start only after set-up
returns, so no upload of the job is in it. Its sweep then also takes every upload under
the destination that is not in the snapshot, that no committed record keeps and no other
job's tree may own (:func:`magicfs.stores.s3.sweep.sweep_job` states and proves the
rule); no clock is read. What that gives up: a plain (non-magicfs) multipart upload
under the destination started during the job is aborted by its sweep, as Hadoop's
committers do with ``fs.s3a.committer.abort.pending.uploads``, and so are the in-flight
uploads of a *staging* committer's job (``committer="directory"``: it keeps no tree in
the destination for a magic job to see) writing to the same destination at the same
time; ``intent_markers="always"`` keeps markers for destinations shared with such
writers. A writer that does not know the mode (``intent_markers=True``, the default of
:class:`~magicfs.filesystems.MagicFileSystem`) writes markers, and so does a writer in a
process that did not set up its task attempt
(:func:`magicfs.task_files.attempt_set_up_here`): a task commit in the set-up process
must see its file even if the writer's process dies before closing it. What remains
unseen: a file whose writer ran in the set-up process, when that process is killed
mid-write and *another* process commits the attempt (its upload is swept at job end).
Markers are always safe.

**The ``.pending`` names the upload** once the file is closed (Hadoop's
``SinglePendingCommit``). In ``in_memory`` mode (HADOOP-19047) the commit data stays in
the writing process (:data:`magicfs.task_files.TASK_FILES`) instead; in a marked job the
marker is still written, because it is what finds the upload of a writer whose process
dies. Decision (differs from Hadoop, whose in-memory mode writes no marker): one PUT per
file buys the guarantee that no upload is ever parked unrecorded; an unmarked job gets
the same guarantee from its snapshot sweep, with no PUT.

Uploads carry the job id and task attempt in their own metadata, which the completed
object keeps: a retried job commit recognises its own completed files by it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

log = logging.getLogger("magicfs.s3.tracking")

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


#: Pending uploads an unmarked job's snapshot may hold: one page of ListMultipartUploads.
#: More under the destination at set-up, and the job stays marked.
SNAPSHOT_LIMIT = 1000


@dataclass(frozen=True)
class UnmarkedRecord:
    """An unmarked job's record (:data:`~magicfs.names.UNMARKED_FILE`): the uploads that
    were pending under its destination before the job began (its *snapshot*).

    ``before`` is ``None`` when the record could not be read (tampered with): the job's
    uploads cannot be told from older ones, so its sweep spares every upload under the
    destination that no marker or record of the job names (the marked rule)."""

    before: frozenset[str] | None

    def may_own(self, upload_id: str) -> bool:
        """Could the job own an upload found under its destination (not by key)?"""
        return self.before is not None and upload_id not in self.before

    @staticmethod
    def document(job_id: str, before: list[str]) -> bytes:
        return json.dumps(
            {"jobId": job_id, "intentMarkers": False, "uploadsBefore": sorted(before)}
        ).encode()

    @classmethod
    def parse(cls, data: bytes, source: str) -> UnmarkedRecord:
        """The record read back; an unreadable one (``before=None``) is logged, naming it."""
        try:
            ids = json.loads(data)["uploadsBefore"]
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise TypeError("uploadsBefore is not a list of upload ids")
            return cls(frozenset(ids))
        except (ValueError, TypeError, KeyError) as error:
            log.warning(
                "%s: unreadable unmarked record (%s: %s): its job's sweep takes only the "
                "uploads its markers and records name; abort the others with "
                "'magicfs uploads abort' once no job writes there",
                source,
                type(error).__name__,
                error,
            )
            return cls(None)
