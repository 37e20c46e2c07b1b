"""The job index: where each job is listed in its bucket, so that the jobs below any
prefix are found by listing the index, not the bucket.

::

    <bucket>/__magicfs_jobs/<destination key>/<job id>.json     one entry per job

A job keeps its state at its destination (``__magic_job-<id>/``, ``_temporary/<id>/``),
so from a prefix above it the job could only be found by listing everything below that
prefix: every file of every dataset there. The index is one small entry per job at a
fixed place of the bucket, keyed by the job's destination: the jobs below ``<prefix>``
are the entries below ``__magicfs_jobs/<prefix>/``, one listing without a delimiter, a
request per 1,000 jobs whatever the number of files. Its name starts with ``_``, so
readers (Spark, Hive, pyarrow) skip it, as they skip the jobs' own trees.

An entry's last element is always the entry itself (``<job id>.json``); what lies
between ``__magicfs_jobs/`` and it is the destination's key. A prefix matches whole path
elements: ``dee`` is not above ``deep/out``.

The entry holds the job marker's JSON (job id, committer, destination, created, host).
The committers write it at job set-up, alongside the job marker, and delete it at
clean-up with the tree's last batch. It is a pointer, never the truth: a job is what its
tree says (:func:`magicfs.committers.jobs.describe_job`), and an entry whose job left
nothing is not a job. A failed write of it fails nothing (:func:`index_failed`).

Only stores whose paths begin with a bucket or container have an index (S3, Azure
Blob, GCS, the in-process deferred store). A local disk or memory has no bucket to hold
it: there the jobs below a directory are found by walking its directories, which sends
no request (:mod:`magicfs.committers.jobs`).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from ..names import JOB_INDEX, JOB_INDEX_SUFFIX
from .magic import check_job_id

log = logging.getLogger("magicfs.job_index")

__all__ = [
    "IndexedJob",
    "bucket_and_key",
    "entry_committer",
    "entry_path",
    "index_directory",
    "index_failed",
    "parse_entry",
]


def bucket_and_key(fs: Any, path: str) -> tuple[str, str] | None:
    """``(bucket, key)`` of ``path`` (as ``fs`` names it, without protocol) on a store
    whose paths begin with a bucket or container; ``None`` on any other store (local
    disks, memory: their paths begin at a root, ``/``)."""
    if getattr(fs, "root_marker", "/") != "" or path.startswith("/"):
        return None
    bucket, _, key = path.strip("/").partition("/")
    return (bucket, key) if bucket else None


def entry_path(bucket: str, dest_key: str, job_id: str) -> str:
    """The index entry of job ``job_id`` writing to ``bucket/dest_key``."""
    return _join(bucket, JOB_INDEX, dest_key.strip("/"), job_id + JOB_INDEX_SUFFIX)


def index_directory(bucket: str, prefix_key: str) -> str:
    """The directory of the index whose entries are the jobs at or below
    ``bucket/prefix_key`` (``""``: the whole bucket)."""
    return _join(bucket, JOB_INDEX, prefix_key.strip("/"))


@dataclass(frozen=True)
class IndexedJob:
    """One entry of the index, as its path says."""

    entry: str  # the entry's path, bucket first
    destination: str  # the job's destination, bucket first (the bucket alone at its root)
    job_id: str


def parse_entry(bucket: str, path: str) -> IndexedJob | None:
    """The job an entry's path names; ``None`` for anything else found in the index."""
    below = path.strip("/").removeprefix(_join(bucket, JOB_INDEX) + "/")
    if below == path.strip("/"):
        return None
    dest_key, _, name = below.rpartition("/")
    if not name.endswith(JOB_INDEX_SUFFIX):
        return None
    try:
        job_id = check_job_id(name[: -len(JOB_INDEX_SUFFIX)])
    except ValueError:
        return None
    return IndexedJob(path.strip("/"), _join(bucket, dest_key), job_id)


def entry_committer(data: bytes | None) -> str | None:
    """The committer an entry's JSON names (``None``: unreadable, or none named)."""
    try:
        document = json.loads(data) if data else None
    except ValueError:
        return None
    committer = document.get("committer") if isinstance(document, dict) else None
    return committer if isinstance(committer, str) else None


#: (bucket, action) already reported in this process: per bucket, not per job (a user
#: whose permissions stop at their prefix hears it once, whichever job it is), so it is
#: not in the job's context (:mod:`magicfs.job_context`).
_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def index_failed(action: str, entry: str, job_id: str, url: str, error: BaseException) -> None:
    """Log that the index entry ``entry`` of job ``job_id`` (at ``url``) could not be
    ``action`` (``"saved"`` or ``"deleted"``), once per bucket and action in this process
    (then at debug level). The job goes on: a user whose permissions stop at their prefix
    cannot write the index, and their jobs must run all the same. A refused save is a
    warning (the job is found only from its destination); a refused delete is told at
    info level (it follows a refused save, for such a user, and a stale entry is harmless)."""
    bucket = entry.split("/", 1)[0]
    with _reported_lock:
        first = (bucket, action) not in _reported
        _reported.add((bucket, action))
    if action == "saved":
        level = logging.WARNING
        outcome = (
            f"the job goes on; 'magicfs jobs list' finds it from its destination {url}, "
            "not from a prefix above it"
        )
    else:
        level = logging.INFO
        outcome = "if it exists it stays, and 'magicfs jobs list' skips it: its job left nothing"
    log.log(
        level if first else logging.DEBUG,
        "job %s: its job index entry %s could not be %s (%s); %s%s",
        job_id,
        entry,
        action,
        error,
        outcome,
        " (said once per bucket)" if first else "",
    )


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)
