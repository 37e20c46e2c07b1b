"""The classes ``magicfs.install()`` registers: each store's own class, with task paths.

``installed_class(S3FileSystem)`` is a *subclass* of s3fs's ``S3FileSystem`` (of adlfs's,
gcsfs's, fsspec's local and memory classes likewise), built once per class. Outside task
paths an instance *is* the store's filesystem: s3fs's ``__init__`` made it, every method
and attribute is s3fs's own (``fs.s3``, ``connect``, ``version_aware``, ``url``,
``split_path``, the ``dircache``, the whole async API), ``isinstance(fs, S3FileSystem)``
holds, and fsspec's instance cache, ``current()``, ``skip_instance_cache`` and
``clear_instance_cache()`` are s3fs's rules, applied to the installed class's own cache.
Only the methods that can name a task path (:data:`ROUTED`: the leaves and compound
operations :class:`~.magic.MagicFileSystem` handles) look at their path first: a task
path goes to a ``MagicFileSystem`` (:attr:`magicfs_view`), every other path to the
store's own method, unchanged.

Decision: a subclass, not a proxy. A proxy (the wrapper ``install()`` registered before)
forwards what it knows of and nothing else: s3fs's API, its caching and its dircache were
missing or different (issue 54), and every s3fs release could add more. A subclass
inherits all of it and copies none of s3fs's code.

The task view writes through a *second*, private instance of the store's class
(:attr:`magicfs_store`), built on the first task path with this instance's options,
never from the instance cache (``skip_instance_cache=True``) and never asynchronous (task
files are written with the blocking API, on fsspec's IO loop): the view's own markers and
records sit at task paths, so it needs the store's methods without the routing, and
sharing a session with a filesystem that asked for a fresh one, or one bound to a
caller's event loop, is what s3fs's rules forbid. A filesystem that never writes a task
path never builds it.

What stays s3fs's on task paths too: the async API (``_pipe_file``, ``_ls``...) and the
file objects it opens are s3fs's on every path, because s3fs's own methods call them on
the paths they walk. A task file written through them is the raw object at the task
path: never published, and the task's commit refuses it ("written directly to the store,
around magicfs"). Public methods that name a path but have no task-path meaning
(``url``, ``put_tags``, ``setxattrs``, ``chmod``...) are refused on task paths
(:class:`~magicfs.errors.UnsupportedTaskOperation`): they would act on the task's marker,
not on the file the task is writing.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
from typing import Any

import fsspec
import fsspec.asyn
from fsspec.asyn import AsyncFileSystem, sync_wrapper

from ..errors import UnsupportedTaskOperation
from ..stores.registry import store_keywords
from .magic import _COMPOSED, _PASSED, MagicFileSystem, names_task_path
from .originals import unwrapped_class

#: ``MagicFileSystem``'s own keywords (attributes of the same names) ...
GENERIC_OPTIONS = (
    "part_size",
    "parts_in_flight",
    "in_memory",
    "check_job_active",
    "background_close",
)
#: ... and the deferred stores' own, which it keeps in ``store_options``. None of them
#: reaches the store's class.
MAGIC_OPTIONS = (*GENERIC_OPTIONS, *sorted(store_keywords()))

#: The methods that look at their paths: a task path goes to ``MagicFileSystem``.
ROUTED = (
    "open",
    "cat_file",
    "pipe_file",
    "put_file",
    "get_file",
    "cp_file",
    "touch",
    "info",
    "ls",
    "find",
    "rm",
    "rm_file",
    "delete",
    "invalidate_cache",
    "copy",
    "cp",
    "mv",
    "rename",
    "move",
    "get",
    "download",
    "put",
    "upload",
    "pipe",
    *_COMPOSED,
    *_PASSED,
)
#: The arguments of a routed method that name store paths (``lpath`` is local).
_STORE_ARGUMENTS = ("path", "path1", "path2", "rpath")
#: The store options the private store of the task view never takes (see the module).
_NOT_FOR_THE_STORE = ("asynchronous", "loop")
#: Public methods that only parse a path, allowed on task paths.
_NAMES_ONLY = ("split_path",)

_classes: dict[type, type] = {}
_classes_lock = threading.Lock()


def installed_class(original: type) -> type:
    """The magic-aware subclass of ``original`` (one per class, made on first use)."""
    with _classes_lock:
        found = _classes.get(original)
        if found is None:
            found = _classes[original] = _subclass(original)
        return found


def _subclass(original: type) -> type:
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": (
            f"{original.__module__}.{original.__qualname__} with task paths made safe "
            f"(magicfs.install(); see {__name__})."
        ),
        "wrapped_class": original,
        "__init__": _init(original),
        "__reduce__": _reduce,
        "magicfs_view": property(_view),
        "magicfs_store": property(_store),
    }
    for name in ROUTED:
        if hasattr(original, name):
            namespace[name] = _routed(original, name)
    for name in _refused_names(original):
        namespace[name] = _refused(original, name)
    name = f"Magic{original.__name__}"
    cls: type = type(original)(name, (original,), {**namespace, "__qualname__": name})
    return cls


def _init(original: Any) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        options = {key: kwargs.pop(key) for key in MAGIC_OPTIONS if key in kwargs}
        original.__init__(self, *args, **kwargs)
        self._magicfs_options = options
        self._magicfs_lock = threading.Lock()
        self._magicfs_view = None  # a MagicFileSystem, made by _view

    return __init__


def _view(self: Any) -> MagicFileSystem:
    """The ``MagicFileSystem`` that handles this filesystem's task paths (built once)."""
    with self._magicfs_lock:
        if self._magicfs_view is None:
            original = type(self).wrapped_class
            options = {
                key: value
                for key, value in self.storage_options.items()
                if key not in MAGIC_OPTIONS and key not in _NOT_FOR_THE_STORE
            }
            store = original(*self.storage_args, skip_instance_cache=True, **options)
            self._magicfs_view = MagicFileSystem(fs=store, **self._magicfs_options)
        view: MagicFileSystem = self._magicfs_view
        return view


