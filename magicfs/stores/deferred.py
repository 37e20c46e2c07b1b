"""The deferred-write contract: how a pending file is made visible, or thrown away.

A store with deferred writes lets a task write a file under its *final* name without it
becoming visible; the task saves a ``.pending`` record (Hadoop's ``SinglePendingCommit``)
and job commit makes the file visible from that record alone. Two stores have it, each
behind one backend (chosen by :func:`magicfs.stores.capabilities.capabilities`):

=====================  =====================================  ===============================
operation              S3 (:mod:`.s3.deferred`)                Azure Blob (:mod:`.azure.deferred`)
=====================  =====================================  ===============================
publish                CompleteMultipartUpload                Put Block List
is it published?       HEAD: this job's id, recorded length   committed block list == record's
delete a published     DeleteObjects (batches of 1,000)       Delete Blob per file
discard (abort)        AbortMultipartUpload                   nothing possible: staged blocks
                                                              expire after 7 days (0 counted)
=====================  =====================================  ===============================

Everything else of a job commit — loading and validating pendingsets, the journal,
conflict modes, parallel publishing with progress and all-or-nothing roll-back
(:mod:`.commit_ops`), ``_SUCCESS`` — is written once over this contract
(:mod:`magicfs.committers.pendingsets`). The rename stores have no deferred writes: the
manifest committer renames instead (:mod:`.rename`).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from ..records import SinglePendingCommit

T = TypeVar("T")


class DeferredBackend(Protocol):
    """Publish or discard the pending commits of one job (``job_id``) on one store."""

    @property
    def throttled(self) -> int:
        """Replies the store throttled so far (for progress reports)."""

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``call`` on the store's IO loop."""

    def url(self, path: str) -> str:
        """``bucket/key`` with the store's protocol, for messages."""

    def check(self, commit: SinglePendingCommit, source: str) -> None:
        """Refuse (``InvalidCommitData``) a record this store cannot publish."""

    async def apublish(self, commit: SinglePendingCommit) -> None:
        """Make the file visible. Idempotent for this job: a commit an earlier attempt of
        the same job commit already published counts as done."""

    async def apublished(self, commit: SinglePendingCommit) -> bool:
        """Does the destination hold exactly what this commit published?"""

    def delete(self, commits: list[SinglePendingCommit]) -> int:
        """Delete the destinations of ``commits`` (published by this job); how many."""

    def discard(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Throw the commits' pending data away (where the store can); how many."""
