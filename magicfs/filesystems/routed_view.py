"""Task paths on rename stores (local, memory, Azure, GCS): routed to the attempt's directory.

Nothing can be written invisibly at its final name on these stores, so a task path is
*routed* to the task attempt's working directory of the manifest committer
(:class:`magicfs.layouts.manifest.AttemptRoute`), and paths in results are mapped back:
the task sees its files at the paths it used, and job commit renames them into place.
Every operation works as on the wrapped filesystem (reads included), with the
additions of :mod:`.tracked` for writes: open files are known to task commit, a failed
write leaves no file, and opening a path again replaces it.

Mapping is explicit, per path (in the manner of fsspec's ``DirFileSystem``): a path
with no magic element passes unchanged; a task path goes into its attempt's directory;
names in listing results come back out. Contents are never touched.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from glob import has_magic
from typing import Any, cast

from ..errors import TaskNotActiveError, UnsupportedTaskOperation
from ..layouts.manifest import AttemptRoute, route_for
from ..paths import split_magic_path
from ..stores.gcs_moves import object_moves
from ..task_files import TASK_FILES, TaskFile, TaskFiles
from .patterns import known_matches
from .tracked import TrackedWrite


class RoutedTaskView:
    """Task paths on ``fs``, a filesystem with rename; paths carry no protocol."""

    def __init__(
        self,
        fs: Any,
        *,
        needs_directories: bool,
        appends: bool,
        registry: TaskFiles = TASK_FILES,
    ):
        self.fs = fs
        self.needs_directories = needs_directories
        self.appends = appends
        self.registry = registry

    # -- mapping -----------------------------------------------------------------------------

    @staticmethod
    def route(path: str) -> tuple[str, AttemptRoute | None]:
        """(path in the store, its attempt's route); plain paths come back unchanged."""
        route = route_for(path)
        return (path, None) if route is None else (route.into(path), route)

    def into(self, path: str) -> str:
        return self.route(path)[0]

    @staticmethod
    def _back_entries(
        entries: Iterable[dict[str, Any]], route: AttemptRoute | None
    ) -> list[dict[str, Any]]:
        if route is None:
            return list(entries)
        return [{**e, "name": route.back(e["name"])} for e in entries]

    def _make_parent(self, path: str) -> None:
        if self.needs_directories:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)

    # -- writes --------------------------------------------------------------------------------

    def open(self, path: str, mode: str, **kwargs: Any) -> Any:
        routed, route = self.route(path)
        if route is None or ("r" in mode and "+" not in mode):
            return self.fs.open(routed, mode, **kwargs)
        if "a" in mode and not self.appends:
            raise UnsupportedTaskOperation(
                f"{self.fs.unstrip_protocol(path)}: append ('ab') is not supported on task "
                f"paths of this store ({type(self.fs).__name__} cannot append to an object it "
                "wrote: it fails or silently replaces the file): write the whole file in one go"
            )
        magic = split_magic_path(path)
        assert magic is not None
        job_id, attempt_id = magic.job_id or "", magic.task_attempt_id or ""
        finished = self.registry.finished(job_id, attempt_id)
        if finished:
            raise TaskNotActiveError(
                f"{path}: task attempt {attempt_id} has already {finished}: a file written now "
                "would never be published (write before commit_task)"
            )
        previous = self.registry.get(routed)
        if "x" in mode and (previous is not None or self.fs.exists(routed)):
            # Not every store's own "xb" refuses an existing file (adlfs, gcsfs do not).
            raise FileExistsError(f"{path}: the task has already written this file ('xb')")
        if previous is not None and previous.writer is not None:
            previous.writer.supersede("the file was opened again")  # before the new handle
        self._make_parent(routed)
        raw = self.fs.open(routed, mode, **kwargs)
        tracked = TrackedWrite(raw, self.fs, routed, self.registry)
        self.registry.opened(TaskFile(routed, job_id, attempt_id, writer=tracked))
        return tracked

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        with self.open(path, "xb" if mode == "create" else "wb") as f:
            f.write(value)

    def put_file(self, lpath: str, path: str, **kwargs: Any) -> None:
        routed = self.into(path)
        self._make_parent(routed)
        self.fs.put_file(lpath, routed, **kwargs)

    def cp_file(self, source: str, target: str, **kwargs: Any) -> None:
        routed = self.into(target)
        self._make_parent(routed)
        self.fs.cp_file(self.into(source), routed, **kwargs)

    def mv(self, source: Any, target: Any, **kwargs: Any) -> None:
        """The store's own move (a real rename on a local disk), on routed paths; one file
        on GCS by :mod:`magicfs.stores.gcs_moves`."""
        targets = target if isinstance(target, list) else [target]
        for one in targets:
            self._make_parent(self.into(one))
        routed_source = (
            [self.into(p) for p in source] if isinstance(source, list) else self.into(source)
        )
        routed_target = (
            [self.into(p) for p in target] if isinstance(target, list) else self.into(target)
        )
        moves = object_moves(self.fs)
        # GCS: one file, by the move probed once per bucket (gcsfs's own mv retries a
        # missing move for half a minute per file); else copy and delete, as renames do.
        if (
            moves is not None
            and isinstance(routed_source, str)
            and isinstance(routed_target, str)
            and self.fs.isfile(routed_source)
        ):
            if not moves.move(routed_source, routed_target):
                self.fs.cp_file(routed_source, routed_target)
                self.fs.rm_file(routed_source)
            return
        self.fs.mv(routed_source, routed_target, **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        routed = self.into(path)
        self._make_parent(routed)
        self.fs.touch(routed, truncate=truncate, **kwargs)

    def rm(self, paths: list[str], recursive: bool = False, maxdepth: int | None = None) -> None:
        """The store's own ``rm`` on the routed paths (patterns expanded by the store, as
        on a plain path); open writers of the files it names are stopped."""
        routed = [self.into(p) for p in paths]
        for path in routed:
            if has_magic(path):
                for entry in known_matches(self.registry, path, recursive=True):
                    self._stop_writers(entry.path, below=False)
            else:
                self._stop_writers(path, below=True)
        self.fs.rm(routed, recursive=recursive, maxdepth=maxdepth)

    def rm_file(self, path: str) -> None:
        """The store's own ``rm_file`` on the routed path, its name taken literally (not
        through :meth:`rm`, which expands glob characters); a writer still open on that
        one file is stopped."""
        routed = self.into(path)
        self._stop_writers(routed, below=False)
        self.fs.rm_file(routed)

    def _stop_writers(self, routed: str, *, below: bool) -> None:
        """Forget the task file ``routed`` (and, ``below``, the open ones under it) and stop
        their writers: a deleted file must not come back when its writer closes."""
        under = [f for f in self.registry.under(routed.rstrip("/") + "/") if f.is_open]
        exact = self.registry.get(routed)
        for entry in [*([exact] if exact else []), *(under if below else [])]:
            self.registry.discarded(entry.path)
            if entry.writer is not None:
                entry.writer.supersede("the file was deleted")

    # -- reads and listings -------------------------------------------------------------------

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kw: Any
    ) -> bytes:
        return cast(bytes, self.fs.cat_file(self.into(path), start=start, end=end, **kw))

    def get_file(self, path: str, lpath: str, **kwargs: Any) -> None:
        routed = self.into(path)
        if self.fs.isdir(routed):  # fsspec's generic get() hands directories over too
            os.makedirs(lpath, exist_ok=True)
            return
        self.fs.get_file(routed, lpath, **kwargs)

    def check_sources(self, paths: Iterable[str], operation: str) -> None:
        """Every task file can be read here."""

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        routed, route = self.route(path)
        info = self.fs.info(routed, **kwargs)
        return self._back_entries([info], route)[0]

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        routed, route = self.route(path)
        entries = self._back_entries(self.fs.ls(routed, detail=True, **kwargs), route)
        return entries if detail else [e["name"] for e in entries]

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        routed, route = self.route(path)
        found = self.fs.find(routed, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kwargs)
        entries = self._back_entries(found.values(), route)
        if detail:
            return {e["name"]: e for e in entries}
        return sorted(e["name"] for e in entries)

    def call(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        """Any other single-path method of the store, on the routed path."""
        return getattr(self.fs, method)(self.into(path), *args, **kwargs)
