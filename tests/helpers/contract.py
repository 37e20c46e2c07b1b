"""The contract suite: the commit protocol's scenarios, written once, as a class each store's
test module subclasses.

:class:`CommitterContract` holds every protocol scenario (output hidden until job commit,
retried and speculative attempts, aborts, repeated commits, reused job ids, tampered
records, empty jobs, conflict modes, failures inside a task, pandas/pyarrow). A store's
own test module (``tests/test_contract_<store>.py``) subclasses it, as zarr-python's
store modules subclass its ``StoreTests``, and fills in what only it knows:

* :attr:`~CommitterContract.store`: its id, in the tests' ids (``[magic-s3]``);
* :attr:`~CommitterContract.committers`: the committers of :data:`COMMITTERS` it runs;
* :attr:`~CommitterContract.gaps`: the scenarios a pair of it is not run for although
  the README or the code's documentation promises them (see below);
* :meth:`~CommitterContract.make_target`: a fresh destination on the store, as a
  :class:`Target`, and the committer options that reach it;
* :meth:`~CommitterContract.pending` and :meth:`~CommitterContract.lists_pending`: what
  is still pending on the store, where it is listed apart from the destination's entries
  (S3's multipart uploads, Azure's staged blocks, an in-process store's staged writes);
  by default the hidden entries left under the destination (rename stores).

A pair is a committer on the store. What a committer promises (README "Choosing a
committer", "Guarantees and failure behaviour") is declared on its :class:`Committer`,
whatever the store, and a scenario is generated only for the pairs whose declarations it
needs (:func:`scenario`). Nothing is skipped at run time: a scenario no pair of a store
applies to is not collected for that store.

:data:`GAPS` (every store) and a store's ``gaps`` list the pairs a scenario is *not*
generated for although it is promised: behaviour found wrong when this suite was written,
each with what goes wrong. A fix removes its line, and the scenario then runs there too.

Every test asserts what a reader of the store sees: the destination's exact listing and
bytes, the ``_SUCCESS`` JSON, what is still pending and what is left of the job's
temporary tree (hidden entries under the destination, and the staging committers' local
tree); and for failures, the error's type and that its message names the job, stage or
file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import magicfs
from helpers import job_record, tamper_record
from magicfs.committers import OutputCommitter
from magicfs.errors import (
    CommitConflictError,
    CommitFailedError,
    InvalidCommitData,
    JobAlreadyActiveError,
    JobCommitError,
    NothingToCommitError,
    TaskNotActiveError,
)
from magicfs.records import MANIFEST_COMMITTER_CLASS


@dataclass(frozen=True)
class Committer:
    """What one committer promises, whatever the store."""

    name: str
    #: Nothing a task writes is visible before job commit (all but ``file-v2``).
    hides_output: bool = True
    #: ``abort_job`` after task commits leaves nothing visible (all but ``file-v2``).
    abortable: bool = True
    #: Two committed attempts of one task: ``"named"``, the job publishes the attempt its
    #: message names; ``"last"``, the last committed attempt, whichever message names the
    #: task (README: staging "the last committed attempt wins"; v1 renames over it);
    #: ``None``, attempts can mix (``file-v2``).
    speculation: str | None = "named"
    #: Task output waits on the store, invisible, on its final names from task commit until
    #: job commit (S3: multipart uploads; Azure: blocks staged on the final blobs; an
    #: in-process store: staged writes), as the store's :meth:`CommitterContract.pending`
    #: lists it.
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
    #: Tasks write to a local buffer directory, and their records travel through the
    #: (local) staging directory (the staging committers).
    stages_locally: bool = False
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


COMMITTERS = {
    c.name: c
    for c in (
        Committer(
            "magic",
            deferred_writes=True,
            success_committer="magic",
            detects_duplicate_destinations=True,
        ),
        Committer(
            "directory",
            speculation="last",
            recommits=False,
            deferred_writes=True,
            success_committer="directory",
            stages_locally=True,
            detects_duplicate_destinations=True,
        ),
        Committer(
            "partitioned",
            speculation="last",
            recommits=False,
            deferred_writes=True,
            success_committer="partitioned",
            stages_locally=True,
            detects_duplicate_destinations=True,
            conflict_scope="partition",
        ),
        Committer(
            "file-v1",
            speculation="last",
            task_records=False,
            guarantees=False,
            isolates_jobs=False,
        ),
        Committer(
            "file-v2",
            hides_output=False,
            abortable=False,
            speculation=None,
            task_records=False,
            guarantees=False,
            isolates_jobs=False,
            conflict_modes=("append", "fail"),
        ),
        Committer("manifest", success_committer=MANIFEST_COMMITTER_CLASS),
        Committer(
            "block-list",
            deferred_writes=True,
            discards_pending_on_abort=False,
            success_committer="block-list",
            detects_duplicate_destinations=True,
        ),
        # The magic-layout flow on its own, for any registered deferred store: the
        # committer written against the deferred-store contract (magicfs/stores/deferred.py).
        Committer(
            "magic-layout",
            deferred_writes=True,
            success_committer="magic-layout",
            detects_duplicate_destinations=True,
        ),
    )
}


#: (committer, scenario) -> what goes wrong, on every store the committer runs on. A gap
#: of one store is in that store's ``gaps``. See the module docstring.
GAPS: dict[tuple[str, str], str] = {
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


#: Every scenario of :class:`CommitterContract` (to check gaps against).
SCENARIOS: set[str] = set()

#: A test's parameters for one store: (argument names, the contract -> its parameters).
Generator = tuple[tuple[str, ...], Callable[["CommitterContract"], list[Any]]]


def scenario(name: str, when: Callable[[Committer], bool] = lambda committer: True):
    """Run the test over every pair of the store that ``name`` applies to
    (``when(committer)``), but its gaps."""
    SCENARIOS.add(name)

    def params(contract: CommitterContract) -> list[Any]:
        return [pytest.param(pair, id=pair.id) for pair in contract.pairs(name, when)]

    def mark(test: Callable) -> Callable:
        test.contract_params = (("pair",), params)
        return test

    return mark


CONFLICT_MODES = ("fail", "append", "replace")


def conflict_scenarios(test: Callable) -> Callable:
    """Run the test over every conflict mode (``mode``) and every pair of the store that
    accepts it (scenario ``conflict-<mode>``)."""
    SCENARIOS.update(f"conflict-{mode}" for mode in CONFLICT_MODES)

    def params(contract: CommitterContract) -> list[Any]:
        return [
            pytest.param(mode, pair, id=f"{mode}-{pair.id}")
            for mode in CONFLICT_MODES
            for pair in contract.pairs(
                f"conflict-{mode}", lambda c, mode=mode: mode in c.conflict_modes
            )
        ]

    test.contract_params = (("mode", "pair"), params)
    return test


def _hidden(relative: str) -> bool:
    return any(element.startswith(("_", ".")) for element in relative.split("/"))


@dataclass
class Target:
    """One pair, bound to a fresh destination on a running store."""

    contract: CommitterContract  # the store's contract: how to list what is pending
    pair: Pair
    fs: fsspec.AbstractFileSystem  # the store's own filesystem, to observe it
    dest: str  # URL of the destination
    options: dict[str, Any] = field(default_factory=dict)  # committer options of this store
    client: Any = None  # the store's own client, where observing needs more than ``fs``
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
        """Everything under the destination, relative, hidden entries included (but the
        job commit records)."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root, withdirs=withdirs)
        except FileNotFoundError:
            return []
        relative = {
            p.rstrip("/")[len(self.root) + 1 :] for p in found if p.rstrip("/") != self.root
        }
        return sorted(name for name in relative if not job_record(name))

    def files(self) -> list[str]:
        """Every file under the destination, relative, hidden ones included (but the job
        commit records, which every commit leaves: ``helpers.job_record``)."""
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
        """What is pending is listed apart from the destination's entries (the store's
        :meth:`CommitterContract.lists_pending`)."""
        return self.contract.lists_pending(self)

    def pending(self) -> list[str]:
        """What is pending on the store, relative to the destination (the store's
        :meth:`CommitterContract.pending`)."""
        return self.contract.pending(self)

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
        if self.kind.stages_locally:  # records travel through the (local) staging directory
            return fsspec.core.url_to_fs(committer.flow.staging_dir)[0]
        return committer.store_fs


