"""Checks every deferred-write committer makes before publishing anything (S3, Azure).

A job's pending commits come from files anyone with write access to the job's tree
could have edited (seed 000, "Malicious Serialized Data"). Before the first upload is
completed, every commit must belong to this job, land inside the job's destination
(right bucket, under the destination key, where its own magic path says it belongs) and
no two tasks may write the same file (that check runs over the job's spool:
:mod:`magicfs.committers.pendingsets`). Any failure raises ``InvalidCommitData`` naming
the record and the field.
"""

from __future__ import annotations

from ..errors import InvalidCommitData
from ..names import PENDING_SUFFIX
from ..paths import final_destination, is_deferred_write, pending_file
from ..records import SinglePendingCommit


def check_commit(commit: SinglePendingCommit, bucket: str, dest_key: str, source: str) -> None:
    """A commit must land inside the destination, where its own magic path says."""
    commit.check_destination(bucket, dest_key, source)
    scheme, _, record = (commit.filename or "").rpartition("://")
    scheme = scheme or "s3"
    if not record.endswith(PENDING_SUFFIX):
        return  # kept in memory, or saved in a .pendingset: no record of its own
    magic_file = pending_file(record)
    if is_deferred_write(magic_file):
        expected = final_destination(magic_file)
        if expected != commit.destination:
            raise InvalidCommitData(
                source,
                "destinationKey",
                f"{scheme}://{commit.destination} is not where a file written at "
                f"{scheme}://{magic_file} belongs ({scheme}://{expected})",
            )
