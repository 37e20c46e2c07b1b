"""Names are taken literally: a single-path method of magicfs's filesystems
acts on the one name it is given, whatever characters the name holds, on every store.

``rm_file`` through magicfs was ``rm``, which expands fsspec's glob characters:
``rm_file("bkt/a[1].txt")`` deleted ``a1.txt`` and kept ``a[1].txt``, and
``rm_file("bkt/b*.txt")`` deleted every name the pattern matched. Here each operation
runs on the same names through magicfs and through the plain filesystem, side by side in
two directories of one store, and every object of both is compared after each operation:

* plain paths, through ``magicfs.install()``'s class and through a ``MagicFileSystem``
  made around the store: the outcome (value or exception) and the objects left must be
  the plain filesystem's, for the single-path methods and for the multi-path ones (whose
  patterns expand as the store's do). A single-path method must also leave every other
  name's object as it was, whatever the plain filesystem does;
* task paths: what the task sees of its files (names, sizes) after each operation, and
  what job commit publishes, must be what the same operations left in a plain directory
  of the store (the task-path contract, docs/filesystem.md); reads of a deferred store's
  task files are refused there, as the contract says.

The names hold ``[``, ``]``, ``*``, ``?``, ``{``, ``}``, spaces, ``%``, ``+``, ``=`` and
non-ASCII letters, and each such name has a sibling its pattern would match. Stores: S3
on moto, Ceph RGW and SeaweedFS, Azure Blob on Azurite, GCS on its emulator, a local disk,
memory (and the in-process deferred store for task paths).
:func:`test_generated_names_and_operations` draws names and operations with hypothesis.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from glob import has_magic
from pathlib import Path
from typing import Any

import fsspec
import pytest
from helpers.s3_targets import store_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import magicfs
from magicfs import MagicFileSystem
from magicfs.errors import DeferredFileError

#: Each name the operations are applied to, with the siblings its pattern matches.
TARGETS = {
    "a[1].txt": ["a1.txt"],
    "b*.txt": ["bx.txt"],
    "c?.txt": ["cz.txt"],
    "[ab].txt": ["a.txt"],
    "d{1,2}.txt": ["d1.txt"],
    # "%20" and "+" decoded as URL text would both be spaces
    "e f%20g+h=é.txt": ["e f g h=é.txt"],
}
NAMES = sorted({*TARGETS, *(s for siblings in TARGETS.values() for s in siblings)})


def content(name: str) -> bytes:
    """Each object's own bytes (sizes differ between a name and its siblings)."""
    return f"<{name}>".encode()


# --- the stores --------------------------------------------------------------------------


@dataclass
class Store:
    """One store: its own filesystem, its options, and a fresh directory on it."""

    kind: str
    protocol: str
    options: dict[str, Any]
    root: str  # a fresh directory of this test
    url: str  # the root's URL
    #: The store's own filesystem: the plain side of every comparison, and what looks at
    #: the objects. fsspec's instance cache gives every test of a server the same one (a
    #: new S3 client costs 0.1-0.4 s); its listings cache is dropped before each look.
    fs: Any

    def objects(self, directory: str, with_bytes: bool = False) -> dict[str, Any]:
        """Every object below ``directory``: relative name -> size (or its bytes)."""
        return self.both(directory, with_bytes=with_bytes)[0]

    def both(self, *directories: str, with_bytes: bool = False) -> list[dict[str, Any]]:
        """:meth:`objects` of sibling ``directories``, from one listing of their parent."""
        parent = directories[0].rpartition("/")[0]
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(parent if len(directories) > 1 else directories[0], detail=True)
        except FileNotFoundError:
            found = {}
        listed: list[dict[str, Any]] = [{} for _ in directories]
        for path, entry in sorted(found.items()):
            for objects, directory in zip(listed, directories, strict=True):
                if entry.get("type") == "file" and path.startswith(directory + "/"):
                    relative = path[len(directory) + 1 :]
                    objects[relative] = self.fs.cat_file(path) if with_bytes else entry["size"]
        return listed

    def populate(self, directory: str, names: list[str]) -> None:
        if self.protocol == "file":
            os.makedirs(directory, exist_ok=True)
        for name in names:
            self.fs.pipe_file(f"{directory}/{name}", content(name))

    def put_source(self, path: str) -> str:
        """A plain file to copy from, at ``path``."""
        if self.protocol == "file":
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self.fs.pipe_file(path, b"the source's bytes")
        return path