# --- the scenarios' shared steps and data ---------------------------------------------------------


def write(committer, task, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(data)


def started_task(committer, index: int = 0, attempt: int = 0):
    task = committer.task_attempt(index, attempt)
    committer.setup_task(task)
    return task


def run_task(committer, index: int, files: dict[str, bytes], attempt: int = 0):
    task = started_task(committer, index, attempt)
    write(committer, task, files)
    return committer.commit_task(task)


def assert_nothing_left(target: Target, unpublished: Iterable[str] = ()) -> None:
    """No upload parked, no temporary tree left (in the destination or on local disk).

    ``unpublished``: the files of aborted or superseded attempts that no attempt
    published. Where the store cannot discard what they left pending (Azure's staged
    blocks: ``discards_pending_on_abort``), exactly those names are still pending,
    invisible; the temporary tree must be gone all the same.
    """
    staged = [] if target.kind.discards_pending_on_abort else sorted(set(unpublished))
    assert target.leftovers() == (staged, [])


TASKS = {
    0: {"part-0.csv": b"task 0\n", "year=2024/part-0.csv": b"2024 rows of task 0\n"},
    1: {"part-1.csv": b"task 1 wrote this\n"},
}
EXPECTED = {name: data for files in TASKS.values() for name, data in files.items()}
ONE_FILE = {"part-0.csv": b"task 0\n"}


# --- 3. speculation: two attempts of one task both commit ------------------------------------


def attempt_output(n: int) -> dict[str, bytes]:
    return {f"from-attempt-{n}.csv": b"x", "part-0.csv": f"attempt {n}".encode()}


def two_committed_attempts(committer) -> list:
    committer.setup_job()
    return [run_task(committer, 0, attempt_output(n), attempt=n) for n in (0, 1)]


def assert_published_names(target: Target, summary, files: dict[str, bytes]) -> None:
    """``_SUCCESS`` and the summary name exactly ``files`` (committers writing a JSON one)."""
    if target.kind.success_committer is not None:
        expected = sorted(map(target.success_name, files))
        assert sorted(target.success()["filenames"]) == expected
        assert sorted(summary.filenames) == expected


# --- 7. tampered task records ------------------------------------------------------------------


def tamper(document: dict, how: str) -> str:
    """Edit a pendingset or task manifest; returns what job commit's error must say."""
    if how == "job id":
        document["jobId"] = "another-job"
        return r"jobId: Mismatch in Job ID: the \w+ is for job another-job"
    # "escape": out of the destination by "..", "outside": into a sibling directory.
    elsewhere = "/out/../escaped.csv" if how == "escape" else "/elsewhere/escaped.csv"
    if "commits" in document:  # a .pendingset: S3 keys ("out/a.csv")
        commit = document["commits"][0]
        commit["destinationKey"] = ("/" + commit["destinationKey"]).replace(
            "/out/a.csv", elsewhere
        )[1:]
        field = r"commits\[0\]\.destinationKey: "
        if how == "escape":  # refused for its form alone
            return field + r"has an empty, '\.' or '\.\.' path element"
    else:  # a task manifest: destination URIs
        document["files"][0]["d"] = document["files"][0]["d"].replace("/out/a.csv", elsewhere)
        field = r"files\[0\]\.d: "
    return field + r".*is outside the job destination"


# --- 8. empty tasks and jobs ---------------------------------------------------------------------


def assert_empty_success(target: Target, committer) -> None:
    assert target.files() == ["_SUCCESS"]
    success = target.success()
    if target.kind.success_committer is not None:
        assert (success["success"], success["jobId"], success["filenames"]) == (
            True,
            committer.job_id,
            [],
        )
    assert_nothing_left(target)


# --- 9. conflict modes --------------------------------------------------------------------------

EXISTING = {"top.csv": b"top", "year=2022/keep.csv": b"keep", "year=2023/old.csv": b"old"}
NEW = {"year=2023/new.csv": b"new"}


# --- two tasks, one file; two jobs, one destination -----------------------------------------------


def two_tasks_writing_one_file(committer) -> list:
    committer.setup_job()
    return [run_task(committer, i, {"same.csv": f"task {i}".encode()}) for i in (0, 1)]


# --- 11. pandas and pyarrow through committer.fs (docs/engines/pandas-pyarrow.md) -----------------

FRAME = pd.DataFrame({"year": [2023, 2024, 2024], "amount": [1.5, 2.0, 3.25]})


class CommitterContract:
    """The protocol's scenarios over the pairs of one store. Subclass it in the store's test
    module (``class TestS3Contract(CommitterContract)``), set :attr:`store` and
    :attr:`committers`, and write :meth:`make_target` (and :meth:`pending` where what is
    pending is not the hidden entries left under the destination)."""

    #: The store's id, in the tests' ids: ``[<committer>-<store>]``.
    store: ClassVar[str]
    #: The names (:data:`COMMITTERS`) of the committers run on it, in that order.
    committers: ClassVar[tuple[str, ...]]
    #: (committer, scenario) -> what goes wrong on this store: the scenario is not
    #: generated for that pair. See the module docstring.
    gaps: ClassVar[dict[tuple[str, str], str]] = {}
    #: Options every committer of this class is built with, beyond the target's own: a
    #: configuration run as a class of its own (``{"in_memory": True}``).
    committer_options: ClassVar[dict[str, Any]] = {}

    # -- what a store fills in --------------------------------------------------------------

    def make_target(self, request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
        """A :class:`Target` for ``pair`` on a fresh destination of the store (its fixtures
        through ``request.getfixturevalue``), removed when the test ends."""
        raise NotImplementedError(f"{type(self).__name__} makes no target")

    def lists_pending(self, target: Target) -> bool:
        """What is pending is listed apart from the destination's entries (S3 uploads,
        staged blocks, staged writes); by default it is the hidden entries left there."""
        return False

    def pending(self, target: Target) -> list[str]:
        """The destination-relative names with writes pending on the store: invisible,
        unpublished. By default (rename stores) the hidden entries left under the
        destination (but ``_SUCCESS``)."""
        return target.hidden()

    # -- the machinery: which pairs each scenario runs on ------------------------------------

    @classmethod
    def gap(cls, committer: str, scenario_name: str) -> str | None:
        return cls.gaps.get((committer, scenario_name)) or GAPS.get((committer, scenario_name))

    @classmethod
    def pairs(cls, scenario_name: str, when: Callable[[Committer], bool]) -> list[Pair]:
        """The store's pairs ``scenario_name`` applies to (``when(committer)``), but gaps."""
        return [
            Pair(COMMITTERS[name], cls.store)
            for name in cls.committers
            if when(COMMITTERS[name]) and cls.gap(name, scenario_name) is None
        ]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A scenario no pair of the store applies to is not collected for it (rather than
        collected and skipped)."""
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "store"):
            return
        for name, test in vars(CommitterContract).items():
            generated = getattr(test, "contract_params", None)
            if generated is not None and name not in vars(cls):
                setattr(cls, name, test if generated[1](cls) else None)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        generated = getattr(metafunc.function, "contract_params", None)
        if generated is not None:
            names, params = generated
            metafunc.parametrize(names, params(type(self)))

    @pytest.fixture
    def target(self, request: pytest.FixtureRequest, tmp_path: Any, pair: Pair) -> Target:
        target = self.make_target(request, pair, tmp_path)
        target.options.update(self.committer_options)
        return target

    # -- the scenarios ------------------------------------------------------------------------

    # --- 1. nothing visible before job commit, then exactly the job's files -----------------------

    @scenario("lifecycle")
    def test_output_appears_at_job_commit_exactly(self, target):
        committer = target.committer()
        committer.setup_job()
        committed: dict[str, bytes] = {}
        messages = []
        for index, files in TASKS.items():
            task = committer.task_attempt(index)
            committer.setup_task(task)
            write(committer, task, files)
            assert committer.needs_task_commit(task)
            assert target.visible() == sorted(committed if not target.kind.hides_output else [])
            message = committer.commit_task(task)
            assert (message.files, message.bytes) == (len(files), sum(map(len, files.values())))
            messages.append(message)
            committed.update(files)
            if target.kind.hides_output:
                assert target.visible() == []  # committed tasks wait for the job
            else:
                assert target.contents() == committed  # file-v2: published at task commit
            if target.kind.deferred_writes:
                assert target.pending() == sorted(committed)  # uploads on their final keys

        summary = committer.commit_job(messages)
        assert target.contents() == EXPECTED
        assert target.files() == sorted(["_SUCCESS", *EXPECTED])
        assert_nothing_left(target)
        total = sum(map(len, EXPECTED.values()))
        assert (summary.files, summary.bytes, summary.tasks) == (len(EXPECTED), total, len(TASKS))
        success = target.success()
        if target.kind.success_committer is None:
            assert success == {}  # zero bytes, as Hadoop's FileOutputCommitter writes it
        else:
            assert success["committer"] == target.kind.success_committer
            assert (success["success"], success["jobId"]) == (True, committer.job_id)
            assert sorted(success["filenames"]) == sorted(map(target.success_name, EXPECTED))
            assert sorted(summary.filenames) == sorted(success["filenames"])

    # --- 2. a failed attempt, then a retry --------------------------------------------------------

    @scenario("retry_after_abort")
    def test_an_aborted_attempt_leaves_nothing_and_the_retry_commits(self, target):
        committer = target.committer()
        committer.setup_job()
        first = committer.task_attempt(0, 0)
        committer.setup_task(first)
        write(committer, first, {"part-0.csv": b"first attempt", "only-first.csv": b"1"})
        committer.abort_task(first)
        assert target.visible() == []
        if target.kind.deferred_writes:
            # its uploads were aborted with it (Azure: its blocks stay staged, invisible)
            aborted = ["only-first.csv", "part-0.csv"]
            assert target.pending() == ([] if target.kind.discards_pending_on_abort else aborted)
        message = run_task(committer, 0, {"part-0.csv": b"second attempt"}, attempt=1)
        committer.commit_job([message])
        assert target.contents() == {"part-0.csv": b"second attempt"}
        assert_nothing_left(target, unpublished=["only-first.csv"])

    # --- 3. speculation: two attempts of one task both commit ------------------------------------

    @scenario("speculation", lambda c: c.speculation_safe)
    def test_the_job_publishes_one_attempt_of_a_speculated_task(self, target):
        committer = target.committer()
        messages = two_committed_attempts(committer)
        # "named": the job publishes the attempt its message names (here the first, as a
        # commit coordinator may choose); "last": the last committed attempt, the one to name.
        winner = 0 if target.kind.speculation == "named" else 1
        summary = committer.commit_job([messages[winner]])
        assert target.contents() == attempt_output(winner)
        assert (summary.files, summary.tasks) == (2, 1)
        assert_published_names(target, summary, attempt_output(winner))
        # the other attempt's uploads and files are gone
        assert_nothing_left(target, unpublished=[f"from-attempt-{1 - winner}.csv"])

    @scenario("last_attempt_wins", lambda c: c.speculation_safe)
    def test_without_messages_the_last_committed_attempt_wins(self, target):
        committer = target.committer()
        two_committed_attempts(committer)
        summary = committer.commit_job()  # lists the committed tasks (HADOOP-17258)
        assert target.contents() == attempt_output(1)
        assert_published_names(target, summary, attempt_output(1))
        assert_nothing_left(target, unpublished=["from-attempt-0.csv"])

    @scenario("commit_twice", lambda c: c.guarantees)
    def test_an_attempt_committed_twice_is_published_once(self, target):
        """A task commit retried after a lost reply: both identical messages reach the job."""
        committer = target.committer()
        committer.setup_job()
        task = started_task(committer, 0)
        write(committer, task, TASKS[0])
        first = committer.commit_task(task)
        if target.kind.recommits:
            second = committer.commit_task(task)
            assert second == first
        else:
            with pytest.raises(FileNotFoundError, match="has already committed: it cannot commit"):
                committer.commit_task(task)
            second = first
        summary = committer.commit_job([first, second])
        assert target.contents() == TASKS[0]
        assert (summary.files, summary.tasks) == (len(TASKS[0]), 1)
        assert_published_names(target, summary, TASKS[0])
        assert_nothing_left(target)

    @scenario("two_attempts_named", lambda c: c.speculation_safe)
    def test_messages_of_two_attempts_of_one_task_fail_the_job(self, target):
        committer = target.committer()
        messages = two_committed_attempts(committer)
        named = r"two messages for task .* \(attempts .*_0 and .*_1\)"
        with pytest.raises(JobCommitError, match=named):
            committer.commit_job(messages)
        assert target.visible() == []
        assert_nothing_left(target, unpublished=[*attempt_output(0), *attempt_output(1)])

    # --- 4. abort_job ----------------------------------------------------------------------------

    @scenario("abort_job", lambda c: c.abortable)
    def test_abort_job_after_task_commits_leaves_nothing(self, target):
        committer = target.committer()
        committer.setup_job()
        run_task(committer, 0, TASKS[0])
        run_task(committer, 1, TASKS[1])
        running = committer.task_attempt(2)
        committer.setup_task(running)
        write(committer, running, {"part-2.csv": b"never committed"})
        committer.abort_job()
        committer.abort_job()  # idempotent
        assert target.files() == []  # no data, no _SUCCESS
        assert_nothing_left(target, unpublished=[*EXPECTED, "part-2.csv"])

    # --- 5. commit_job twice, and the committed job's id ------------------------------------------

    @scenario("repeated_commit")
    def test_a_committed_job_refuses_a_second_commit_and_its_id(self, target):
        committer = target.committer()
        committer.setup_job()
        messages = [run_task(committer, 0, ONE_FILE)]
        committer.commit_job(messages)
        before = (target.files(), target.contents(), target.read("_SUCCESS"))
        with pytest.raises(NothingToCommitError, match="already been committed") as again:
            committer.commit_job()
        assert committer.job_id in str(again.value)
        # A new driver retrying with the same messages (the first reply was lost).
        retry = target.committer(job_id=committer.job_id)
        with pytest.raises(NothingToCommitError, match="already been committed") as again:
            retry.commit_job(messages)
        assert committer.job_id in str(again.value) and committer.url in str(again.value)
        assert (target.files(), target.contents(), target.read("_SUCCESS")) == before
        assert_nothing_left(target)

    @scenario("committed_job_id", when=lambda c: c.remembers_committed_jobs)
    def test_setup_job_refuses_the_id_of_a_committed_job(self, target):
        committer = target.committer()
        committer.setup_job()
        committer.commit_job([run_task(committer, 0, ONE_FILE)])
        before = (target.files(), target.contents(), target.read("_SUCCESS"))
        # One job id, one job: a new job cannot reuse it.
        with pytest.raises(JobAlreadyActiveError, match="already committed") as refused:
            target.committer(job_id=committer.job_id).setup_job()
        assert committer.job_id in str(refused.value)
        assert (target.files(), target.contents(), target.read("_SUCCESS")) == before
        assert_nothing_left(target)

    # --- 6. one job id, one job ------------------------------------------------------------------

    @scenario("active_job_id")
    def test_setup_job_refuses_the_id_of_an_active_job(self, target):
        committer = target.committer()
        committer.setup_job()
        second_driver = target.committer(job_id=committer.job_id)
        with pytest.raises(JobAlreadyActiveError, match="already active") as refused:
            second_driver.setup_job()
        assert committer.job_id in str(refused.value)
        # The refusal changed nothing: the job goes on.
        committer.commit_job([run_task(committer, 0, ONE_FILE)])
        assert target.contents() == ONE_FILE
        assert_nothing_left(target)

    # --- 7. tampered task records -----------------------------------------------------------------

    @pytest.mark.parametrize("how", ["job id", "escape", "outside"])
    @scenario("tampered_record", lambda c: c.task_records)
    def test_a_tampered_task_record_fails_the_job_before_anything_is_visible(self, target, how):
        committer = target.committer()
        committer.setup_job()
        tampered = run_task(committer, 0, {"a.csv": b"a"})
        intact = run_task(committer, 1, {"b.csv": b"b"})
        problems: list[str] = []
        tampered = tamper_record(
            target.record_fs(committer), tampered, lambda d: problems.append(tamper(d, how))
        )
        (problem,) = problems

        with pytest.raises(JobCommitError) as failed:
            committer.commit_job([tampered, intact])
        error = failed.value
        assert isinstance(error.__cause__, InvalidCommitData)
        assert error.stage in ("load", "validate") and error.job_id == committer.job_id
        message = str(error)
        assert f"job {committer.job_id}" in message and f"failed in stage {error.stage}" in message
        assert posixpath.basename(tampered.record) in message and re.search(problem, message)
        assert "nothing of it is visible" in message
        assert target.files() == []  # not even the intact task's file
        parent = target.fs._parent(target.root)
        assert not target.fs.exists(f"{parent}/escaped.csv")
        assert not target.fs.exists(f"{parent}/elsewhere/escaped.csv")
        assert_nothing_left(target, unpublished=["a.csv", "b.csv"])  # the job was aborted

    # --- the messages job commit is given --------------------------------------------------------

    @scenario("missing_message", lambda c: c.abortable)
    def test_a_missing_task_message_fails_the_job(self, target):
        # Spark hands None for a task that never reported.
        committer = target.committer()
        committer.setup_job()
        message = run_task(committer, 0, ONE_FILE)
        with pytest.raises(JobCommitError, match="message 1 is missing: a task did not report"):
            committer.commit_job([message, None])
        assert target.files() == []
        assert_nothing_left(target, unpublished=ONE_FILE)

    @scenario("foreign_message")
    def test_a_message_of_another_job_fails_the_job_and_touches_neither(self, target):
        other = target.elsewhere()
        foreign_job = other.committer()
        foreign_job.setup_job()
        foreign = run_task(foreign_job, 0, {"foreign.csv": b"of another job"})
        committer = target.committer()
        committer.setup_job()
        message = run_task(committer, 0, ONE_FILE)
        with pytest.raises(JobCommitError, match=f"comes from job {foreign_job.job_id}") as failed:
            committer.commit_job([message, foreign])
        assert failed.value.stage == "load" and committer.job_id in str(failed.value)
        # Nothing of the job is visible (file-v2: but what its task commit already published).
        assert target.files() == ([] if target.kind.hides_output else list(ONE_FILE))
        foreign_job.commit_job([foreign])  # the other job is intact
        assert other.contents() == {"foreign.csv": b"of another job"}
        assert_nothing_left(target, unpublished=ONE_FILE)
        assert_nothing_left(other)

    # --- 8. empty tasks and jobs ------------------------------------------------------------------

    @scenario("empty")
    def test_an_empty_task_and_a_job_without_tasks_commit_cleanly(self, target):
        committer = target.committer()
        committer.setup_job()
        message = run_task(committer, 0, {})
        assert (message.files, message.bytes) == (0, 0)
        summary = committer.commit_job([message])
        assert (summary.files, summary.bytes, summary.tasks) == (0, 0, 1)
        assert_empty_success(target, committer)
        no_tasks = target.committer()  # a second job, to the same destination
        no_tasks.setup_job()
        assert no_tasks.commit_job([]).files == 0
        assert_empty_success(target, no_tasks)

    # --- 9. conflict modes ------------------------------------------------------------------------

    @conflict_scenarios
    def test_conflict_modes_against_existing_data(self, target, mode):
        for name, data in EXISTING.items():
            target.put(name, data)
        committer = target.committer(conflict_mode=mode)
        partitioned = target.kind.conflict_scope == "partition"
        if mode == "fail" and not partitioned:
            with pytest.raises(CommitConflictError, match="conflict_mode is 'fail'") as refused:
                committer.setup_job()
            assert committer.url in str(refused.value) and "job setup" in str(refused.value)
            assert target.contents() == EXISTING
            assert_nothing_left(target)
            return
        committer.setup_job()
        task = started_task(committer)
        write(committer, task, NEW)
        if mode == "fail":  # partitioned: each partition written, at task commit, before uploads
            with pytest.raises(CommitConflictError, match="year=2023: partition already exists"):
                committer.commit_task(task)
            committer.abort_job()
            assert target.contents() == EXISTING
            assert_nothing_left(target)
            return
        message = committer.commit_task(task)
        if target.kind.hides_output:
            assert target.contents() == EXISTING  # untouched until job commit
        committer.commit_job([message])
        if mode == "append":
            expected = {**EXISTING, **NEW}
        elif partitioned:  # exactly the partitions written are replaced; the top is appended
            expected = {"top.csv": b"top", "year=2022/keep.csv": b"keep", **NEW}
        else:
            expected = NEW
        assert target.contents() == expected
        assert_nothing_left(target)

    @scenario("fail_mode_empty")
    def test_conflict_mode_fail_commits_into_an_empty_destination(self, target):
        committer = target.committer(conflict_mode="fail")
        committer.setup_job()
        committer.commit_job([run_task(committer, 0, ONE_FILE)])
        assert target.contents() == ONE_FILE
        assert_nothing_left(target)

    # --- 10. failures inside a task ---------------------------------------------------------------

    @scenario("open_file", lambda c: c.guarantees)
    def test_a_file_still_open_fails_the_task_commit(self, target):
        committer = target.committer()
        committer.setup_job()
        task = started_task(committer)
        write(committer, task, {"closed.csv": b"closed"})
        still_open = committer.fs.open(task.path("open.csv"), "wb")
        still_open.write(b"half a file")
        with pytest.raises(CommitFailedError, match="1 files are still open") as refused:
            committer.commit_task(task)
        message = str(refused.value)
        assert task.attempt_id in message and "open.csv" in message
        assert "the attempt has been aborted" in message
        with pytest.raises(OSError, match="aborted"):  # the writer learns it was discarded
            still_open.close()
        retry = run_task(committer, 0, {"retried.csv": b"retried"}, attempt=1)
        committer.commit_job([retry])
        assert target.contents() == {"retried.csv": b"retried"}
        assert_nothing_left(target, unpublished=["closed.csv"])  # of the aborted attempt

    @scenario("failed_write", lambda c: c.guarantees)
    def test_a_file_closed_by_an_exception_is_never_published(self, target):
        committer = target.committer()
        committer.setup_job()
        task = started_task(committer)
        write(committer, task, {"good.csv": b"good"})
        with (
            pytest.raises(ValueError, match="writer failed"),
            committer.fs.open(task.path("truncated.csv"), "wb") as f,
        ):
            f.write(b"half")
            raise ValueError("writer failed")
        message = committer.commit_task(task)
        assert message.files == 1
        committer.commit_job([message])
        assert target.contents() == {"good.csv": b"good"}
        assert_nothing_left(target)

    @scenario("write_after_commit", lambda c: c.guarantees)
    def test_a_write_after_task_commit_is_refused(self, target):
        committer = target.committer()
        committer.setup_job()
        task = started_task(committer)
        write(committer, task, {"a.csv": b"a"})
        message = committer.commit_task(task)
        with pytest.raises(TaskNotActiveError, match="already committed") as refused:
            write(committer, task, {"late.csv": b"late"})
        assert task.attempt_id in str(refused.value) and "late.csv" in str(refused.value)
        committer.commit_job([message])
        assert target.contents() == {"a.csv": b"a"}
        assert_nothing_left(target)

    @scenario("dead_attempt", lambda c: c.guarantees)
    def test_aborted_or_unset_attempts_cannot_commit(self, target):
        committer = target.committer()
        committer.setup_job()
        run_task(committer, 0, {"first.csv": b"first"})
        aborted = committer.task_attempt(0, 1)
        committer.setup_task(aborted)
        write(committer, aborted, {"second.csv": b"second"})
        committer.abort_task(aborted)
        with pytest.raises(FileNotFoundError, match="never set up, or was aborted") as refused:
            committer.commit_task(aborted)
        assert aborted.attempt_id in str(refused.value)
        never_set_up = committer.task_attempt(1)
        with pytest.raises(FileNotFoundError, match="never set up, or was aborted"):
            committer.commit_task(never_set_up)
        committer.commit_job()  # lists: the earlier attempt's record stays
        assert target.contents() == {"first.csv": b"first"}
        assert_nothing_left(target, unpublished=["second.csv"])

    @scenario("attempt_prefix", lambda c: c.guarantees)
    def test_an_attempt_whose_id_starts_another_attempts_commits_only_its_own(self, target):
        """Attempts ``..._1`` and ``..._10`` of one task: a listing by name prefix finds both
        (task commit lists everything named like its attempt at once); the first attempt
        neither counts the tenth's started marker as its own nor takes its files."""
        committer = target.committer()
        committer.setup_job()
        tenth = started_task(committer, 0, 10)
        write(committer, tenth, {"tenth.csv": b"10"})
        first = committer.task_attempt(0, 1)
        assert tenth.attempt_id.startswith(first.attempt_id)
        with pytest.raises(FileNotFoundError, match="never set up, or was aborted"):
            committer.commit_task(first)
        committer.setup_task(first)
        write(committer, first, {"part-0.csv": b"first"})
        message = committer.commit_task(first)
        committer.abort_task(tenth)
        committer.commit_job([message])
        assert target.contents() == {"part-0.csv": b"first"}
        assert_nothing_left(target, unpublished=["tenth.csv"])

    # --- two tasks, one file; two jobs, one destination -------------------------------------------

    @scenario("duplicate_destination", lambda c: c.detects_duplicate_destinations)
    def test_two_tasks_writing_one_file_fail_the_job(self, target):
        committer = target.committer()
        messages = two_tasks_writing_one_file(committer)
        with pytest.raises(JobCommitError, match="two tasks write the same file") as failed:
            committer.commit_job(messages)
        assert failed.value.stage == "validate" and "same.csv" in str(failed.value)
        assert isinstance(failed.value.__cause__, InvalidCommitData)
        assert target.files() == []
        assert_nothing_left(target, unpublished=["same.csv"])

    @scenario("duplicate_destination_wins", lambda c: not c.detects_duplicate_destinations)
    def test_two_tasks_writing_one_file_one_of_them_wins(self, target):
        committer = target.committer()
        committer.commit_job(two_tasks_writing_one_file(committer))
        assert target.visible() == ["same.csv"]
        assert target.read("same.csv") in (b"task 0", b"task 1")
        assert_nothing_left(target)

    @scenario("concurrent_jobs", lambda c: c.isolates_jobs)
    def test_two_jobs_to_one_destination_do_not_touch_each_other(self, target):
        first, second = target.committer(), target.committer()
        first.setup_job()
        second.setup_job()
        message1 = run_task(first, 0, {"from-job-1.csv": b"1"})
        message2 = run_task(second, 0, {"from-job-2.csv": b"2"})
        first.commit_job([message1])
        assert target.contents() == {"from-job-1.csv": b"1"}
        if target.kind.deferred_writes:
            assert target.pending() == ["from-job-2.csv"]  # job 2's upload survives
        second.commit_job([message2])
        assert target.contents() == {"from-job-1.csv": b"1", "from-job-2.csv": b"2"}
        assert_nothing_left(target)

    # --- 11. pandas and pyarrow through committer.fs (docs/engines/pandas-pyarrow.md) -------------

    @scenario("pandas_pyarrow")
    def test_pandas_and_pyarrow_write_through_the_committer(self, target):
        with magicfs.write_job(target.dest, committer=target.name, **target.options) as job:
            with job.task(0) as task:
                FRAME.to_parquet(task.path("pandas/part-0.parquet"), filesystem=job.fs, index=False)
                pq.write_table(
                    pa.Table.from_pandas(FRAME, preserve_index=False),
                    task.path("arrow/part-0.parquet"),
                    filesystem=job.fs,
                )
                with fsspec.open(task.url("csv/part-0.csv"), "wt", **job.storage_options) as f:
                    FRAME.to_csv(f, index=False)
            if target.kind.hides_output:
                assert target.visible() == []
        assert target.visible() == [
            "arrow/part-0.parquet",
            "csv/part-0.csv",
            "pandas/part-0.parquet",
        ]
        for name in ("pandas/part-0.parquet", "arrow/part-0.parquet"):
            back = pd.read_parquet(f"{target.root}/{name}", filesystem=target.fs)
            pd.testing.assert_frame_equal(back, FRAME)
        with target.fs.open(f"{target.root}/csv/part-0.csv", "rt") as f:
            pd.testing.assert_frame_equal(pd.read_csv(f), FRAME)
        assert job.summary.files == 3
        assert_nothing_left(target)

    @scenario("pandas_task_url")
    def test_pandas_writes_task_urls_with_the_committers_storage_options(self, target):
        job = magicfs.write_job(target.dest, committer=target.name, **target.options)
        with job, job.task(0) as task:
            FRAME.to_csv(task.url("frame.csv"), storage_options=job.storage_options, index=False)
        with target.fs.open(f"{target.root}/frame.csv", "rt") as f:
            pd.testing.assert_frame_equal(pd.read_csv(f), FRAME)
        assert target.visible() == ["frame.csv"]
        assert_nothing_left(target)

    def test_every_gap_names_a_committer_and_a_scenario_of_this_suite(self):
        for (name, scenario_name), wrong in GAPS.items():
            assert name in COMMITTERS, (name, wrong)
            assert scenario_name in SCENARIOS, (scenario_name, wrong)
        for (name, scenario_name), wrong in self.gaps.items():
            assert name in self.committers, (name, self.store, wrong)
            assert scenario_name in SCENARIOS, (scenario_name, wrong)
