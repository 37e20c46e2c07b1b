"""Task paths on Azure Blob: deferred writes through block lists.

The same view of a task's files as on S3 (:mod:`.s3_view`, whose listings, records and
refusals it shares): a file written under a task path exists, until job commit, only as
blocks staged on its final blob (invisible), a zero-byte marker at the task path and,
once closed, a ``.pending`` record naming the ordered block ids
(:mod:`magicfs.stores.azure.writer`). Reads of task files are refused (no bytes are
readable before job commit); deletes drop the record and marker, so the file is never
published (its staged blocks cannot be deleted on their own: they stay invisible until
Azure drops them).
"""

from __future__ import annotations

import io
from typing import Any, cast

from ..layouts.magic import job_marker_for
from ..names import PENDING_SUFFIX
from ..paths import MagicPath, is_deferred_write
from ..stores.azure.blocks import BlockStore
from ..stores.azure.writer import BlockListWriter
from ..task_files import TASK_FILES, TaskFiles
from .s3_view import S3TaskView

ADVICE = (
    "Write the file under its final name in one go; where a writer must read back, copy "
    "or rename its own output, use the manifest committer (committer='manifest': task "
    "files are ordinary blobs in the attempt's directory, copied into place at job commit)"
)


class BlockTaskView(S3TaskView):
    """Task paths on an adlfs filesystem ``fs``; paths are ``container/blob`` (no protocol)."""

    store_name = "Azure"
    deferred_noun = "blob"
    deferred_bytes = "uncommitted blocks"
    deferred_where = "staged on"
    advice = ADVICE

    def __init__(  # the S3 view's constructor builds an S3 client: not called
        self,
        fs: Any,
        *,
        block_size: int,
        blocks_in_flight: int,
        check_job_active: bool,
        registry: TaskFiles = TASK_FILES,
    ):
        self.fs = fs
        self.blocks = BlockStore(fs)
        self.block_size = block_size
        self.blocks_in_flight = blocks_in_flight
        self.check_job_active = check_job_active
        self.registry = registry

    def url(self, path: str) -> str:
        return self.blocks.url(path)

    def writer(
        self, path: str, magic_path: MagicPath, mode: str, block_size: int | None
    ) -> io.BufferedIOBase:
        return BlockListWriter(
            self.blocks,
            path,
            magic_path,
            mode=mode,
            block_size=block_size or self.block_size,
            blocks_in_flight=self.blocks_in_flight,
            job_marker=job_marker_for(magic_path) if self.check_job_active else None,
            registry=self.registry,
        )

    def rm_files(self, paths: list[str]) -> None:
        """Delete task files: their writers stop, their markers and records go."""
        deferred = [p for p in paths if is_deferred_write(p)]
        for path in deferred:
            entry = self.registry.discarded(path)
            if entry is not None and entry.writer is not None:
                entry.writer.supersede("the file was deleted")
        doomed = sorted({*paths, *(p + PENDING_SUFFIX for p in deferred)})
        self.blocks.run(self.blocks.delete_many([p for p in doomed if self.blocks.split(p)[1]]))

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if not is_deferred_write(path):
            return cast(dict[str, Any], self.fs.info(path, **kwargs))
        entry = self.registry.get(path)
        if entry is not None:
            return {"name": path, "size": entry.length, "type": "file"}
        found = cast(dict[str, Any], self.fs.info(path, **kwargs))
        if found.get("type") != "file":
            return found
        return {**found, "size": self._recorded_length(path) or 0}
