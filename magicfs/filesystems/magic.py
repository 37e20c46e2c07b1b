"""``MagicFileSystem``: any fsspec filesystem, with the paths of task attempts made safe.

Two rules:

* a path with no magic element goes straight to the wrapped filesystem, unchanged —
  every method, with the wrapped filesystem's own behaviour and speed;
* a path with one (a *task path*, ``task.path(...)``) goes to the **task view** chosen
  once, by what the store can do (:mod:`magicfs.stores.capabilities`):

  - a deferred store (:mod:`magicfs.stores.registry`: S3 multipart uploads, Azure block
    lists, the in-process store): :class:`~.deferred_view.DeferredTaskView` over the
    store's write side, files staged on their final names that only job commit publishes;
  - rename stores (local, memory, GCS): :class:`~.routed_view.RoutedTaskView`,
    routed to the attempt's working directory, job commit renames.

Compound operations on task paths (``copy``, ``get``, ``put``, ``glob``, ``walk``,
``cat``, ``exists``...) run fsspec's own logic over this class's leaf methods, so their
semantics (trailing slashes, globs, recursion) are fsspec's, on every store.

Names are taken literally by every single-path method (``rm_file``, ``cat_file``,
``pipe_file``, ``put_file``, ``get_file``, ``cp_file``, ``info``, ``exists``, ``open``,
``touch``...): none is implemented through a method that takes patterns (``rm``,
``copy``, ``get``, ``put``, ``expand_path``), where ``[1]``, ``*`` or ``?`` in a name would
select other files. Those multi-path methods expand patterns as fsspec and the wrapped
filesystem do. ``tests/test_literal_names.py`` holds both, on every store. Where a
task file cannot be a source (S3: no bytes before job commit) the whole operation is
refused before anything is written. The README's table "Operations on task paths"
states the result of every operation on each store; ``tests/helpers/task_paths.py``
checks each cell (run by each store's ``tests/test_contract_<store>.py``).

Decision: instances are not cached (``cachable = False``). A wrapper holds no state of
its own worth sharing and the wrapped filesystem has its own cache; this way no two
jobs or threads ever share a wrapper by accident (fsspec#180). Instances pickle by
their constructor arguments, so they travel to Spark executors.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, cast

import fsspec
from fsspec.implementations.chained import ChainedFileSystem

from ..errors import OutsideTaskPathError
from ..paths import is_magic_path
from ..stores.binding import DeferredStoreSpec
from ..stores.capabilities import capabilities
from ..stores.deferred_writer import WriterOptions
from ..stores.registry import store_default, store_keywords
from .deferred_view import DeferredTaskView
from .job_views import JobViews
from .originals import store_filesystem, unwrapped
from .routed_view import RoutedTaskView

#: Operations fsspec composes from the leaf methods: on task paths they run fsspec's own
#: implementation over this class's leaves, on plain paths the wrapped filesystem's.
_COMPOSED = (
    "cat",
    "cat_ranges",
    "head",
    "tail",
    "read_block",
    "exists",
    "lexists",
    "isdir",
    "isfile",
    "size",
    "sizes",
    "glob",
    "walk",
    "du",
    "expand_path",
)
#: Single-path operations the view passes to the store (on the routed path, or as is).
_PASSED = ("created", "modified", "checksum", "ukey", "sign", "mkdir", "makedirs", "rmdir")


class MagicFileSystem(ChainedFileSystem):
    """Wrap ``fs`` (or build one from ``target_protocol`` / ``target_options``).

    Options of the deferred stores' writers (:mod:`magicfs.stores.deferred_writer`):

    * ``part_size`` (8 MiB): size of each part (S3: >= 5 MiB, doubling after every
      1,000 parts so huge files stay within S3's 10,000 parts; Azure: the block size).
    * ``parts_in_flight`` (4): parts staged at once per file; memory per open file is
      about ``(parts_in_flight + 1) * part_size``, and all files together stay within
      the process's buffer budget (``MAGICFS_MAX_BUFFERED_BYTES``).
    * ``in_memory`` (False, S3): keep commit data in this process instead of writing a
      ``.pending`` per file (HADOOP-19047; see :mod:`magicfs.stores.s3.tracking`).
    * ``check_job_active`` (True): writers in a ``__magic_job-<id>`` directory check
      that the job is still active once their file is begun.
    * ``background_close`` (True): ``close()`` of a task attempt's file returns at once
      and finishes in the background; the task's commit waits for it (and fails if it
      failed). False: ``close()`` waits, and raises what failed.
    * ``retry_policy`` (S3): how S3 calls are retried
      (:class:`magicfs.stores.s3.retry.RetryPolicy`).
    * ``max_request_rate`` (``None``, S3): the committer's cap on the job's calls per
      second in this process (:mod:`magicfs.stores.s3.rate`); task URLs carry it, so a
      writer in a process without the job's committer caps its job's calls too.
    * ``checksum`` (``"CRC32"``, S3): the checksum algorithm of every part, kept in the
      ``.pending`` record and verified at job commit (:mod:`magicfs.stores.s3.checksums`);
      ``None``: none declared or recorded (a store that refuses checksum headers also
      needs ``request_checksum_calculation="when_required"`` in ``config_kwargs``).
    * ``intent_markers`` (True, S3): PUT the intent marker before each upload. The magic
      committer sets it False in ``committer.fs`` and ``committer.storage_options`` when
      its job found no other job covering the destination (``intent_markers="auto"``,
      :mod:`magicfs.stores.s3.tracking`); do not set it yourself: a job whose tree does
      not say it is unmarked finds its uploads only by their markers. False is honoured
      only in the process that set up the file's task attempt (and never for ``xb`` files
      or hidden names): elsewhere a writer always puts its marker.

    Azure Blob (adlfs): ``block_lists`` (False) chooses the view. True: task files are
    blocks staged on their final blob, published by the block-list committer
    (``part_size`` is the block size, ``parts_in_flight`` the blocks staged at once).
    False: task paths are routed to the manifest committer's attempt directory. Each
    committer builds its ``fs`` with its own choice, and ``committer.storage_options``
    carry it to URL-based writers.

    ``job_root`` (None): the destination of the job this filesystem writes for, as the
    wrapped filesystem names it. Committers set it on ``job.fs`` (and in the options of
    ``task.url(...)``): a write under it *outside* every task path (``open`` for
    writing, ``pipe``, ``put``, ``touch``, ``copy``/``mv`` into it) raises
    :class:`~magicfs.errors.OutsideTaskPathError` before anything is written.

    Decision: refuse, not publish at job commit. Such a write is almost always a
    forgotten ``task.path(...)``, and written through, the file would be visible at once
    and kept when the job aborts. Publishing it at job commit instead would need a
    job-level attempt that no task owns (who commits it, which copy wins when two
    workers write ``_metadata``?). The files that route was meant for, Dask's and
    pyarrow's ``_metadata``/``_common_metadata`` summaries, are not written by magicfs's
    writers (``magicfs.dask`` refuses ``write_metadata_file``); a job that wants one
    writes it under a task path, like any other file. Reads, deletes, and anything
    outside the destination pass through unchanged.
    """

    protocol = "magic"
    cachable = False

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem | None = None,
        target_protocol: str | None = None,
        target_options: dict[str, Any] | None = None,
        fo: str | None = None,
        *,
        part_size: int = 8 << 20,
        parts_in_flight: int = 4,
        in_memory: bool = False,
        check_job_active: bool = True,
        background_close: bool = True,
        job_root: str | None = None,
        **kwargs: Any,
    ):
        #: The deferred stores' own keywords (S3's ``retry_policy``, ``checksum``,
        #: ``intent_markers``; Azure's ``block_lists``), passed through unread: the
        #: store's spec types and checks them (:func:`_store_writer_options`).
        self.store_options = {k: kwargs.pop(k) for k in store_keywords() if k in kwargs}
        super().__init__(**kwargs)
        if fs is None:
            if target_protocol is None:
                raise ValueError("MagicFileSystem needs fs= or target_protocol=")
            fs = store_filesystem(target_protocol, **(target_options or {}))
        # After magicfs.install() the store's URL builds a wrapper: wrap the store itself.
        self.fs = unwrapped(fs)
        self.part_size = part_size
        self.parts_in_flight = parts_in_flight
        self.in_memory = in_memory
        self.check_job_active = check_job_active
        self.background_close = background_close
        self.job_root = job_root.rstrip("/") if job_root else None
        #: Set on a store whose deferred view is opt-in and not opted in (:mod:`.job_views`).
        self.job_views: JobViews | None = None
        self.view = self._choose_view()

    @classmethod
    def default(cls, keyword: str) -> Any:
        """The value ``keyword`` takes when not given (its own keywords' defaults, and the
        deferred stores': their ``writer_options`` fields, an opt-in False)."""
        parameter = inspect.signature(cls.__init__).parameters.get(keyword)
        if parameter is not None and parameter.default is not parameter.empty:
            return parameter.default
        return store_default(keyword)

    def _choose_view(self) -> DeferredTaskView | RoutedTaskView:
        """The deferred store's view when the registry knows the store (and its opt-in
        keyword, if it has one, is True); else the rename stores' routed view. On a store
        with an opt-in not said True (Azure without ``block_lists=True``) each task path
        then goes where its job's committer looks (:mod:`.job_views`)."""
        found = capabilities(self.fs)
        spec = found.deferred_store
        said = self.store_options.get(spec.opt_in) if spec and spec.opt_in else None
        opted_in = spec is not None and (spec.opt_in is None or bool(said))
        if spec is not None and spec.writes is not None and opted_in:
            return self._deferred_view(spec)
        routed = RoutedTaskView(
            self.fs, needs_directories=found.needs_directories, appends=found.appends
        )
        if spec is not None and spec.writes is not None:
            writes = spec

            def deferred() -> DeferredTaskView:
                return self._deferred_view(writes)

            self.job_views = JobViews(
                spec, self.fs, None if said is None else bool(said), routed, deferred
            )
        return routed

    def _deferred_view(self, spec: DeferredStoreSpec) -> DeferredTaskView:
        assert spec.writes is not None
        return DeferredTaskView(spec.writes(self.fs, self._writer_options(spec)))

    def _view_for(self, path: str) -> DeferredTaskView | RoutedTaskView:
        """The view of task path ``path`` (the store's name for it)."""
        return self.view if self.job_views is None else self.job_views.view_for(path)

    def _writer_options(self, spec: DeferredStoreSpec) -> WriterOptions:
        return WriterOptions(
            part_size=self.part_size,
            parts_in_flight=self.parts_in_flight,
            in_memory=self.in_memory,
            check_job_active=self.check_job_active,
            background_close=self.background_close,
            store=_store_writer_options(spec, self.store_options),
        )

    @property
    def deferred_writes(self) -> bool:
        """True on a deferred store (S3, Azure block lists, ...): task files are staged on
        their final names, and job commit publishes them."""
        return isinstance(self.view, DeferredTaskView)

    # -- paths ---------------------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("magic://") and "::" in path:  # magic://<path>::<store URL>
            path = path.partition("::")[0]
        for prefix in ("magic::", "magic://"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
        return path

    def _inner(self, path: str) -> str:
        """``path`` as the wrapped filesystem names it (``bkt/key`` for S3); keeps a trailing /."""
        path = self._strip_protocol(path)
        inner: str = self.fs._strip_protocol(path)
        return inner + "/" if path.endswith("/") and not inner.endswith("/") else inner

    def _task(self, path: Any) -> bool:
        """Does ``path`` (or any of a list) name a task path?"""
        return names_task_path(path, self._inner)

    def _refuse_outside_tasks(self, path: Any, operation: str) -> None:
        """Refuse a write under :attr:`job_root` that is not on a task path (see the class)."""
        if self.job_root is None:
            return
        root = self.job_root
        for target in path if isinstance(path, (list, tuple)) else [path]:
            if not isinstance(target, str) or self._task(target):
                continue
            inner = self._inner(target).rstrip("/")
            if inner != root and not inner.startswith(root + "/"):
                continue
            name = inner[len(root) + 1 :] or "<name>"
            raise OutsideTaskPathError(
                f"{self.unstrip_protocol(inner)}: not written ({operation}): it is inside the "
                f"destination of this filesystem's job ({self.unstrip_protocol(root)}) but "
                "outside every task path, so it would be visible at once and kept if the job "
                f"aborted. Write it at task.path({name!r}) with job.fs (or task.url({name!r}) "
                f"with job.storage_options): it appears at {self.unstrip_protocol(inner)} when "
                "the job commits"
            )

    def unstrip_protocol(self, name: str) -> str:
        return cast(str, self.fs.unstrip_protocol(name))

    # -- leaves: the task view for task paths, the wrapped filesystem otherwise -------------------
    # On a plain path a leaf returns what the wrapped filesystem's method returns (s3fs's
    # pipe_file, touch and rm return S3's answers), hence ``Any``; on a task path, ``None``.

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if not self._task(path):
            if not mode.startswith("r") or "+" in mode:
                self._refuse_outside_tasks(path, f"open {mode!r}")
            return self.fs.open(path, mode, **kwargs)
        return super().open(path, mode, **kwargs)  # text and compression layers over _open

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Only reached for task paths (see :meth:`open`)."""
        if block_size is not None:
            kwargs["block_size"] = block_size
        if cache_options is not None:
            kwargs["cache_options"] = cache_options
        if not autocommit:
            kwargs["autocommit"] = False
        inner = self._inner(path)
        return self._view_for(inner).open(inner, mode, **kwargs)

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kw: Any
    ) -> bytes:
        if not self._task(path):
            return cast(bytes, self.fs.cat_file(path, start=start, end=end, **kw))
        inner = self._inner(path)
        return self._view_for(inner).cat_file(inner, start=start, end=end, **kw)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> Any:
        if not self._task(path):
            self._refuse_outside_tasks(path, "pipe_file")
            return self.fs.pipe_file(path, value, mode=mode, **kwargs)
        inner = self._inner(path)
        self._view_for(inner).pipe_file(inner, value, mode=mode, **kwargs)

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> Any:
        if callback is not None:
            kwargs["callback"] = callback
        if not self._task(rpath):
            self._refuse_outside_tasks(rpath, "put_file")
            return self.fs.put_file(lpath, rpath, **kwargs)
        kwargs.pop("callback", None)
        inner = self._inner(rpath)
        self._view_for(inner).put_file(lpath, inner, **kwargs)

    def get_file(self, rpath: str, lpath: str, callback: Any = None, **kwargs: Any) -> Any:
        if callback is not None:
            kwargs["callback"] = callback
        if not self._task(rpath):
            return self.fs.get_file(rpath, lpath, **kwargs)
        inner = self._inner(rpath)
        self._view_for(inner).get_file(inner, lpath, **kwargs)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> Any:
        self._refuse_outside_tasks(path2, "cp_file")  # each target not on a task path
        if not (self._task(path1) or self._task(path2)):
            return self.fs.cp_file(path1, path2, **kwargs)
        view = self._view_for(self._inner(path2 if self._task(path2) else path1))
        view.cp_file(self._inner(path1), self._inner(path2), **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> Any:
        if not self._task(path):
            self._refuse_outside_tasks(path, "touch")
            return self.fs.touch(path, truncate=truncate, **kwargs)
        inner = self._inner(path)
        self._view_for(inner).touch(inner, truncate=truncate, **kwargs)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if not self._task(path):
            return cast(dict[str, Any], self.fs.info(path, **kwargs))
        inner = self._inner(path)
        return self._view_for(inner).info(inner, **kwargs)

    def ls(self, path: str, detail: bool | None = None, **kwargs: Any) -> list[Any]:
        """``ls``; ``detail`` defaults as the wrapped filesystem's does (stores differ)."""
        if detail is None:
            detail = inspect.signature(self.fs.ls).parameters["detail"].default is True
        if not self._task(path):
            return cast(list[Any], self.fs.ls(path, detail=detail, **kwargs))
        inner = self._inner(path)
        return self._view_for(inner).ls(inner, detail=detail, **kwargs)

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        if not self._task(path):
            return self.fs.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        inner = self._inner(path)
        return self._view_for(inner).find(
            inner, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs
        )

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> Any:
        if not self._task(path):
            return self.fs.rm(path, recursive=recursive, maxdepth=maxdepth)
        paths = [self._inner(p) for p in (path if isinstance(path, list) else [path])]
        view = self._view_for(next(p for p in paths if is_magic_path(p)))
        view.rm(paths, recursive=recursive, maxdepth=maxdepth)

    def rm_file(self, path: str) -> Any:
        """Delete the one file named ``path``, its name taken literally.

        Never through :meth:`rm`: ``rm`` takes patterns (``[``, ``]``, ``*``, ``?`` are
        fsspec's glob characters): when it was, ``rm_file("bkt/a[1].txt")`` deleted
        ``a1.txt`` instead, and ``rm_file("bkt/b*.txt")`` every name the pattern matched
        (CHANGELOG). A plain path is the wrapped filesystem's own ``rm_file``; a task path
        the view's, which deletes exactly that task file.
        """
        if not self._task(path):
            return self.fs.rm_file(path)
        inner = self._inner(path)
        self._view_for(inner).rm_file(inner)

    delete = rm

    def invalidate_cache(self, path: str | None = None) -> None:
        inner = self._inner(path) if path else None
        self.fs.invalidate_cache(self._view_for(inner).into(inner) if inner else None)

    # -- compound operations ---------------------------------------------------------------------

    def copy(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> Any:
        self._refuse_outside_tasks(path2, "copy")  # each target not on a task path
        if not (self._task(path1) or self._task(path2)):
            return self.fs.copy(path1, path2, recursive=recursive, **kwargs)
        self._check_sources(path1, recursive, kwargs.get("maxdepth"), "copy")
        return super().copy(path1, path2, recursive=recursive, **kwargs)

    cp = copy

    def mv(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> Any:
        self._refuse_outside_tasks(path2, "mv")  # each target not on a task path
        if not (self._task(path1) or self._task(path2)):
            return self.fs.mv(path1, path2, recursive=recursive, **kwargs)
        target = path2 if self._task(path2) else path1
        view = self._view_for(self._inner(target[0] if isinstance(target, list) else target))
        if isinstance(view, RoutedTaskView):  # the store's own move: a rename on disk
            inner1 = (
                [self._inner(p) for p in path1] if isinstance(path1, list) else self._inner(path1)
            )
            inner2 = (
                [self._inner(p) for p in path2] if isinstance(path2, list) else self._inner(path2)
            )
            return view.mv(inner1, inner2, recursive=recursive, **kwargs)
        self._check_sources(path1, recursive, kwargs.get("maxdepth"), "move")
        return super().mv(path1, path2, recursive=recursive, **kwargs)

    rename = move = mv

    def get(self, rpath: Any, lpath: Any, recursive: bool = False, **kwargs: Any) -> Any:
        if not self._task(rpath):
            return self.fs.get(rpath, lpath, recursive=recursive, **kwargs)
        self._check_sources(rpath, recursive, kwargs.get("maxdepth"), "download")
        return super().get(rpath, lpath, recursive=recursive, **kwargs)

    download = get

    def put(self, lpath: Any, rpath: Any, recursive: bool = False, **kwargs: Any) -> Any:
        if not self._task(rpath):
            self._refuse_outside_tasks(rpath, "put")
            return self.fs.put(lpath, rpath, recursive=recursive, **kwargs)
        return super().put(lpath, rpath, recursive=recursive, **kwargs)

    upload = put

    def pipe(self, path: Any, value: Any = None, **kwargs: Any) -> Any:
        targets = path if isinstance(path, dict) else {path: value}
        self._refuse_outside_tasks([t for t in targets if not self._task(t)], "pipe")
        if not self._task(list(targets)):
            return self.fs.pipe(path, value, **kwargs)
        for target, data in targets.items():
            self.pipe_file(target, data, **kwargs)

    def _check_sources(
        self, path: Any, recursive: bool, maxdepth: int | None, operation: str
    ) -> None:
        """Refuse, before anything is done, a source the task view cannot read."""
        if not self._task(path):
            return
        first = path[0] if isinstance(path, list) else path
        view = self._view_for(self._inner(first))
        if isinstance(view, DeferredTaskView):
            sources = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
            view.check_sources([self._inner(p) for p in sources], operation)


def names_task_path(path: Any, inner: Callable[[str], str]) -> bool:
    """Does ``path`` (a path, or any of a list or of a dict's keys) name a task path, once
    ``inner`` has turned it into the store's own name for it? The store's root (``""``,
    ``"/"``, ``"s3://"``: the bucket listing on S3) never does; nor does anything that is
    not a string (fsspec's own code then decides, as for any path)."""
    if isinstance(path, (list, tuple, dict)):
        return any(names_task_path(p, inner) for p in path)
    if not isinstance(path, str):
        return False
    name = inner(path)
    return bool(name.strip("/")) and is_magic_path(name)


def _composed(name: str) -> Any:
    def method(self: MagicFileSystem, path: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._task(path):
            return getattr(self.fs, name)(path, *args, **kwargs)
        return getattr(fsspec.AbstractFileSystem, name)(self, path, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}``: fsspec's own logic on task paths, the wrapped one otherwise."
    return method


def _passed(name: str) -> Any:
    def method(self: MagicFileSystem, path: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._task(path):
            return getattr(self.fs, name)(path, *args, **kwargs)
        inner = self._inner(path)
        return self._view_for(inner).call(name, inner, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the wrapped filesystem (task paths routed on rename stores)."
    return method


def _store_writer_options(spec: DeferredStoreSpec, options: dict[str, Any]) -> Any:
    """The store's own writer options, typed by its spec (``None``: it declares none)."""
    if spec.writer_options is None:
        return None
    names = {f.name for f in dataclasses.fields(spec.writer_options)}
    return spec.writer_options(**{k: v for k, v in options.items() if k in names})


class MagicOptions(dict[str, Any]):
    """The ``"magic"`` entry of ``committer.storage_options``: a plain dict of
    :class:`MagicFileSystem` options, whose ``str()`` also says what to do when a
    writer cannot use it.

    Why: writers with their own storage clients (polars, Arrow's filesystems) never hand
    a URL to fsspec; polars rejects ``storage_options`` whose values are not strings,
    quoting ``str(value)``. Its error then reads "invalid value for 'magic': '{...}'
    magicfs: ... job.fs.open(task.path(name), 'wb')" and names the route that works, a
    file object opened through ``job.fs``. ``repr()``, equality, pickling and JSON are a
    dict's.
    """

    def __str__(self) -> str:
        return (
            f"{dict.__repr__(self)} -- magicfs: task URLs open only through fsspec "
            "(pandas, Dask); this writer uses its own storage client. Hand it a file "
            "object instead: with job.fs.open(task.path(name), 'wb') as f: write to f"
        )


def chained_url(store_url: str) -> str:
    """The URL of a task file, from the store's URL of it: ``magic://<path>::<store URL>``.

    The path is written twice, on purpose. fsspec opens either segment's path (the
    magic segment's when it has one, else the store's), but writers that infer a
    file's compression from its name read only the *first* segment of a chained URL,
    fsspec's convention that the outermost filesystem names the file
    (``zip://inner.csv::s3://bkt/a.zip``). pandas does: given ``magic::s3://.../x.csv.gz``
    it looked at ``magic`` alone and wrote an uncompressed file under the ``.gz`` name.
    With the file's path in the first segment, compression is inferred from a task URL
    exactly as from the store's own URL. The older ``magic::<store URL>`` form still opens.
    """
    _, sep, path = store_url.partition("://")
    if not sep:
        raise ValueError(f"{store_url!r} is not a URL (no protocol://)")
    return f"magic://{path}::{store_url}"


for _name in _COMPOSED:
    setattr(MagicFileSystem, _name, _composed(_name))
for _name in _PASSED:
    setattr(MagicFileSystem, _name, _passed(_name))