def _store(self: Any) -> fsspec.AbstractFileSystem:
    """The private store instance the task view writes through (see the module)."""
    store: fsspec.AbstractFileSystem = _view(self).fs
    return store


def _reduce(self: Any) -> Any:
    # By the name of the class it stands for, so it unpickles where install() never ran
    # (Spark's executors, a process pool): the same options make the same kind of
    # filesystem. A name, not the class: where that name was rebound to the installed
    # class (``s3fs.S3FileSystem = fsspec.get_filesystem_class("s3")``), pickle refuses
    # the class object ("not the same object as s3fs.core.S3FileSystem").
    original = type(self).wrapped_class
    name = f"{original.__module__}:{original.__qualname__}"
    return _rebuild, (name, self.storage_args, self.storage_options)


def _rebuild(name: str, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
    module, _, qualname = name.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return installed_class(unwrapped_class(found))(*args, **options)


def _routed(original: type, name: str) -> Any:
    """``name``: ``MagicFileSystem``'s on a task path, the store's own otherwise."""
    positions = _store_argument_positions(name)

    @functools.wraps(getattr(original, name))
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        paths = [
            args[index] if index < len(args) else kwargs.get(argument)
            for index, argument in positions
        ]
        if names_task_path(paths, self._strip_protocol):
            return getattr(self.magicfs_view, name)(*args, **kwargs)
        return _plain(self, original, name)(*args, **kwargs)

    return method


def _store_argument_positions(name: str) -> list[tuple[int, str]]:
    """Where ``MagicFileSystem.<name>`` takes store paths: (position, name) pairs."""
    parameters = list(inspect.signature(getattr(MagicFileSystem, name)).parameters)[1:]
    return [(i, p) for i, p in enumerate(parameters) if p in _STORE_ARGUMENTS]


def _plain(fs: Any, original: type, name: str) -> Any:
    """``fs.<name>`` as an instance of ``original`` has it: the class's method, or, on an
    async filesystem, the blocking wrapper fsspec makes of its coroutine when the class
    leaves the method to fsspec's default (``mirror_sync_methods``, fsspec's rule)."""
    own = getattr(original, name)
    if (
        getattr(fs, "async_impl", False)
        and getattr(fs, "mirror_sync_methods", False)
        and own is getattr(fsspec.AbstractFileSystem, name, None)
    ):
        coroutine = getattr(fs, "_" + name, None)
        if inspect.iscoroutinefunction(coroutine):
            return sync_wrapper(coroutine, obj=fs)
        # fsspec mirrors async generators only from 2026.6 (``async_gen_wrapper``);
        # an older fsspec leaves such a method to the class, as the fall-through does.
        generators = getattr(fsspec.asyn, "async_gen_wrapper", None)
        if generators is not None and inspect.isasyncgenfunction(coroutine):
            return generators(coroutine, obj=fs)
    return own.__get__(fs, type(fs))


def _refused_names(original: type) -> list[str]:
    """The store's own public methods that name a path first and are not routed (fsspec's
    base classes' are built on the routed ones, so they work on task paths)."""
    fsspec_bases = (fsspec.AbstractFileSystem, AsyncFileSystem, object)
    names = []
    for name in dir(original):
        if name.startswith("_") or name in ROUTED or name in _NAMES_ONLY:
            continue
        owner = next(klass for klass in original.__mro__ if name in vars(klass))
        member = vars(owner)[name]
        if owner in fsspec_bases or not inspect.isfunction(member):
            continue
        parameters = list(inspect.signature(member).parameters)
        if len(parameters) > 1 and parameters[1] in ("path", "paths"):
            names.append(name)
    return names


def _refused(original: type, name: str) -> Any:
    """``name`` refused on a task path, the store's own otherwise (a coroutine stays one)."""
    own = getattr(original, name)

    def check(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        path = args[0] if args else kwargs.get("path", kwargs.get("paths"))
        if names_task_path(path, self._strip_protocol):
            raise UnsupportedTaskOperation(
                f"{path}: {name}() is not done on a task path: it would act on the task's "
                "own marker in the store, not on the file the task is writing, which "
                "exists only once the job commits. Call it on the file's final path after "
                "the job has committed"
            )

    if inspect.iscoroutinefunction(own):

        @functools.wraps(own)
        async def coroutine(self: Any, *args: Any, **kwargs: Any) -> Any:
            check(self, args, kwargs)
            return await own(self, *args, **kwargs)

        return coroutine

    @functools.wraps(own)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        check(self, args, kwargs)
        return _plain(self, original, name)(*args, **kwargs)

    return method
