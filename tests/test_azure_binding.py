"""Azure's binding: what its writers and its committer must agree on, on Azurite.

* one check of the job marker answers the writers and the committer of a process that
  ask at once (:mod:`magicfs.stores.job_check`), counted at the server: before the
  binding gave both halves one key, the writers keyed it by endpoint and container and
  the committer by container, and the promised sharing never happened.
"""

from __future__ import annotations

import asyncio

import adlfs
import pytest

import magicfs
from magicfs.committers.magic_layout import shared_check
from magicfs.paths import split_magic_path
from magicfs.stores.azure.writer import BlockListWrites
from magicfs.stores.deferred_writer import WriterOptions


def _marker_checks(server, container: str) -> int:
    """Get Blob Properties of a job marker in ``container``, so far."""
    return sum(
        op == "Blob_GetProperties" and c == container and blob.endswith("_magicfs_job.json")
        for op, c, blob in server.settled_requests()
    )


def test_writers_and_the_committer_share_one_job_check(
    azurite_logged, abfs_logged, logged_container
):
    committer = magicfs.committer_for(
        f"abfs://{logged_container}/out", storage_options=azurite_logged.storage_options
    )
    committer.setup_job()
    marker = committer.flow.layout.job_marker
    adapter = committer.flow.deferred
    magic_path = split_magic_path(committer.task_attempt(0).path("x.csv"))
    assert magic_path is not None
    hooks = BlockListWrites(abfs_logged, WriterOptions()).hooks(
        magic_path.destination, magic_path, "wb", marker
    )

    async def three_at_once() -> list[bool]:
        # the committer's check starts; the writer's and a second committer's, asked
        # while it runs, share the next one: two checks for three callers (unshared
        # keys made three: the writer's could not join the committer's)
        return list(
            await asyncio.gather(
                shared_check(adapter, marker), hooks.ajob_active(), shared_check(adapter, marker)
            )
        )

    before = _marker_checks(azurite_logged, logged_container)
    assert adapter.run(three_at_once()) == [True, True, True]
    assert _marker_checks(azurite_logged, logged_container) - before == 2
    committer.abort_job()


def test_magic_layout_is_refused_on_azure_naming_block_list(azurite_server, azure_container):
    """Azure's writers save writer records that only the block-list committer reads: the
    generic ``magic-layout`` would commit a task without the files other processes
    wrote. Refused before anything is made, naming the committer that works."""
    dest = f"abfs://{azure_container}/out"
    with pytest.raises(ValueError, match=r"magic-layout.*committer='block-list'"):
        magicfs.committer_for(
            dest, committer="magic-layout", storage_options=azurite_server.storage_options
        )
    plain = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **azurite_server.storage_options)
    assert plain.find(azure_container) == []
