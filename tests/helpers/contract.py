"""The contract suite's adapter: one (committer, store) pair as a :class:`Target`.

``tests/test_contract.py`` writes each protocol scenario once and runs it over every
pair that supports it. A pair is a committer of :data:`COMMITTERS` on one of its stores;
what a committer promises (README "Choosing a committer", "Guarantees and failure
behaviour") is declared on its :class:`Committer`, and a scenario is generated only for
the pairs whose declarations it needs (:func:`pairs`). Nothing is skipped at run time.

:data:`GAPS` lists the pairs a scenario is *not* generated for although the README or the
code's documentation promises it: behaviour found wrong when this suite was written,
each with what goes wrong. A fix removes its line, and the scenario then runs there too.

A :class:`Target` observes the store the way a reader would: the destination's visible
files (no element starting with ``_`` or ``.``), every file, their bytes, what is still
*pending* on the store (S3: the multipart uploads in the bucket; Azure with the
``block-list`` committer: the blobs holding staged blocks and no committed one, listed
with the Azure SDK; the in-process deferred store: its staged writes, listed by its
adapter; rename stores: whatever hidden entry is left under the destination)
and what is left of a job's temporary tree (hidden entries under the destination, and
the staging committers' local tree).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

import fsspec
import fsspec.asyn
import pytest

import magicfs
from magicfs.committers import OutputCommitter
from magicfs.records import MANIFEST_COMMITTER_CLASS
from magicfs.stores.deferred import collect
from magicfs.stores.registry import deferred_store_for

from .s3_targets import store_fixture


@dataclass(frozen=True)
class Committer:
    """What one committer promises, whatever the store."""

    name: str
    stores: tuple[str, ...]
    #: Nothing a task writes is visible before job commit (all but ``file-v2``).
    hides_output: bool = True
    #: ``abort_job`` after task commits leaves nothing visible (all but ``file-v2``).
    abortable: bool = True
    #: Two committed attempts of one task: ``"named"``, the job publishes the attempt its
    #: message names; ``"last"``, the last committed attempt, whichever message names the
    #: task (README: staging "the last committed attempt wins"; v1 renames over it);
    #: ``None``, attempts can mix (``file-v2``).
    speculation: str | None = "named"
    #: Task output waits as multipart uploads on their final keys (visible in a listing of
    #: uploads) from task commit until job commit; on Azure (``block-list``), as blocks
    #: staged on the final blobs (listed as blobs with staged blocks and no committed one).
    deferred_writes: bool = False
    #: Aborting a task or job drops what its attempts left pending on the store (S3 aborts
    #: the multipart uploads). Azure has no request that deletes staged blocks: a name
    #: never published keeps them, invisible, until its next publish or 7 days pass.
    discards_pending_on_abort: bool = True
    #: The ``committer`` field of the JSON ``_SUCCESS``; ``None``: a zero-byte ``_SUCCESS``
    #: (the classic committers, as Hadoop's FileOutputCommitter).
    success_committer: str | None = None
    #: Task commit saves a JSON record (pendingset, manifest) that job commit validates.
    task_records: bool = True
    #: The README's failure table applies ("for the magic, manifest and staging
    #: committers"); the classic committers are "deliberately classic".
    guarantees: bool = True
    #: Two tasks writing one file fail the job (S3 committers); elsewhere one of them wins.
    detects_duplicate_destinations: bool = False
    #: Jobs with different ids to one destination never touch each other (the classic
    #: committers share ``_temporary/<app attempt>`` and collide, as in Hadoop).
    isolates_jobs: bool = True
    #: A second ``commit_task`` of a committed attempt (a retry after a lost reply)
    #: returns the same message; ``False``: it is refused and the first message stands
    #: (staging: the attempt's local files were uploaded and deleted by the first).
    recommits: bool = True
    #: ``conflict_mode`` applies to the whole destination, or per partition directory
    #: (``partitioned``: ``fail`` at task commit, ``replace`` of the partitions written,
    #: files at the top always appended).
    conflict_scope: str = "destination"
    #: The ``conflict_mode`` values it accepts (``file-v2`` refuses ``replace``: its tasks
    #: publish at task commit, so job commit cannot tell its own output from old data).
    conflict_modes: tuple[str, ...] = ("append", "fail", "replace")

    @property
    def remembers_committed_jobs(self) -> bool:
        """``setup_job`` refuses the id of a job committed at the destination: its JSON
        ``_SUCCESS`` names the job. Not the classic committers: Hadoop's zero-byte
        ``_SUCCESS`` names none, and nothing else of a committed job is left (decided:
        the format stays Hadoop's; README "Choosing a committer")."""
        return self.success_committer is not None

    @property
    def speculation_safe(self) -> bool:
        """Two committed attempts of one task never mix (all but ``file-v2``)."""
        return self.speculation is not None


#: The S3 stores: moto (``s3``), and two production S3 implementations: Ceph RGW (``rgw``)
#: and SeaweedFS (``seaweed``, its own S3 gateway; honours conditional completions).
S3_STORES = ("s3", "rgw", "seaweed")
#: The in-process deferred store (magicfs.stores.memory_deferred): staged bytes invisible
#: until published, as on S3 and Azure, in this process's memory.
IN_PROCESS = "mem-deferred"

COMMITTERS = {
    c.name: c
    for c in (
        Committer(
            "magic",
            S3_STORES,
            deferred_writes=True,
            success_committer="magic",
            detects_duplicate_destinations=True,
        ),
        Committer(
            "directory",
            S3_STORES,
            speculation="last",
            recommits=False,
            deferred_writes=True,
            success_committer="directory",
            detects_duplicate_destinations=True,
        ),
        Committer(
            "partitioned",
            S3_STORES,
            speculation="last",
            recommits=False,
            deferred_writes=True,
            success_committer="partitioned",
            detects_duplicate_destinations=True,
            conflict_scope="partition",
        ),
        Committer(
            "file-v1",
            (*S3_STORES, "file"),
            speculation="last",
            task_records=False,
            guarantees=False,
            isolates_jobs=False,
        ),
        Committer(
            "file-v2",
            (*S3_STORES, "file"),
            hides_output=False,
            abortable=False,
            speculation=None,
            task_records=False,
            guarantees=False,
            isolates_jobs=False,
            conflict_modes=("append", "fail"),
        ),
        Committer(
            "manifest",
            ("file", "memory", "abfs", "gcs"),
            success_committer=MANIFEST_COMMITTER_CLASS,
        ),
        Committer(
            "block-list",
            ("abfs",),
            deferred_writes=True,
            discards_pending_on_abort=False,
            success_committer="block-list",
            detects_duplicate_destinations=True,
        ),
        # The magic-layout flow on its own, over the in-process deferred store: the third
        # adapter of the contract (magicfs/stores/deferred.py), for which it was written.
        Committer(
            "magic-layout",
            (IN_PROCESS,),
            deferred_writes=True,
            success_committer="magic-layout",
            detects_duplicate_destinations=True,
        ),
    )
}

_STAGING = ("directory", "partitioned")
_CLASSIC = ("file-v1", "file-v2")


def _gaps(names: tuple[str, ...], store: str, scenario: str, wrong: str) -> dict:
    return {(name, store, scenario): wrong for name in names}


#: (committer, store or "*", scenario) -> what goes wrong. See the module docstring.
GAPS: dict[tuple[str, str, str], str] = {
    # protocol/committer.py: "A job id that is active, mid-commit or already committed at the
    # destination is refused by setup_job" ("Decisions shared by all committers").
}


@dataclass(frozen=True)
class Pair:
    committer: Committer
    store: str

    @property
    def id(self) -> str:
        return f"{self.committer.name}-{self.store}"

    def gap(self, scenario: str) -> str | None:
        name = self.committer.name
        return GAPS.get((name, self.store, scenario)) or GAPS.get((name, "*", scenario))


ALL_PAIRS = [Pair(c, store) for c in COMMITTERS.values() for store in c.stores]


#: Every scenario :func:`pairs` was asked for (to check :data:`GAPS` against).
SCENARIOS: set[str] = set()


def pairs(scenario: str, when=lambda committer: True) -> list[Any]:
    """``pytest.param`` of every pair ``scenario`` applies to (``when(committer)``), minus gaps."""
    SCENARIOS.add(scenario)
    return [
        pytest.param(pair, id=pair.id)
        for pair in ALL_PAIRS
        if when(pair.committer) and pair.gap(scenario) is None
    ]


def _hidden(relative: str) -> bool:
    return any(element.startswith(("_", ".")) for element in relative.split("/"))


@dataclass
class Target:
    """One pair, bound to a fresh destination on a running store."""

    pair: Pair
    fs: fsspec.AbstractFileSystem  # the store's own filesystem, to observe it
    dest: str  # URL of the destination
    options: dict[str, Any] = field(default_factory=dict)  # committer options of this store
    s3_client: Any = None
    bucket: str | None = None  # S3: the bucket; Azure: the container
    local_dirs: list[str] = field(default_factory=list)  # staging: buffer directory

    @property
    def kind(self) -> Committer:
        return self.pair.committer

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def root(self) -> str:
        return self.fs._strip_protocol(self.dest)

    def committer(self, **options: Any) -> OutputCommitter:
        return magicfs.committer_for(self.dest, committer=self.name, **{**self.options, **options})

    def elsewhere(self) -> Target:
        """The same pair on a sibling destination (``.../out-elsewhere``) of the same store."""
        return dataclasses.replace(self, dest=self.dest + "-elsewhere")

    # -- what readers see ---------------------------------------------------------------

    def entries(self, withdirs: bool = True) -> list[str]:
        """Everything under the destination, relative, hidden entries included."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root, withdirs=withdirs)
        except FileNotFoundError:
            return []
        return sorted(
            {p.rstrip("/")[len(self.root) + 1 :] for p in found if p.rstrip("/") != self.root}
        )

    def files(self) -> list[str]:
        """Every file under the destination, relative, hidden ones included."""
        return self.entries(withdirs=False)

    def visible(self) -> list[str]:
        """The files readers see: no element starting with ``_`` or ``.``."""
        return [f for f in self.files() if not _hidden(f)]

    def read(self, relative: str) -> bytes:
        return self.fs.cat_file(f"{self.root}/{relative}")

    def contents(self) -> dict[str, bytes]:
        """Every visible file and its bytes."""
        return {name: self.read(name) for name in self.visible()}

    def put(self, relative: str, data: bytes) -> None:
        """A file already at the destination (data of an earlier job)."""
        path = f"{self.root}/{relative}"
        self.fs.makedirs(self.fs._parent(path), exist_ok=True)
        self.fs.pipe_file(path, data)

    def success(self) -> dict[str, Any] | None:
        """The ``_SUCCESS`` JSON (``{}`` for a zero-byte one), ``None`` if there is none."""
        try:
            data = self.read("_SUCCESS")
        except FileNotFoundError:
            return None
        return json.loads(data) if data else {}

    def success_name(self, relative: str) -> str:
        """How ``_SUCCESS``'s ``filenames`` names a committed file."""
        if self.kind.success_committer == MANIFEST_COMMITTER_CLASS:  # manifest: URIs
            return self.fs.unstrip_protocol(f"{self.root}/{relative}")
        # S3A (and block-list, its format): the key as an absolute path, no bucket
        return "/" + f"{self.root}/{relative}".partition("/")[2]

    # -- what is left ----------------------------------------------------------------------

    @property
    def lists_pending(self) -> bool:
        """What is pending is listed apart from the destination's entries (S3 uploads,
        Azure staged blocks); elsewhere it is the hidden entries left in the destination."""
        return self.pair.store in S3_STORES or self.kind.deferred_writes

    def pending(self) -> list[str]:
        """S3: the keys of the bucket's multipart uploads (relative to the destination);
        Azure block lists: the blobs under the destination holding staged blocks and no
        committed one; rename stores: the hidden entries left under the destination (but
        ``_SUCCESS``)."""
        if self.pair.store in S3_STORES:
            uploads = self.s3_client.list_multipart_uploads(Bucket=self.bucket)
            prefix = self.root.partition("/")[2] + "/"
            return sorted(u["Key"].removeprefix(prefix) for u in uploads.get("Uploads", []))
        if self.pair.store == IN_PROCESS:
            return self.staged_in_process()
        if self.lists_pending:
            return self.staged()
        return self.hidden()

    def staged(self) -> list[str]:
        """Azure: the blobs under the destination (relative) that hold staged blocks and
        are not published — invisible to readers and to adlfs's listings alike."""
        container, _, blob = self.root.partition("/")
        prefix = blob + "/"

        async def names(include: list[str] | None) -> set[str]:
            client = self.fs.service_client.get_container_client(container)
            listing = client.list_blobs(name_starts_with=prefix, include=include)
            return {item.name async for item in listing}

        with_staged = fsspec.asyn.sync(self.fs.loop, names, ["uncommittedblobs"])
        committed = fsspec.asyn.sync(self.fs.loop, names, None)
        return sorted(name.removeprefix(prefix) for name in with_staged - committed)

    def staged_in_process(self) -> list[str]:
        """The in-process store: the names under the destination (relative) with staged,
        unpublished writes, as its adapter lists them (the contract's ``alist_pending``)."""
        spec = deferred_store_for(self.fs)
        assert spec is not None, f"{self.fs!r} is no registered deferred store"
        adapter = spec.adapter(self.fs, "observer", lambda: self.root)
        listing = adapter.run(collect(adapter.alist_pending(self.root + "/")))
        return sorted({w.path.removeprefix(self.root + "/") for w in listing})

    def hidden(self) -> list[str]:
        """Hidden entries under the destination (the job's tree), but ``_SUCCESS``."""
        return [e for e in self.entries() if _hidden(e) and e != "_SUCCESS"]

    def temporary(self, hidden: list[str] | None = None) -> list[str]:
        """What is left of jobs' temporary trees: in the destination (``hidden``, if
        already listed), and on local disk (the staging committers' buffer directory)."""
        local = [
            os.path.join(top, name)
            for directory in self.local_dirs
            for top, dirs, names in os.walk(directory)
            for name in dirs + names
        ]
        return (self.hidden() if hidden is None else hidden) + sorted(local)

    def leftovers(self) -> tuple[list[str], list[str]]:
        """(:meth:`pending`, :meth:`temporary`), listing the destination once."""
        pending = self.pending()
        hidden = None if self.lists_pending else pending
        return pending, self.temporary(hidden)

    def record_fs(self, committer: OutputCommitter) -> fsspec.AbstractFileSystem:
        """The filesystem holding the task records that commit messages name."""
        if self.name in _STAGING:  # records travel through the (local) staging directory
            return fsspec.core.url_to_fs(committer.staging_dir)[0]
        return committer.store_fs


def make_target(request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
    """A :class:`Target` for ``pair`` on a fresh destination (conftest.py's store fixtures)."""
    store = pair.store
    if store in S3_STORES:
        bucket = store_fixture(request, store, "bucket")
        server = store_fixture(request, store, "server")
        options = {**server.storage_options, "skip_instance_cache": True}
        # One s3fs for the committers and the observer: a client costs 0.1-0.4 s to make.
        fs = fsspec.filesystem("s3", **options)
        target = Target(
            pair,
            fs,
            f"s3://{bucket}/out",
            {"fs": fs},
            s3_client=store_fixture(request, store, "client"),
            bucket=bucket,
        )
        if pair.committer.name in _STAGING:
            buffer = str(tmp_path / "buffer")
            target.options["buffer_dir"] = buffer
            target.local_dirs.append(buffer)
        return target
    if store == "file":
        fs = fsspec.filesystem("file")
        return Target(pair, fs, f"file://{tmp_path}/out", {"fs": fs})
    if store == "memory":
        fs = fsspec.filesystem("memory")
        root = f"/contract-{os.getpid()}-{tmp_path.name}"
        request.addfinalizer(lambda: fs.rm(root, recursive=True) if fs.exists(root) else None)
        return Target(pair, fs, f"memory://{root}/out", {"fs": fs})
    if store == "mem-deferred":  # the in-process deferred store: staged parts in memory
        fs = fsspec.filesystem("mem-deferred")
        root = f"contract-{os.getpid()}-{tmp_path.name}"

        def forget() -> None:
            for _, upload_id in fs.pending(root + "/"):
                fs.discard(upload_id)
            if fs.exists(root):
                fs.rm(root, recursive=True)

        request.addfinalizer(forget)
        return Target(pair, fs, f"mem-deferred://{root}/out", {"fs": fs}, bucket=root)
    if store == "abfs":
        container = request.getfixturevalue("azure_container")
        fs = request.getfixturevalue("abfs")
        # manifest: renames out of a hidden tree; block-list: blocks staged on the final
        # blobs (Target.staged). Both name their committer: the default is block-list's.
        return Target(pair, fs, f"abfs://{container}/out", {"fs": fs}, bucket=container)
    if store == "gcs":
        bucket = request.getfixturevalue("gcs_bucket")
        fs = request.getfixturevalue("gcs")
        return Target(pair, fs, f"gs://{bucket}/out", {"fs": fs})
    raise ValueError(f"unknown store {store!r}")
