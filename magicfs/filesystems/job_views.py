"""On a store that serves two committers, the task view a task path's *job* needs.

adlfs serves both the block-list committer (task files are blocks staged on their final
blobs: the deferred view) and the manifest committer (task files in its ``_temporary/``
tree: the routed view). Which one a filesystem writes for used to be its opt-in keyword
alone (``block_lists``, False unless given), so a file written at a block-list job's
task path through a filesystem built without it (``fsspec.open("abfs://...")`` after
``magicfs.install()``, ``magic::abfs://`` with the store's plain options) went to the
manifest tree, and the job committed without it: silently lost.

Decision: the task path names its job, and its job's marker says which committer runs
it, so the write goes where that committer looks. :class:`JobViews` asks once per job
and filesystem, before the file is opened (no byte is taken first):

* the deferred job's marker (``<dest>/__magic_job-<id>/_magicfs_job.json``) exists: the
  deferred view. If the filesystem said ``block_lists=False`` outright, it is refused
  instead (:class:`~magicfs.errors.UnsupportedTaskOperation`, naming the option): the
  caller asked for the manifest committer's tree, and a silent switch would hide a
  mistake somewhere else in their set-up;
* else the routed view; remembered when the manifest job's marker
  (``<dest>/_temporary/<id>/_magicfs_job.json``) exists, else asked again next time (no
  job is running yet: a later set-up may make either).

A filesystem with the keyword True writes the deferred view without asking (the
block-list committer's own ``job.fs`` and ``job.storage_options``; a manifest job's
path then fails at the writer's job check, which finds no marker). The cost: one
metadata request per job and filesystem (two for a manifest job), through the store's
adapter (:meth:`~magicfs.stores.deferred.DeferredStore.arecord_info`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import UnsupportedTaskOperation
from ..layouts.magic import job_marker_for
from ..layouts.manifest import ManifestJobLayout
from ..paths import split_magic_path
from ..stores.binding import DeferredStoreSpec
from ..stores.deferred import DeferredStore
from ..stores.operator_view import no_scratch
from .deferred_view import DeferredTaskView
from .routed_view import RoutedTaskView

View = DeferredTaskView | RoutedTaskView


class JobViews:
    """The view of each task path on an opt-in deferred store (module docstring)."""

    def __init__(
        self,
        spec: DeferredStoreSpec,
        fs: Any,
        said: bool | None,
        routed: RoutedTaskView,
        deferred: Callable[[], DeferredTaskView],
    ):
        self.spec, self.fs, self.said = spec, fs, said
        self.routed = routed
        self._make_deferred = deferred
        self._deferred: DeferredTaskView | None = None
        self._adapter: DeferredStore | None = None
        self._known: dict[str, bool] = {}  # magic dir -> its job is the deferred store's
        self._lock = threading.Lock()

    @property
    def deferred(self) -> DeferredTaskView:
        with self._lock:
            if self._deferred is None:
                self._deferred = self._make_deferred()
            return self._deferred

    def view_for(self, path: str) -> View:
        """The view of task path ``path`` (the store's name for it)."""
        magic = split_magic_path(path)
        marker = job_marker_for(magic) if magic is not None else None
        if magic is None or marker is None:
            return self.routed
        known = self._known.get(magic.magic_dir)
        if known is None:
            known = self._ask(marker, magic.destination_dir, magic.job_id or "")
            if known is not None:
                self._known[magic.magic_dir] = known
        if not known:
            return self.routed
        if self.said is False:
            raise UnsupportedTaskOperation(
                f"{self.fs.unstrip_protocol(path)}: not written: this filesystem was built "
                f"with {self.spec.opt_in}=False (the manifest committer's tree), but the job "
                f"this task path names is committed by {self.spec.committer} "
                f"({self.fs.unstrip_protocol(marker)} exists), which would commit without "
                f"the file. Write it with job.fs, or open task.url(...) with "
                f"job.storage_options, or build the filesystem with {self.spec.opt_in}=True"
            )
        return self.deferred

    def _ask(self, marker: str, destination: str, job_id: str) -> bool | None:
        """True: the deferred store's job; False: a manifest job's; None: neither runs."""
        if self._adapter is None:
            self._adapter = self.spec.adapter(self.fs, "", no_scratch)
        adapter = self._adapter
        if adapter.run(adapter.arecord_info(marker)) is not None:
            return True
        manifest_marker = ManifestJobLayout(destination, job_id).job_marker
        if adapter.run(adapter.arecord_info(manifest_marker)) is not None:
            return False
        return None
