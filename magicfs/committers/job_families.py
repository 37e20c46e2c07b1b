"""What an operator asks of a committer family's jobs: one interface, each family's answers.

``magicfs jobs`` (:mod:`.jobs`, :mod:`magicfs.integrations.cli.jobs`) finds the jobs left
at a destination and tells what each needs next. The questions are the same for every
family whose jobs keep their state in the destination; the answers are each family's
own (where its marker and task records lie, through which calls they are read):

* the jobs at a destination: the ids of the trees there (:meth:`JobFamily.job_trees`)
  and the bucket's job index entries below it (:meth:`JobFamily.indexed`);
* of one job: its marker (:meth:`JobFamily.marker`), its committed task records
  (:meth:`JobFamily.task_records`, :meth:`JobFamily.stored_records`) and whether
  anything of its tree is left (:meth:`JobFamily.tree_left`).

A family is found by the committer's name (:func:`family_of`), never by its type: the
names are what records, the job index and the command line carry. The families are
registered once, in :data:`FAMILIES`; :data:`JOB_COMMITTERS`, the committers
``magicfs jobs`` knows, is read from it.

(The staging and classic committers keep no job state in the destination, so they
are no family here: ``magicfs jobs`` cannot find their jobs.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from ..layouts import job_index
from ..names import MAGIC_JOB_PREFIX, MANIFEST_SUFFIX, PENDINGSET_SUFFIX, TEMPORARY
from ..paths import join
from ..protocol.committer import OutputCommitter
from ..stores.capabilities import speaks_s3
from ..stores.deferred import collect, take
from ..stores.registry import deferred_store_for, operator_view_for
from . import COMMITTERS
from .magic_layout import MagicLayoutCommitter
from .manifest import ManifestCommitter

#: A job marker or index entry is a small JSON document; more than this is not one of ours.
MARKER_BYTES = 1 << 20


@dataclass(frozen=True)
class Indexed:
    """A job a bucket's index entry names: its destination (as the store names it),
    its id and the committer the entry names (``None``: not said, or not read)."""

    destination: str
    job_id: str
    committer: str | None


class JobFamily(Protocol):
    """The operator's questions, as a committer family whose jobs keep their state in
    the destination answers them. ``committer`` arguments are committers of this family
    (:func:`family_of` their name); ``probe`` is the store's default committer at the
    destination asked about (its filesystem and, for a deferred store, its adapter)."""

    #: The ``committer_for`` names of this family's committers (derived from
    #: :data:`magicfs.committers.COMMITTERS`).
    committers: tuple[str, ...]

    def default_committer(self, store_fs: Any) -> str | None:
        """The committer of this family that a job found on ``store_fs`` by its tree
        is taken for, or ``None``: this family keeps no jobs on that store."""
        ...

    def job_trees(self, probe: OutputCommitter) -> list[str]:
        """The ids of this family's job trees directly at the probe's destination."""
        ...

    def indexed(self, probe: OutputCommitter, bucket: str, directory: str) -> list[Indexed]:
        """The bucket's index entries below ``directory``, read the way this family's
        store calls are made (for a probe of this family)."""
        ...

    def marker(self, committer: OutputCommitter) -> dict[str, Any] | None:
        """The job marker's document (``{}`` when it is not JSON), ``None`` if absent."""
        ...

    def task_records(self, committer: OutputCommitter) -> int:
        """How many tasks committed (one record per task, whatever its attempts)."""
        ...

    def records_dir(self, committer: OutputCommitter) -> str:
        """The directory of the job's task records (where a commit message's record is)."""
        ...

    def stored_records(self, committer: OutputCommitter) -> set[str]:
        """The paths of every file in :meth:`records_dir` (one listing)."""
        ...

    def tree_left(self, committer: OutputCommitter) -> bool:
        """Is anything left under the job's own directory? One listing request."""
        ...