S3_KINDS = ("moto", "rgw", "seaweed")
STORES = [
    "moto",
    pytest.param("rgw", marks=pytest.mark.rgw),
    pytest.param("seaweed", marks=pytest.mark.seaweed),
    "azure",
    "gcs",
    "local",
    "memory",
]


def make_store(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> Store:
    if kind in S3_KINDS:
        import s3fs

        options = dict(store_fixture(request, kind, "server").storage_options)
        bucket = store_fixture(request, kind, "bucket")

        return Store(kind, "s3", options, bucket, f"s3://{bucket}", s3fs.S3FileSystem(**options))
    if kind == "azure":
        import adlfs

        options = dict(request.getfixturevalue("azurite_server").storage_options)
        container = request.getfixturevalue("azure_container")
        fs = adlfs.AzureBlobFileSystem(**options)
        return Store(kind, "abfs", options, container, f"abfs://{container}", fs)
    if kind == "gcs":
        import gcsfs

        options = dict(request.getfixturevalue("gcs_server").storage_options)
        bucket = request.getfixturevalue("gcs_bucket")
        return Store(kind, "gs", options, bucket, f"gs://{bucket}", gcsfs.GCSFileSystem(**options))
    if kind == "local":
        from fsspec.implementations.local import LocalFileSystem

        root = str(tmp_path / "store")
        os.makedirs(root)
        return Store(kind, "file", {}, root, f"file://{root}", LocalFileSystem())
    assert kind == "memory"
    from fsspec.implementations.memory import MemoryFileSystem

    root = f"/literal-{uuid.uuid4().hex}"
    request.addfinalizer(lambda: MemoryFileSystem().rm(root, recursive=True))
    return Store(kind, "memory", {}, root, f"memory://{root}", MemoryFileSystem())


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store(request, request.param, tmp_path)


@pytest.fixture
def installed() -> Iterator[None]:
    """``magicfs.install()`` for one test; always undone."""
    magicfs.install()
    yield
    magicfs.uninstall()


def magic_fs(store: Store, flavour: str) -> Any:
    """The filesystem a user of magicfs has on ``store``: ``installed``, what
    ``fsspec.filesystem(protocol)`` builds after ``magicfs.install()`` (the ``installed``
    fixture); ``wrapper``, a ``MagicFileSystem`` made around the store's filesystem. Both
    call the same (cached) filesystem of the store as the plain side: what differs
    between the sides is magicfs alone."""
    if flavour == "wrapper":
        return MagicFileSystem(fs=store.fs)
    fs = fsspec.filesystem(store.protocol, **store.options)
    # install() registers a subclass of the store's own class (filesystems/installed.py)
    installed_as = getattr(type(fs), "wrapped_class", None)
    assert installed_as is not None and isinstance(fs, installed_as), (
        f"install() did not register its class for {store.protocol}"
    )
    return fs


# --- the operations ------------------------------------------------------------------------


@dataclass
class Side:
    """One side of a comparison: a filesystem and its directory (and a local one)."""

    fs: Any
    root: str
    local: Path
    source: str  # a plain file to copy from
    counter: list[int] = field(default_factory=lambda: [0])

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def relative(self, paths: Any) -> Any:
        """Paths in a result, relative to the side's directory (comparable across sides)."""
        strip = len(self.root) + 1
        if isinstance(paths, dict):
            return {k[strip:]: v for k, v in sorted(paths.items())}
        return sorted(p[strip:] for p in paths)

    def local_file(self) -> str:
        self.counter[0] += 1
        return str(self.local / f"got-{self.counter[0]}")


def _done(result: Any) -> None:
    """Nothing to compare: what a write or delete returns is the store's answer (s3fs's
    carries a request id), which only says it was done."""


def _read(side: Side, name: str) -> bytes:
    with side.fs.open(side.path(name), "rb") as f:
        return bytes(f.read())


def _write(side: Side, name: str) -> None:
    with side.fs.open(side.path(name), "wb") as f:
        f.write(b"opened and written")


def _get_file(side: Side, name: str) -> bytes:
    local = side.local_file()
    side.fs.get_file(side.path(name), local)
    return Path(local).read_bytes()


def _info(side: Side, name: str) -> tuple[str, int]:
    info = side.fs.info(side.path(name))
    return info["type"], info["size"]


def _cat(side: Side, name: str) -> Any:
    found = side.fs.cat(side.path(name))
    return side.relative(found) if isinstance(found, dict) else found


#: Single-path methods: the name is literal. Each returns what both sides must agree on.
SINGLE: dict[str, Callable[[Side, str], Any]] = {
    "rm_file": lambda s, n: _done(s.fs.rm_file(s.path(n))),
    "cat_file": lambda s, n: s.fs.cat_file(s.path(n)),
    "head": lambda s, n: s.fs.head(s.path(n), 4),
    "open rb": _read,
    "open wb": _write,
    "pipe_file": lambda s, n: _done(s.fs.pipe_file(s.path(n), b"piped")),
    "write_text": lambda s, n: _done(s.fs.write_text(s.path(n), "text")),
    "put_file": lambda s, n: _done(s.fs.put_file(str(s.local / "upload.bin"), s.path(n))),
    "get_file": _get_file,
    "cp_file from": lambda s, n: _done(s.fs.cp_file(s.path(n), s.path(f"copy of {n}"))),
    "cp_file to": lambda s, n: _done(s.fs.cp_file(s.source, s.path(n))),
    "info": _info,
    "exists": lambda s, n: s.fs.exists(s.path(n)),
    "isfile": lambda s, n: s.fs.isfile(s.path(n)),
    "size": lambda s, n: s.fs.size(s.path(n)),
    "touch": lambda s, n: _done(s.fs.touch(s.path(n))),
}
#: Multi-path methods: patterns, expanded as the store's own methods expand them.
MULTI: dict[str, Callable[[Side, str], Any]] = {
    "rm": lambda s, n: _done(s.fs.rm(s.path(n))),
    "mv": lambda s, n: _done(s.fs.mv(s.path(n), s.path(f"moved {n}"))),
    "cat": _cat,
    "glob": lambda s, n: s.relative(s.fs.glob(s.path(n))),
    "expand_path": lambda s, n: s.relative(s.fs.expand_path(s.path(n))),
}


def outcome(operation: Callable[..., Any], side: Side, *names: str) -> tuple[str, Any]:
    """What ``operation`` returned, or the type of what it raised (compared by name)."""
    try:
        return "returned", operation(side, *names)
    except Exception as error:  # the same failure on both sides is the same outcome
        return "raised", type(error).__name__


def sides(store: Store, fs: Any, tmp_path: Path) -> tuple[Side, Side]:
    """The plain side (the store's filesystem) and magicfs's (``fs``), each with its
    directory holding every name and a source to copy from, and a local directory."""
    made = []
    for label, side_fs in (("plain", store.fs), ("magic", fs)):
        local = tmp_path / label
        local.mkdir()
        (local / "upload.bin").write_bytes(b"uploaded from disk")
        directory = f"{store.root}/{label}"
        store.populate(directory, NAMES)
        made.append(Side(side_fs, directory, local, store.put_source(f"{directory}/source.bin")))
    return made[0], made[1]


def others_unchanged(before: dict[str, Any], after: dict[str, Any], name: str) -> bool:
    """Every object of the population but ``name`` is still there, with its size."""
    return all(after.get(n) == before[n] for n in before if n != name)


# --- plain paths ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", sorted(SINGLE))
def test_single_path_methods_act_on_the_literal_name(
    store: Store, installed: None, method: str, tmp_path: Path
) -> None:
    check_single_path_method(store, magic_fs(store, "installed"), method, tmp_path)


@pytest.fixture(params=["moto", "local", "memory"])
def wrapped_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The stores a ``MagicFileSystem`` made around the store's filesystem is tested on
    too: it differs from the installed class by its ``_strip_protocol`` alone."""
    return make_store(request, request.param, tmp_path)


@pytest.mark.parametrize("method", sorted(SINGLE))
def test_single_path_methods_of_a_wrapper_act_on_the_literal_name(
    wrapped_store: Store, method: str, tmp_path: Path
) -> None:
    store = wrapped_store
    check_single_path_method(store, magic_fs(store, "wrapper"), method, tmp_path)


def check_single_path_method(store: Store, fs: Any, method: str, tmp_path: Path) -> None:
    """``method`` on every target name through ``fs`` and the plain filesystem: the same
    outcome, the same objects after each call, every other name's object untouched."""
    plain, magic = sides(store, fs, tmp_path)
    operation = SINGLE[method]
    before = store.objects(magic.root)
    for name in TARGETS:
        expected = outcome(operation, plain, name)
        got = outcome(operation, magic, name)
        assert got == expected, f"{method}({name!r}) through magicfs"
        after, after_plain = store.both(magic.root, plain.root)
        assert after == after_plain, f"objects after {method}({name!r})"
        assert others_unchanged(before, after, name), f"{method}({name!r}) changed another object"
        before = after
    after, after_plain = store.both(magic.root, plain.root, with_bytes=True)
    assert after == after_plain


@pytest.mark.parametrize("method", sorted(set(MULTI) - {"mv"}))
def test_multi_path_methods_expand_patterns_as_the_store(
    store: Store, installed: None, method: str, tmp_path: Path
) -> None:
    check_multi_path_method(store, method, tmp_path)


@pytest.fixture(params=[p for p in STORES if p != "gcs"])
def mv_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Not GCS: gcsfs's own ``mv`` waits half a minute for each name it cannot move, and
    on a plain path magicfs calls it as it is (its task view moves by
    :mod:`magicfs.stores.gcs_moves`)."""
    return make_store(request, request.param, tmp_path)


def test_mv_expands_patterns_as_the_store(mv_store: Store, installed: None, tmp_path: Path) -> None:
    check_multi_path_method(mv_store, "mv", tmp_path)


def check_multi_path_method(store: Store, method: str, tmp_path: Path) -> None:
    """``method`` on every target name, as a pattern, through magicfs's installed class
    and the plain filesystem: the same outcome, the same objects after each call."""
    plain, magic = sides(store, magic_fs(store, "installed"), tmp_path)
    operation = MULTI[method]
    for name in TARGETS:
        expected = outcome(operation, plain, name)
        assert outcome(operation, magic, name) == expected, f"{method}({name!r}) through magicfs"
        after, after_plain = store.both(magic.root, plain.root)
        assert after == after_plain, f"objects after {method}({name!r})"
    after, after_plain = store.both(magic.root, plain.root, with_bytes=True)
    assert after == after_plain


def test_rm_file_deletes_the_named_object_only_as_first_reported(
    store: Store, installed: None
) -> None:
    """The data loss as first reported: after ``install()``, ``rm_file`` of ``a[1].txt``,
    ``b*.txt`` and ``c?.txt`` deletes those three objects and keeps ``a1.txt``, ``bx.txt``
    and ``cz.txt``."""
    # The bucket itself on S3, as first reported. Elsewhere a directory: adlfs's own
    # pipe_file of "a[1].txt" at a container's top level writes the blob, then raises a
    # ValueError ("'1' does not appear to be an IPv4 or IPv6 address"), with or without
    # magicfs.
    directory = store.root if store.protocol == "s3" else f"{store.root}/issue"
    store.populate(directory, ["a[1].txt", "a1.txt", "b*.txt", "bx.txt", "c?.txt", "cz.txt"])
    fs = magic_fs(store, "installed")
    for name in ["a[1].txt", "b*.txt", "c?.txt"]:
        fs.rm_file(f"{directory}/{name}")
    assert sorted(store.objects(directory)) == ["a1.txt", "bx.txt", "cz.txt"]


# --- task paths ----------------------------------------------------------------------------

TASK_STORES = [
    "moto",
    "moto-marked",  # intent markers at every task file (a destination shared with others)
    pytest.param("rgw", marks=pytest.mark.rgw),
    pytest.param("seaweed", marks=pytest.mark.seaweed),
    "azure",
    "azure-block-list",
    "gcs",
    "local",
    "memory",
    "mem-deferred",
]


@dataclass
class TaskSide:
    """A task attempt of a fresh job on the store, and a plain directory beside it."""

    store: Store
    committer: Any
    task: Any
    reference: Side  # the plain directory the same operations run on
    local: Path

    @property
    def fs(self) -> Any:
        return self.committer.fs

    @property
    def deferred(self) -> bool:
        return bool(self.fs.deferred_writes)

    def side(self) -> Side:
        """The task as a :class:`Side`: its paths are the task's paths."""
        return Side(self.fs, self.task.work_path, self.local, self.reference.source)

    def seen(self) -> dict[str, int]:
        """The task's files as the task sees them: relative name -> size."""
        work = self.task.work_path
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(work, detail=True)
        except FileNotFoundError:
            return {}
        return {p[len(work) + 1 :]: e["size"] for p, e in found.items() if e["type"] == "file"}

    def published(self) -> dict[str, bytes]:
        """Commit the task and the job; the files published and their bytes."""
        self.committer.commit_job([self.committer.commit_task(self.task)])
        found = self.store.objects(self.committer.dest, with_bytes=True)
        return {k: v for k, v in found.items() if not k.startswith(("_", "."))}


@pytest.fixture(params=TASK_STORES)
def task_side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TaskSide]:
    yield from task_side_on(request, request.param, tmp_path)


