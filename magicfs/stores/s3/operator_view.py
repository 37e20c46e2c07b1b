"""S3's operator view (:mod:`magicfs.stores.operator_view`): multipart uploads as an
operator sees them, every request through :class:`~.store.S3Store` (retried, paced).

* **pending writes**: ListMultipartUploads, with each upload's initiation time, a page
  per wait; **measured** by ListParts; **aborted** by AbortMultipartUpload, telling an
  upload already gone (``NoSuchUpload``) from one aborted;
* **an unmarked job's uploads** (its tree holds ``_magicfs_unmarked``: no intent
  markers, :mod:`.tracking`): beyond the keys its tree names, every upload under its
  destination not in its snapshot that no other job's tree may own, the rule of its own
  sweep (:mod:`.sweep`);
* **job trees**: one ``/``-delimited listing of the names at a destination.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Container, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..operator_view import OperatorView, Owner, Pending
from .store import PendingUpload, iterate
from .sweep import OtherJob, aread_unmarked, hidden_below, other_jobs
from .tracking import UnmarkedRecord

if TYPE_CHECKING:
    from .deferred import S3Deferred

log = logging.getLogger("magicfs.cli.uploads")

T = TypeVar("T")
U = TypeVar("U")


class S3OperatorView(OperatorView):
    """The operator's view of S3 through the adapter's :class:`~.store.S3Store`."""

    knows_initiation = True
    paced_reads = True
    adapter: S3Deferred

    def __init__(self, adapter: S3Deferred):
        super().__init__(adapter)
        self.store = adapter.store

    def iterate(self, items: AsyncIterator[T], chunk: int = 1000) -> Iterator[T]:
        return iterate(self.store, items, chunk)  # a page per wait

    def alist_pending(self, prefix: str) -> AsyncIterator[Pending]:
        bucket, key = self.adapter.split_prefix(prefix)  # data/ never matches data10/

        def pending(upload: PendingUpload) -> Pending:
            return Pending(f"{bucket}/{upload.key}", upload.upload_id, upload.initiated)

        return _Mapped(self.store.alist_uploads(bucket, key), pending)

    async def ameasure(self, pending: Pending) -> tuple[int, int] | None:
        try:
            parts = await self.store.alist_parts(*self.split(pending.path), pending.upload_id)
        except FileNotFoundError:
            return None
        return len(parts), sum(int(part.get("Size") or 0) for part in parts)

    async def aabort(self, pending: Pending) -> bool:
        return await self.store.aabort_upload(*self.split(pending.path), pending.upload_id)

    def job_owner(self, dest: str, job: str, keys: Container[str], record: str) -> Owner | None:
        snapshot = self.run(aread_unmarked(self.store, *self.split(record)))
        if snapshot is None:
            return None
        log.info(
            "job %s is unmarked: the uploads under its destination not in its snapshot "
            "(%s uploads pending when it began) are its own",
            job,
            "?" if snapshot.before is None else f"{len(snapshot.before):,}",
        )
        bucket, dest_key = self.split(dest)
        return UnmarkedJobKeys(self, bucket, dest_key, job, keys, snapshot).owns

    def alist_named(self, prefix: str) -> AsyncIterator[str]:
        bucket, key = self.split(prefix)
        return _Mapped(self.store.alist_prefixes(bucket, key), lambda p: p.rstrip("/"))


class UnmarkedJobKeys:
    """What an unmarked job's uploads are: on its recorded keys, or not in its snapshot
    and owned by no other job's tree (looked up once per directory). An unreadable
    snapshot: only its recorded keys."""

    def __init__(
        self,
        view: S3OperatorView,
        bucket: str,
        dest_key: str,
        job: str,
        keys: Container[str],
        snapshot: UnmarkedRecord,
    ):
        self.view, self.bucket, self.job, self.keys = view, bucket, job, keys
        self.snapshot = snapshot
        self.dest_key = dest_key
        self._others: dict[str, list[OtherJob]] = {}

    def owns(self, pending: Pending) -> bool:
        _, key = self.view.split(pending.path)
        if key in self.keys:
            return True
        if not self.snapshot.may_own(pending.upload_id):
            return False
        if hidden_below(self.dest_key, key):
            return False
        directory = key.rpartition("/")[0]
        if directory not in self._others:
            self._others[directory] = other_jobs(self.view.store, self.bucket, self.job, {key})
        listed = PendingUpload(key, pending.upload_id, pending.initiated)
        return not any(other.may_own(listed) for other in self._others[directory])


class _Mapped(AsyncIterator[U]):
    """A paged listing with ``convert`` applied to each entry, still telling
    :func:`~.store.iterate` how much of its page is left (one wait per page)."""

    def __init__(self, items: AsyncIterator[Any], convert: Callable[[Any], U]):
        self.items, self.convert = items, convert

    @property
    def left(self) -> int | None:
        return getattr(self.items, "left", None)

    async def __anext__(self) -> U:
        return self.convert(await self.items.__anext__())