def _document(data: bytes | None) -> dict[str, Any] | None:
    """A marker's bytes as its JSON object (``{}``: not one), ``None`` when absent."""
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def listed_names(fs: Any, directory: str) -> list[str]:
    """The names directly in ``directory`` (none when it is not there), listed afresh."""
    fs.invalidate_cache(directory)
    try:
        entries = fs.ls(directory, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [e.rstrip("/").rsplit("/", 1)[-1] for e in entries if e.rstrip("/") != directory]


C = TypeVar("C", bound=OutputCommitter)


def _member(committers: tuple[str, ...], committer: OutputCommitter, cls: type[C]) -> C:
    """``committer`` as its family's class ``cls``: the family is known by the
    committer's name (the one registration says which names configure ``cls``), so this
    checks the name, never the type; a committer of another family is a caller's bug."""
    if committer.name not in committers:
        raise ValueError(f"{committer.name}: not a committer of {', '.join(committers)}")
    return cast(C, committer)


def _configurations(cls: type[OutputCommitter]) -> tuple[str, ...]:
    """The ``committer_for`` names configuring ``cls`` (the one registration)."""
    return tuple(name for name, (klass, _) in COMMITTERS.items() if klass is cls)


class MagicLayoutFamily:
    """``magic``, ``block-list``, ``magic-layout``: the ``__magic_job-<id>/`` trees of a
    deferred store, every call through the job's adapter (retried and paced on S3)."""

    committers = _configurations(MagicLayoutCommitter)

    def _own(self, committer: OutputCommitter) -> MagicLayoutCommitter:
        return _member(self.committers, committer, MagicLayoutCommitter)

    def default_committer(self, store_fs: Any) -> str | None:
        spec = deferred_store_for(store_fs)
        return spec.committer if spec is not None else None

    def job_trees(self, probe: OutputCommitter) -> list[str]:
        own = probe.name in self.committers
        view = operator_view_for(probe.store_fs, self._own(probe).flow.deferred if own else None)
        if view is None:
            return []
        prefix = join(probe.dest, MAGIC_JOB_PREFIX)
        named = view.iterate(view.alist_named(prefix))
        return sorted({path[len(prefix) :] for path in named if path.startswith(prefix)})

    def indexed(self, probe: OutputCommitter, bucket: str, directory: str) -> list[Indexed]:
        """Paged, retried and paced on S3; each entry read for its committer (the store
        may serve more than one), at once on the store's IO loop."""
        deferred = self._own(probe).flow.deferred
        listed = deferred.run(collect(deferred.alist_records(directory)))
        entries = [e for e in (job_index.parse_entry(bucket, path) for path in listed) if e]
        reads = [
            deferred.run_background(deferred.aread_record(e.entry, MARKER_BYTES)) for e in entries
        ]
        return [
            Indexed(entry.destination, entry.job_id, job_index.entry_committer(read.result()))
            for entry, read in zip(entries, reads, strict=True)
        ]

    def marker(self, committer: OutputCommitter) -> dict[str, Any] | None:
        own = self._own(committer)
        return _document(own.flow.deferred.read(own.flow.layout.job_marker, MARKER_BYTES))

    def task_records(self, committer: OutputCommitter) -> int:
        own = self._own(committer)  # every committed attempt has its own record
        records = [p for p in self.stored_records(own) if p.endswith(PENDINGSET_SUFFIX)]
        return len(own.flow.layout.chosen_records([], records))

    def records_dir(self, committer: OutputCommitter) -> str:
        return self._own(committer).flow.layout.tasks_dir

    def stored_records(self, committer: OutputCommitter) -> set[str]:
        deferred = self._own(committer).flow.deferred
        listing = deferred.alist_records(self.records_dir(committer), recursive=False)
        return set(deferred.run(collect(listing)))

    def tree_left(self, committer: OutputCommitter) -> bool:
        own = self._own(committer)
        return bool(
            own.flow.deferred.run(
                take(own.flow.deferred.alist_records(own.flow.layout.magic_dir), 1)
            )
        )


class ManifestFamily:
    """``manifest``: the ``_temporary/<id>/`` trees of a store with rename, read through
    the store's fsspec filesystem."""

    committers = _configurations(ManifestCommitter)

    def _own(self, committer: OutputCommitter) -> ManifestCommitter:
        return _member(self.committers, committer, ManifestCommitter)

    def default_committer(self, store_fs: Any) -> str | None:
        # The manifest committer's own refusal: S3 has no rename.
        return None if speaks_s3(store_fs) else ManifestCommitter.name

    def job_trees(self, probe: OutputCommitter) -> list[str]:
        return [
            name
            for name in listed_names(probe.store_fs, join(probe.dest, TEMPORARY))
            if not name.isdigit()  # FileOutputCommitter's _temporary/<app attempt>
        ]

    def indexed(self, probe: OutputCommitter, bucket: str, directory: str) -> list[Indexed]:
        probe.store_fs.invalidate_cache(directory)
        entries = [job_index.parse_entry(bucket, path) for path in probe.store_fs.find(directory)]
        return [Indexed(e.destination, e.job_id, None) for e in entries if e is not None]

    def marker(self, committer: OutputCommitter) -> dict[str, Any] | None:
        own = self._own(committer)
        try:
            data = own.store_fs.cat_file(own.flow.layout.job_marker, start=0, end=MARKER_BYTES)
        except FileNotFoundError:
            return None
        return _document(data)

    def task_records(self, committer: OutputCommitter) -> int:
        own = self._own(committer)
        names = listed_names(own.store_fs, own.flow.layout.manifests_dir)
        return sum(1 for name in names if name.endswith(MANIFEST_SUFFIX))

    def records_dir(self, committer: OutputCommitter) -> str:
        return self._own(committer).flow.layout.tasks_dir

    def stored_records(self, committer: OutputCommitter) -> set[str]:
        directory = self.records_dir(committer)
        return {join(directory, name) for name in listed_names(committer.store_fs, directory)}

    def tree_left(self, committer: OutputCommitter) -> bool:
        own = self._own(committer)
        return bool(listed_names(own.store_fs, own.flow.layout.job_dir))


#: Every family whose jobs ``magicfs jobs`` finds, registered once.
FAMILIES: tuple[JobFamily, ...] = (MagicLayoutFamily(), ManifestFamily())
#: The committers whose jobs are found here (an index entry naming another is read as
#: the store's own committer's).
JOB_COMMITTERS: tuple[str, ...] = tuple(name for f in FAMILIES for name in f.committers)


def family_of(committer: str) -> JobFamily | None:
    """The family of the committer called ``committer``; ``None``: its jobs keep no
    state in the destination (staging, classic)."""
    return next((f for f in FAMILIES if committer in f.committers), None)


__all__ = ["FAMILIES", "JOB_COMMITTERS", "Indexed", "JobFamily", "family_of", "listed_names"]