@pytest.fixture(params=["moto", "azure-block-list", "mem-deferred"])
def deferred_task_side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TaskSide]:
    """A task on each kind of deferred store (S3 uploads, Azure blocks, in-process)."""
    yield from task_side_on(request, request.param, tmp_path)


def task_side_on(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> Iterator[TaskSide]:
    """A :class:`TaskSide` on the store ``kind``, every name written in the task and in
    the plain directory; the job aborted afterwards unless the test committed it."""
    if kind == "mem-deferred":
        bucket = f"t-{uuid.uuid4().hex}"
        committer = magicfs.committer_for(f"mem-deferred://{bucket}/out")
        raw = committer.store_fs
        store = Store(kind, "mem-deferred", {}, bucket, f"mem-deferred://{bucket}", raw)
    else:
        store = make_store(request, kind.partition("-")[0], tmp_path)
        options: dict[str, Any] = {"fs": store.fs}
        if kind.startswith("azure"):
            options["committer"] = "block-list" if kind.endswith("block-list") else "manifest"
        if kind.endswith("-marked"):
            options["intent_markers"] = "always"
        committer = magicfs.committer_for(f"{store.url}/out", **options)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    local = tmp_path / "task-local"
    local.mkdir()
    (local / "upload.bin").write_bytes(b"uploaded from disk")
    reference_local = tmp_path / "reference-local"
    reference_local.mkdir()
    (reference_local / "upload.bin").write_bytes(b"uploaded from disk")
    directory = f"{store.root}/reference"
    source = store.put_source(f"{store.root}/sources/source.bin")
    reference = Side(store.fs, directory, reference_local, source)
    store.populate(reference.root, NAMES)
    side = TaskSide(store, committer, task, reference, local)
    for name in NAMES:
        side.fs.pipe_file(task.path(name), content(name))
    yield side
    try:
        committer.abort_job()
    except Exception:  # the test committed the job
        committer.cleanup_job()


def test_rm_file_of_a_deferred_task_path_names_one_file(deferred_task_side: TaskSide) -> None:
    """``rm_file`` of a name the task has no file at, or of a directory of task files,
    raises and deletes nothing: ``rm(path, recursive=True)`` deletes a directory."""
    ts = deferred_task_side
    ts.fs.pipe_file(ts.task.path("dir/x.txt"), b"below")
    with pytest.raises(FileNotFoundError):
        ts.fs.rm_file(ts.task.path("[a].txt"))  # no such file; as a pattern: a.txt
    with pytest.raises(IsADirectoryError, match=r"rm\(path, recursive=True\)"):
        ts.fs.rm_file(ts.task.path("dir"))
    expected = {name: content(name) for name in NAMES} | {"dir/x.txt": b"below"}
    assert ts.published() == expected


#: Operations on task paths: the task-path contract's rows for names (reads of a deferred
#: store's task files are refused; everything else is as on the plain directory).
TASK_OPERATIONS: dict[str, Callable[[Side, str], Any]] = {
    **{
        k: SINGLE[k]
        for k in (
            "rm_file",
            "cat_file",
            "open rb",
            "open wb",
            "pipe_file",
            "put_file",
            "get_file",
            "info",
            "exists",
            "isfile",
            "size",
            "touch",
        )
    },
    "cp_file into the task": SINGLE["cp_file to"],
    "rm": MULTI["rm"],
}
_READS = {"cat_file", "open rb", "get_file"}


@pytest.mark.parametrize("method", sorted(TASK_OPERATIONS))
def test_task_path_methods_act_on_the_literal_name(task_side: TaskSide, method: str) -> None:
    ts = task_side
    operation = TASK_OPERATIONS[method]
    task, reference = ts.side(), ts.reference
    for name in TARGETS:
        expected = outcome(operation, reference, name)
        if method in _READS and ts.deferred:
            expected = ("raised", DeferredFileError.__name__)
        assert outcome(operation, task, name) == expected, f"{method}({name!r}) on a task path"
        assert ts.seen() == ts.store.objects(reference.root), (
            f"the task's files after {method}({name!r})"
        )
    assert ts.published() == ts.store.objects(reference.root, True)


# --- generated names and operations ------------------------------------------------------

#: Characters whose mix makes names that are patterns of one another, and the specials.
ALPHABET = "a1[]*?{} %+=é"


@st.composite
def generated_names(draw: Any) -> list[str]:
    """Names, and for each a pattern of it beside it: one character of it made ``?``,
    ``*`` or a ``[...]`` class (``a1`` and ``a?``), so that a call on the pattern's name
    has a sibling to hit when the name is not taken literally."""
    bases = draw(st.lists(st.text(ALPHABET, min_size=1, max_size=3), min_size=1, max_size=3))
    names = set(bases)
    for base in bases:
        at = draw(st.integers(0, len(base) - 1))
        glob = draw(st.sampled_from(["?", "*", f"[{base[at]}]"]))
        names.add(base[:at] + glob + base[at + 1 :])
    return sorted(names)


#: (method, the name it acts on, a second name: the target of ``cp_file`` and ``mv``).
GENERATED: dict[str, Callable[[Side, str, str], Any]] = {
    **{k: (lambda op: lambda s, n, _: op(s, n))(SINGLE[k]) for k in SINGLE if "cp_file" not in k},
    "cp_file": lambda s, n, m: _done(s.fs.cp_file(s.path(n), s.path(m))),
    **{k: (lambda op: lambda s, n, _: op(s, n))(MULTI[k]) for k in ("rm", "glob", "cat")},
    "mv": lambda s, n, m: _done(s.fs.mv(s.path(n), s.path(m))),
}
#: Calls that write or delete come up twice as often as look-ups: they are what can
#: change another name's object.
_CHANGES = ("rm_file", "pipe_file", "open wb", "touch", "cp_file", "mv", "rm", "put_file")
steps = st.lists(
    st.tuples(
        st.sampled_from(sorted(GENERATED) + sorted(_CHANGES)),
        st.integers(0, 5),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=8,
)


def generated_settings(examples: int) -> Any:
    """Deterministic (no example database, derandomized) and bounded: the same examples
    on every run, a few seconds per store."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@pytest.fixture(params=["memory", "local"])
def generated_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store(request, request.param, tmp_path)


@generated_settings(examples=60)
@given(names=generated_names(), calls=steps)
def test_generated_names_and_operations(
    generated_store: Store, installed: None, tmp_path_factory: Any, names: list[str], calls: Any
) -> None:
    """Plain and installed filesystems side by side: after each generated call, the same
    outcome and the same objects (single-path methods literal, multi-path ones as the store)."""
    check_generated(generated_store, tmp_path_factory, names, calls)


@generated_settings(examples=12)
@given(names=generated_names(), calls=steps)
def test_generated_names_and_operations_on_s3(
    request: pytest.FixtureRequest,
    installed: None,
    tmp_path_factory: Any,
    names: list[str],
    calls: Any,
) -> None:
    """The same on S3 (moto), fewer examples: each costs requests."""
    store = make_store(request, "moto", tmp_path_factory.mktemp("s3"))
    check_generated(store, tmp_path_factory, names, calls)


def check_generated(store: Store, tmp_path_factory: Any, names: list[str], calls: Any) -> None:
    root = f"{store.root}/{uuid.uuid4().hex}"
    local = tmp_path_factory.mktemp("generated")
    fs = magic_fs(store, "installed")
    plain, magic = (
        Side(side_fs, f"{root}/{label}", local, "")
        for label, side_fs in (("plain", store.fs), ("magic", fs))
    )
    (local / "upload.bin").write_bytes(b"uploaded from disk")
    for side in (plain, magic):
        store.populate(side.root, names)
        side.source = store.put_source(f"{side.root}/source.bin")
    for method, first, second in calls:
        name, other = names[first % len(names)], names[second % len(names)]
        expected = outcome(GENERATED[method], plain, name, other)
        got = outcome(GENERATED[method], magic, name, other)
        assert got == expected, f"{method}({name!r}, {other!r}) through magicfs"
        after, after_plain = store.both(magic.root, plain.root)
        assert after == after_plain, f"objects after {method}({name!r}, {other!r})"


@pytest.fixture(params=["memory", "mem-deferred"])
def generated_task_store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@generated_settings(examples=60)
@given(names=generated_names(), calls=steps)
def test_generated_names_on_task_paths(
    generated_task_store: str, tmp_path_factory: Any, names: list[str], calls: Any
) -> None:
    """A task's files against a plain directory: after each generated write, delete or
    look-up, what the task sees is what the plain directory holds; job commit publishes it."""
    kind = generated_task_store
    bucket = f"t-{uuid.uuid4().hex}"
    committer = magicfs.committer_for(f"{kind}://{bucket}/out")
    raw = committer.store_fs
    store = Store(kind, kind, {}, bucket, f"{kind}://{bucket}", raw)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    local = tmp_path_factory.mktemp("generated-task")
    (local / "upload.bin").write_bytes(b"uploaded from disk")
    directory = f"/{bucket}/reference" if kind == "memory" else f"{bucket}/reference"
    reference = Side(raw, directory, local, "")  # (no copies into the task here)
    ts = TaskSide(store, committer, task, reference, local)
    store.populate(reference.root, names)
    for name in names:
        ts.fs.pipe_file(task.path(name), content(name))
    # Not mv and cp_file between task files (refused on a deferred store, by the contract)
    # nor, there, reads: refused whether or not the file exists, checked above.
    left_out = {"mv", "cp_file", *(("cat", "head", *_READS) if ts.deferred else ())}
    task_operations = {k: GENERATED[k] for k in GENERATED if k not in left_out}
    try:
        for method, first, _ in calls:
            if method not in task_operations:
                continue
            seen = ts.seen()
            name = names[first % len(names)]
            operation = task_operations[method]
            expected = outcome(operation, reference, name, "")
            got = outcome(operation, ts.side(), name, "")
            if ts.deferred and method == "rm" and not has_magic(name) and name not in seen:
                # S3's deletes are idempotent: a deferred view's rm of a name it does not
                # have is silent, as s3fs's is; the in-process store's own rm raises.
                expected = ("returned", None)
            assert got == expected, f"{method}({name!r}) on a task path"
            assert ts.seen() == store.objects(reference.root), (
                f"the task's files after {method}({name!r})"
            )
        assert ts.published() == store.objects(reference.root, True)
    finally:
        raw.rm(f"/{bucket}" if kind == "memory" else bucket, recursive=True)
