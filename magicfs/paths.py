"""The magic path grammar: which paths are "magic" and where their data finally lands.

A path is *magic* when one of its elements is a **magic element**: exactly ``__magic``
(the layout of the seed documents and Hadoop before 3.4) or anything starting with
``__magic_job-`` (Hadoop 3.4+, one directory per job). A file written under a magic
path is not created where it is written; its bytes are aimed at its *final
destination*:

* the elements before the first magic element (the job's destination directory), plus
* the elements after the first ``__base`` below the magic element, or, when there is
  no ``__base``, only the file name.

::

    s3://bkt/out/__magic_job-7/job-7/00/tasks/attempt_1/__base/year=2024/p.parquet
      -> s3://bkt/out/year=2024/p.parquet
    s3://bkt/out/__magic/job-7/task_01/p.parquet  -> s3://bkt/out/p.parquet

Decision (differs from Hadoop >= 3.4, which treats a bare ``__magic`` as an ordinary
directory): magicfs accepts both spellings, as ``API.md`` requires, so code written
against the seed layout keeps working.

Everything here is pure string work: no I/O, no filesystem. Paths keep their protocol
(``s3://``), a leading ``/`` or neither, and come back in the same form. Names are never
decoded or normalised, so spaces and unicode survive unchanged (HADOOP-17112).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .names import (
    BASE,
    JOB_DIR_PREFIX,
    MAGIC,
    MAGIC_JOB_PREFIX,
    MARKER_SUFFIX,
    PENDING_SUFFIX,
    PENDINGSET_SUFFIX,
    STAGED_PREFIX,
    STAGED_SUFFIX,
    TASKS_DIR,
    TOUCHED_DIR,
)

RECORD_SUFFIXES = (PENDING_SUFFIX, PENDINGSET_SUFFIX)

T = TypeVar("T")

_FORBIDDEN_ELEMENTS = {"", ".", ".."}


def is_magic_element(name: str) -> bool:
    """True for ``__magic`` and for ``__magic_job-<anything>``."""
    return name == MAGIC or name.startswith(MAGIC_JOB_PREFIX)


def _split(path: str) -> tuple[str, list[str]]:
    """Split ``path`` into its root (``s3://``, ``/`` or ``""``) and its elements.

    One trailing ``/`` is dropped so that a directory may be named either way.
    Interior empty elements are kept (as ``""``) so that callers can reject them.
    """
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, not {type(path).__name__}")
    if not path:
        raise ValueError("empty path")
    root = ""
    rest = path
    if "://" in rest:
        protocol, rest = rest.split("://", 1)
        root = protocol + "://"
    if rest.startswith("/"):
        root += "/"
        rest = rest[1:]
    if rest.endswith("/"):
        rest = rest[:-1]
    return root, (rest.split("/") if rest else [])


def split_path_elements(path: str) -> list[str]:
    """The elements of ``path``, without its root; empty elements are dropped.

    ``"/"`` and ``"//"`` give ``[]``; ``"/a/b/c/"`` gives ``["a", "b", "c"]``.
    """
    return [name for name in _split(path)[1] if name]


def _magic_index(elements: list[str]) -> int | None:
    return next((i for i, name in enumerate(elements) if is_magic_element(name)), None)


def magic_parents(elements: list[str]) -> list[str]:
    """Elements before the first magic element (all of them if there is none)."""
    index = _magic_index(elements)
    return list(elements if index is None else elements[:index])


def magic_children(elements: list[str]) -> list[str]:
    """Elements after the first magic element (none if there is no magic element)."""
    index = _magic_index(elements)
    return [] if index is None else list(elements[index + 1 :])


def last_element(elements: list[str]) -> str:
    """The last element; ``ValueError`` for an empty list."""
    if not elements:
        raise ValueError("empty path has no last element")
    return elements[-1]


def final_destination_elements(elements: list[str]) -> list[str]:
    """:func:`final_destination` on a list of elements."""
    index = _magic_index(elements)
    if index is None:
        return list(elements)
    children = elements[index + 1 :]
    if not children:
        raise ValueError(f"no path found under the magic element {elements[index]!r}")
    if BASE in children:
        below_base = children[children.index(BASE) + 1 :]
        if not below_base:
            raise ValueError(f"nothing below {BASE!r} under the magic element")
        return [*elements[:index], *below_base]
    return [*elements[:index], children[-1]]


@dataclass(frozen=True)
class MagicPath:
    """A parsed magic path. Build it with :func:`parse_magic_path`."""

    root: str
    parents: tuple[str, ...]
    magic: str
    children: tuple[str, ...]

    @property
    def destination_dir(self) -> str:
        """The job's destination: everything before the magic element."""
        return self.root + "/".join(self.parents)

    @property
    def magic_dir(self) -> str:
        """The magic directory itself, e.g. ``s3://bkt/out/__magic_job-7``."""
        return self.root + "/".join((*self.parents, self.magic))

    @property
    def job_id(self) -> str | None:
        """The job id named by the path, if any.

        ``__magic_job-<id>/...`` names it in the magic element; the legacy
        ``__magic/job-<id>/...`` layout in the first child.
        """
        if self.magic.startswith(MAGIC_JOB_PREFIX):
            return self.magic[len(MAGIC_JOB_PREFIX) :] or None
        if self.children and self.children[0].startswith(JOB_DIR_PREFIX):
            return self.children[0][len(JOB_DIR_PREFIX) :] or None
        return None

    @property
    def task_attempt_id(self) -> str | None:
        """The task attempt id when the path follows the committer layout.

        Layout: ``<magic>/job-<id>/<NN>/tasks/<attempt id>/...``.
        """
        if len(self.children) > 3 and self.children[2] == TASKS_DIR:
            return self.children[3]
        return None

    @property
    def relative_destination(self) -> tuple[str, ...]:
        """Elements of the final destination below :attr:`destination_dir`."""
        elements = [*self.parents, self.magic, *self.children]
        return tuple(final_destination_elements(elements)[len(self.parents) :])

    @property
    def destination(self) -> str:
        """The final destination of a file written at this path."""
        return self.root + "/".join((*self.parents, *self.relative_destination))

    def __str__(self) -> str:
        return self.root + "/".join((*self.parents, self.magic, *self.children))


def split_magic_path(path: str) -> MagicPath | None:
    """Split ``path`` at its first magic element; ``None`` if it has none.

    Unlike :func:`parse_magic_path` the path need not name a file (directories under a
    magic element are fine), but ``.``, ``..`` and empty elements are still refused.
    """
    root, elements = _split(path)
    index = _magic_index(elements)
    if index is None:
        return None
    bad = [name for name in elements if name in _FORBIDDEN_ELEMENTS]
    if bad:
        raise ValueError(f"magic path {path!r} has a forbidden element {bad[0]!r}")
    return MagicPath(
        root=root,
        parents=tuple(elements[:index]),
        magic=elements[index],
        children=tuple(elements[index + 1 :]),
    )


def parse_magic_path(path: str) -> MagicPath | None:
    """Parse a magic *file* path; ``None`` if it has no magic element.

    Raises ``ValueError`` for a magic path that cannot name a file safely: ``.``,
    ``..`` or empty elements anywhere, nothing under the magic element, nothing after
    ``__base``, or a destination that would itself be magic.
    """
    magic_path = split_magic_path(path)
    if magic_path is None:
        return None
    if not magic_path.children:
        raise ValueError(f"no file named under the magic element in {path!r}")
    relative = magic_path.relative_destination
    if any(is_magic_element(name) for name in relative):
        raise ValueError(f"the destination of {path!r} would itself be a magic path")
    return magic_path


def is_magic_path(path: str) -> bool:
    """True if some element of ``path`` is a magic element (``__magic``, ``__magic_job-*``)."""
    _, elements = _split(path)
    return any(is_magic_element(name) for name in elements)


def final_destination(path: str) -> str:
    """Where a file written at ``path`` becomes visible after job commit.

    A path that is not magic is its own destination. Raises ``ValueError`` for magic
    paths that name no file (``a/__magic``, ``a/__magic/__base``) or are unsafe.
    """
    magic_path = parse_magic_path(path)
    if magic_path is None:
        return path
    return magic_path.destination


def is_record_file(path: str) -> bool:
    """Commit records (``*.pending``, ``*.pendingset``) are written normally, even under magic."""
    return path.endswith(RECORD_SUFFIXES)


def is_deferred_write(path: str) -> bool:
    """True when a write to ``path`` must be deferred: magic, and not a commit record."""
    return is_magic_path(path) and not is_record_file(path)


def staged_name(name: str) -> str:
    """One element of a task's file path as a running job stores what stands for it:
    between :data:`~magicfs.names.STAGED_PREFIX` and :data:`~magicfs.names.STAGED_SUFFIX`
    (``year=2024`` -> ``_year=2024.magicfs-task``), so that no glob of the destination's
    data by suffix, partition or file-name prefix reaches it."""
    return STAGED_PREFIX + name + STAGED_SUFFIX


def unstaged_name(name: str) -> str:
    """:func:`staged_name` undone; an element not in that form (0.1.0's, Hadoop's, another
    writer's) keeps its name."""
    if name.startswith(STAGED_PREFIX) and name.endswith(STAGED_SUFFIX):
        return name[len(STAGED_PREFIX) : -len(STAGED_SUFFIX)]
    return name


def stored_pattern(pattern: str) -> str:
    """A glob pattern of task files (``<task dir>/__base/year=*/p*.csv``) as a pattern of
    what stands for them (``<task dir>/__base/_year=*.magicfs-task/_p*.csv.magicfs-task``;
    add the marker's or record's suffix): each element staged but ``**``."""
    return _staged(pattern, file=True, keep={"**"})


def _staged(path: str, file: bool, keep: frozenset[str] | set[str] = frozenset()) -> str:
    """``path`` (a task path, a file's or a directory's) with the elements that reach its
    final destination staged: those below ``__base``, or, without ``__base``, a file's
    name (a directory there reaches nothing)."""
    magic = split_magic_path(path)
    if magic is None:
        return path
    children = list(magic.children)
    if BASE in children:
        start = children.index(BASE) + 1
    else:
        start = len(children) - 1 if file and children else len(children)
    below = [name if name in keep else staged_name(name) for name in children[start:]]
    staged = [*children[:start], *below]
    return str(MagicPath(magic.root, magic.parents, magic.magic, tuple(staged)))


def stored_dir(path: str) -> str:
    """Where the store keeps what stands for the files below task directory ``path``."""
    return _staged(path, file=False)


def task_path(path: str) -> str:
    """A path found in a job's magic tree as the task named it: every element below the
    magic element in :func:`staged_name`'s form unstaged (the suffix of a marker or
    record, if any, is the caller's to drop first). Other paths come back unchanged."""
    magic = split_magic_path(path)
    if magic is None:
        return path
    children = tuple(unstaged_name(name) for name in magic.children)
    return str(MagicPath(magic.root, magic.parents, magic.magic, children))


def marker_path(path: str) -> str:
    """The intent marker of deferred task file ``path``: the path with the elements that
    reach its destination staged (:func:`staged_name`) and
    :data:`~magicfs.names.MARKER_SUFFIX` added
    (``__base/_year=2024.magicfs-task/_p.parquet.magicfs-task.magicfs-marker``): no
    glob of data (``dest/**/*.parquet``, ``dest/**/year=2024/*``, ``dest/**/p*``)
    matches it, nor any partition directory of the job's tree."""
    return _staged(path, file=True) + MARKER_SUFFIX


def marked_file(path: str) -> str | None:
    """The task file a file found in a job's magic tree is the marker of, or ``None``
    (records, and paths outside a magic tree).

    A :func:`marker_path` is this version's marker of its file; 0.1.0 put the marker at
    the task path itself, so any other file that is a deferred write
    (:func:`is_deferred_write`) is its own marker: trees it wrote are still read."""
    if not is_deferred_write(path):
        return None
    file = task_path(path.removesuffix(MARKER_SUFFIX))
    return file if is_deferred_write(file) else None


def task_names(listing: Mapping[str, T]) -> dict[str, T]:
    """A listing of a magic tree with each marker under the name of the file it stands
    for (:func:`marked_file`); records and everything else keep their names."""
    return {marked_file(path) or path: value for path, value in listing.items()}


def pending_file(record: str) -> str:
    """The task file a ``.pending`` record found in a job's tree stands for: this
    version's (:func:`pending_path`), 0.1.0's and Hadoop's (``<task path>.pending``)."""
    return task_path(record.removesuffix(PENDING_SUFFIX))


def pending_records(listing: Iterable[str]) -> dict[str, str]:
    """The ``.pending`` records among ``listing`` (a listing of a job's tree), by the
    task file each stands for (:func:`pending_file`)."""
    return {pending_file(p): p for p in listing if p.endswith(PENDING_SUFFIX)}


def marked_destinations(listing: Iterable[str]) -> set[str]:
    """The destinations named by the markers and ``.pending`` records among ``listing``
    (paths in a job's magic tree, as a listing of it gives them): each such file's
    :func:`final_destination`. Pendingsets, paths outside the magic tree and those that
    name no file (a directory marker, say) name none."""
    found = set()
    for path in listing:
        if path.endswith(PENDINGSET_SUFFIX):
            continue
        file = marked_file(path.removesuffix(PENDING_SUFFIX))
        if file is None:
            continue
        try:
            found.add(final_destination(file))
        except ValueError:  # not a file path (a directory marker, say)
            continue
    return found


def touched_marker(magic_dir: str, attempt_id: str) -> str:
    """The marker saying another process or attempt touched ``attempt_id``'s task
    (:data:`~magicfs.names.TOUCHED_DIR`): ``<magic dir>/_magicfs_job.touched/<task id>``,
    the task id being the attempt id's (``attempt_<job>_0000_m_000007_1`` ->
    ``task_<job>_0000_m_000007``)."""
    task = "task" + attempt_id.removeprefix("attempt").rsplit("_", 1)[0]
    return join(magic_dir, TOUCHED_DIR, task)


def pending_path(path: str) -> str:
    """The ``.pending`` record of task file ``path``: named as its marker is
    (:func:`marker_path`), with Hadoop's :data:`~magicfs.names.PENDING_SUFFIX`, which
    Hadoop's committers find records by."""
    return _staged(path, file=True) + PENDING_SUFFIX


def join(base: str, *parts: str) -> str:
    """Append ``parts`` to ``base`` with single ``/`` separators, keeping ``base``'s root."""
    out = base
    for part in parts:
        part = part.strip("/")
        if part:
            out = out + part if (not out or out.endswith("/")) else f"{out}/{part}"
    return out
