"""Every block-list request magicfs sends to Azure Blob, over adlfs's own client.

The requests go through the ``azure.storage.blob.aio`` service client of the adlfs
filesystem the job was given, on that filesystem's IO loop: credentials, endpoints,
connection strings and retries are adlfs's (and the Azure SDK's), configured once by the
user's ``storage_options``. Calls return ``concurrent.futures.Future`` (:meth:`submit`) so
writers stage blocks in the background and job commit publishes many blobs at once.

**Block ids.** Azure requires every block id of one blob to have the same length, staged
or committed, whoever wrote it (Put Block answers ``InvalidBlobOrBlock`` otherwise); ids
are at most 64 bytes. magicfs's ids are ``<token><index:06d>``, :data:`ID_LENGTH` (32)
characters by default — the length adlfs writes, so a destination adlfs wrote can be
replaced. When a blob already holds ids of another length (another SDK's writes), the
writer learns that length from the blob's block list and uses it (:func:`block_ids_for`).
The token is random per writer, so two attempts (or two writes of one path) never share
an id and only the list job commit names is published.

The Azure SDK is imported only when a request is made: ``magicfs`` itself needs no
``azure`` extra (``pip install 'magicfs[azure]'`` brings adlfs and the SDK).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Length of magicfs's block ids (adlfs's: a uuid4 hex).
ID_LENGTH = 32
#: Digits of a block's index within its file (50,000 blocks at most per blob).
INDEX_DIGITS = 6
#: The store's name: its registry key (:data:`.binding.SPEC`) and
#: ``extraData["magicfs.store"]`` of its records, whose ``etags`` are block ids (none
#: for an empty blob: :meth:`.deferred.BlockListDeferred.check` accepts that).
BLOCK_LIST_STORE = "azure-block-list"

#: Azure's limits (documented at Put Block / Put Block List).
MAX_ID_BYTES = 64
MAX_COMMITTED_BLOCKS = 50_000
MAX_BLOCK_SIZE = 4000 << 20


def new_token(length: int = ID_LENGTH) -> str:
    """A random prefix for one writer's block ids, ``length - INDEX_DIGITS`` hex digits."""
    digits = length - INDEX_DIGITS
    if digits < 8:
        raise ValueError(f"block ids of {length} characters leave too few for a unique prefix")
    return secrets.token_hex((digits + 1) // 2)[:digits]


def block_id(token: str, index: int) -> str:
    """The id of block ``index`` of the writer with ``token``."""
    return f"{token}{index:0{INDEX_DIGITS}d}"


def is_id_length_error(error: BaseException) -> bool:
    """Did Put Block refuse an id whose length differs from the blob's other ids?"""
    return getattr(error, "error_code", None) in (
        "InvalidBlobOrBlock",
        "InvalidBlockId",
    )


def _not_found() -> type[Exception]:
    from azure.core.exceptions import ResourceNotFoundError

    return ResourceNotFoundError


class BlockStore:
    """Block-list operations on the Azure account of an adlfs filesystem ``fs``."""

    def __init__(self, fs: Any):
        self.fs = fs

    def split(self, path: str) -> tuple[str, str]:
        """``container/blob/name`` -> (container, blob name)."""
        container, _, blob = self.fs._strip_protocol(path).partition("/")
        return container, blob

    def url(self, path: str) -> str:
        return str(self.fs.unstrip_protocol(path))

    def check_key(self, path: str) -> tuple[str, str]:
        """The shared job check's key of the marker at ``path``
        (:mod:`~magicfs.stores.job_check`): the account's endpoint and container, and
        the blob. The writers (:mod:`.writer`) and the adapter (:mod:`.deferred`) both
        take it from here, so their checks of one marker are shared, and never those of
        two accounts with a container of the same name."""
        container, blob = self.split(path)
        return f"{self.fs.service_client.url}/{container}", blob

    # -- running on adlfs's loop -------------------------------------------------------------

    def submit(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``call`` on the filesystem's IO loop."""
        return asyncio.run_coroutine_threadsafe(call, self.fs.loop)

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return self.submit(call).result()

    # -- small records (the RecordIO of magicfs.protocol.journal) -----------------------------

    def read(self, path: str, limit: int) -> bytes | None:
        """At most ``limit + 1`` bytes of ``path``; ``None`` if there is no such blob."""
        try:
            return bytes(self.fs.cat_file(path, start=0, end=limit + 1))
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        """One Put Blob: atomic on Azure (readers see the old blob or the new), so no
        temporary name and no copy (a rename store's way)."""
        self.run(self.put(*self.split(path), data))

    def display(self, path: str) -> str:
        return self.url(path)

    # -- the requests ------------------------------------------------------------------------

    async def stage(self, container: str, blob: str, block: str, data: bytes) -> None:
        """Put Block: ``data`` as block ``block`` of ``blob``, invisible until published."""
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            await client.stage_block(block, data, length=len(data))

    async def put(self, container: str, blob: str, data: bytes) -> None:
        """Put Blob: a small object (a marker, a record), visible at once."""
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            await client.upload_blob(data, overwrite=True)
        self.fs.invalidate_cache(f"{container}/{blob}")

    async def publish(self, container: str, blob: str, blocks: list[str]) -> None:
        """Put Block List: ``blob`` becomes exactly ``blocks``, in one request.

        Idempotent: publishing the same list again (a retried job commit) leaves the same
        bytes. A list naming a block that is not staged (discarded by another publish of
        the same name, or expired after 7 days) fails with ``InvalidBlockList`` and
        leaves the blob as it was.
        """
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            await client.commit_block_list(blocks)

    async def exists(self, container: str, blob: str) -> bool:
        """Get Blob Properties: is ``blob`` published? (One request, where adlfs's
        ``_exists`` lists the name as a directory too when there is no blob.)"""
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            try:
                await client.get_blob_properties()
            except _not_found():
                return False
        return True

    async def delete(self, container: str, blob: str) -> bool:
        """Delete a published blob; False when there was none."""
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            try:
                await client.delete_blob()
            except _not_found():
                return False
        return True

    async def delete_many(self, paths: list[str], concurrency: int = 64) -> int:
        """Delete ``container/blob`` paths, ``concurrency`` at once (Azure has no
        multi-object delete that Azurite serves); how many existed."""
        gate = asyncio.Semaphore(concurrency)

        async def delete(path: str) -> bool:
            async with gate:
                return await self.delete(*self.split(path))

        done = await asyncio.gather(*(delete(path) for path in paths))
        for path in paths:
            self.fs.invalidate_cache(path)
        return sum(done)

    async def id_length(self, container: str, blob: str) -> int | None:
        """The length of the block ids ``blob`` holds (staged or committed), if any."""
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            try:
                committed, staged = await client.get_block_list("all")
            except _not_found():
                return None
        for block in [*committed, *staged]:
            return len(block.id)
        return None

    async def committed_ids(self, container: str, blob: str) -> list[str] | None:
        """The block ids ``blob`` is published with; ``None`` when it is not published."""
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            try:
                await client.get_blob_properties()
                committed, _ = await client.get_block_list("committed")
            except _not_found():
                return None
        return [block.id for block in committed]

    async def staged_blobs(self, container: str, prefix: str) -> list[dict[str, Any]]:
        """Blobs under ``prefix`` that hold staged blocks and are not published: what
        ``magicfs uploads list`` shows on Azure (name, staged blocks, staged bytes)."""
        found = []
        async with self.fs.service_client.get_container_client(container) as client:
            async for item in client.list_blobs(
                name_starts_with=prefix, include=["uncommittedblobs"]
            ):
                name = item.name
                async with client.get_blob_client(name) as blob:
                    try:
                        await blob.get_blob_properties()
                        continue  # published: its staged blocks go at its next publish
                    except _not_found():
                        pass
                    try:
                        _, staged = await blob.get_block_list("uncommitted")
                    except _not_found():
                        continue
                if staged:
                    found.append(
                        {
                            "name": f"{container}/{name}",
                            "blocks": len(staged),
                            "bytes": sum(b.size for b in staged),
                        }
                    )
        return found
