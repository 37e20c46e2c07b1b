"""The staging committers (Netflix's, in Hadoop's S3A): tasks write to local disk.

``committer="directory"`` and ``committer="partitioned"``, S3 only. A task attempt
writes plain local files under the job's local directory (``<buffer_dir>/<job id>``,
``buffer_dir`` private to the user: mode 0700). ``committer.fs`` is a
:class:`~magicfs.MagicFileSystem` over the local disk and ``task.path(...)`` a magic
path that it routes into the attempt's local directory
(``<buffer_dir>/<job>/_temporary/<job>/<NN>/tasks/<attempt>/``), exactly as the manifest
committer's paths on a local disk (:mod:`magicfs.filesystems.routed_view`): this
process's task files are tracked (:mod:`magicfs.task_files`), so task commit refuses an
attempt with a file still open, a file closed by an exception is deleted (never
uploaded), and a write to an attempt that has committed or aborted in this process is
refused at ``open()``. Task setup writes ``<attempt>.started`` next to the attempt's
directory (the manifest committer's layout); task commit without it (never set up,
aborted, or already committed: its local files are gone) raises ``FileNotFoundError``
and changes nothing — the task's earlier committed attempt keeps its record.

S3 only by definition (they stage multipart uploads), they are the one module outside
``magicfs/stores/`` that imports S3's own modules (``stores/s3/``); everything else
asks the registry (:mod:`magicfs.stores.registry`, ``tests/test_layers.py`` checks it).

Task commit uploads every file as a multipart upload to its final key *without
completing it* and hands the pending uploads to the job as a ``.pendingset`` committed
through FileOutputCommitter v1 on a consistent store with rename (``staging_dir``: a
local directory by default — on a multi-machine cluster, a shared filesystem every
executor and the driver see). Job commit completes the uploads exactly as the magic
committer does (:mod:`magicfs.stores.commit_ops`).

Conflict modes, as Hadoop applies them:

* **directory**: over the whole destination. ``fail`` refuses a destination with
  visible data at job setup; ``replace`` deletes the destination's visible data at job
  commit, after every task's record loaded and validated.
* **partitioned**: per partition directory the job writes to (the parent directory of
  each file; files at the top are always appended). ``fail`` refuses at *task* commit,
  before any upload, if one of its partitions exists; ``replace`` deletes exactly the
  partitions the job has output for, at job commit.

Decisions: unique file names (``part-0000-<job uuid>.parquet``) are off by default
(``unique_filenames=True`` turns them on). As in Hadoop the last committed attempt of a
task wins; the uploads of the attempt it replaces are aborted when it is replaced.
Before uploading anything, a task commit saves the keys it will upload to (its intent,
in the staging directory); the job's sweep aborts every upload on those keys that no
committed record names, so a task killed *during* its task commit leaves nothing parked
(Hadoop's staging committers leave such uploads to a bucket lifecycle rule).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import getpass
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any, cast

import fsspec

from ..errors import CommitConflictError, InvalidCommitData, NothingToCommitError
from ..filesystems import MagicFileSystem
from ..filesystems.magic import MagicOptions
from ..filesystems.originals import store_filesystem
from ..job_context import job_context
from ..layouts.manifest import ManifestJobLayout, unstaged
from ..names import PENDINGSET_SUFFIX
from ..paths import join, unstaged_name
from ..protocol.active_jobs import ACTIVE_JOBS
from ..protocol.attempts import Messages
from ..protocol.committer import Loaded, OutputCommitter, Published, TaskAttempt, TaskCommitMessage
from ..protocol.hooks import CommitterHooks, TaskCommit
from ..protocol.journal import JournalKeeper
from ..protocol.tasks import TaskLifecycle, not_started_error, task_committed
from ..records import (
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    declared_checksums,
)
from ..records.job_record import CommittedFile
from ..stores.capabilities import speaks_s3
from ..stores.local import TaskLocalFileSystem
from ..stores.s3.checksums import DEFAULT_ALGORITHM as DEFAULT_CHECKSUM
from ..stores.s3.checksums import checked_algorithm
from ..stores.s3.client import client_config
from ..stores.s3.deferred import S3Deferred
from ..stores.s3.retry import DEFAULT_POLICY, RetryPolicy
from ..stores.s3.store import S3Store, iterate
from ..stores.s3.sweep import sweep_job
from ..stores.s3.tracking import upload_metadata
from ..stores.s3.upload import upload_pending
from ..stores.spool import KeySet
from ..task_files import TaskFile
from .classic import FileOutputCommitter
from .pendingsets import PendingsetRecords, kept_uploads

log = logging.getLogger("magicfs.committer.staging")

TABLE_ROOT = "table_root"
#: Where task commits save the keys they are about to upload to (in the staging directory).
INTENTS_DIR = "_intents"


def add_uuid(path: str, uuid: str) -> str:
    """Hadoop's ``addUUID``: ``dir/part-0000.gz.csv`` -> ``dir/part-0000-<uuid>.gz.csv``.

    Inserted before the first ``.`` of the file name (a dot in a directory does not
    count), appended when there is none, and not at all if the path holds it already.
    """
    if not path or not uuid:
        raise ValueError("add_uuid needs a path and a uuid")
    if path.endswith("/"):
        raise ValueError(f"cannot add a uuid to a directory path: {path!r}")
    if uuid in path:
        return path
    parent, separator, name = path.rpartition("/")
    stem, dot, extensions = name.partition(".")
    return f"{parent}{separator}{stem}-{uuid}{dot}{extensions}"


def partitions_of(relative_paths: list[str]) -> set[str]:
    """The partition directories of the files (``table_root`` for files at the top)."""
    return {p.rpartition("/")[0] or TABLE_ROOT for p in relative_paths}


def _hidden(name: str) -> bool:
    """Is a local name (staged by the task view, or not) hidden by the task's own name?"""
    return unstaged_name(name).startswith(("_", "."))


class StagingFlow(CommitterHooks):
    """The protocol's hooks of :class:`StagingCommitter` (its ``flow``), built from that
    committer's keywords (its docstring says what they are)."""

    name = "directory"

    def __init__(
        self,
        dest: str,
        *,
        partitioned: bool = False,
        buffer_dir: str | None = None,
        staging_dir: str | None = None,
        unique_filenames: bool = False,
        part_size: int = 8 << 20,
        checksum: str | None = DEFAULT_CHECKSUM,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
        max_request_rate: float | None = None,
        **options: Any,
    ):
        super().__init__(dest, **options)
        if not speaks_s3(self.store_fs):
            raise ValueError(f"{dest}: the staging committers need an S3 destination (s3://)")
        self.retry_policy = retry_policy
        self.max_request_rate = max_request_rate
        #: The job's state in this process (:mod:`magicfs.job_context`): its rate and budget.
        self.context = job_context(self.job_id, self.dest)
        self.store = S3Store(self.store_fs, retry_policy, max_request_rate, self.context)
        self.deferred = S3Deferred(self.store, self.job_id, self._scratch_dir)
        self.bucket, self.dest_key = self.store.split(self.dest)
        self.records = PendingsetRecords(
            self, self.deferred, self._read_record, display=self._display
        )
        #: The uploads' part checksums (:mod:`magicfs.stores.s3.checksums`), or ``None``.
        self.checksum = checked_algorithm(checksum)
        self.partitioned = partitioned
        self.name = "partitioned" if partitioned else "directory"
        self.unique_filenames = unique_filenames
        self.part_size = part_size
        user = _user()
        self.buffer_dir = os.path.abspath(
            buffer_dir or os.path.join(tempfile.gettempdir(), f"magicfs-staging-{user}")
        )
        #: Where tasks' magic paths go on local disk: the manifest committer's layout,
        #: rooted at this job's local directory (``<buffer_dir>/<job id>``).
        self.local_layout = ManifestJobLayout(
            os.path.join(self.buffer_dir, self.job_id), self.job_id, self.options.app_attempt
        )
        self._fs = MagicFileSystem(fs=TaskLocalFileSystem())
        self.staging_dir = staging_dir or (
            "file://" + os.path.join(self.buffer_dir, self.job_id, "staging-uploads")
        )
        # Pending sets travel from tasks to the job through FileOutputCommitter v1.
        self.wrapped = FileOutputCommitter(
            self.staging_dir,
            algorithm=1,
            job_id=self.job_id,
            success_file=False,
            threads=self.options.threads,
        )

    def _store_filesystem(
        self, protocol: str, options: dict[str, Any], threads: int
    ) -> fsspec.AbstractFileSystem:
        # Timeouts, botocore's retries and the connection pool: magicfs.stores.s3.client.
        options["config_kwargs"] = client_config(options.get("config_kwargs"), threads)
        return store_filesystem("s3", **options)

    def _scratch_dir(self) -> str:
        """Where store probes may write a throw-away key: beside the job's journal, in
        its hidden tree (cleaned up with it)."""
        return self.journal_keeper().directory

    @property
    def fs(self) -> MagicFileSystem:
        """Tasks write to local disk, their task paths routed to the attempt's directory
        (parent directories are made as needed)."""
        return self._fs

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options of :meth:`work_url_for`'s chained URLs: ``magic`` over ``file``."""
        return {"magic": MagicOptions(), "file": {}}

    def work_url_for(self, attempt_id: str) -> str:
        """``magic::file://<work path>``, as the manifest committer's on a local disk.

        Not a plain ``file://`` URL: pandas opens those with urllib (which cannot write),
        and the chained URL's writes are tracked like ``committer.fs``'s.
        """
        return "magic::file://" + self.work_path_for(attempt_id)

    # -- job ------------------------------------------------------------------------------------

    def claims_destination(self) -> bool:
        """The partitioned committer's conflicts are each partition's, checked at task
        commit: it does not claim the whole destination."""
        return not self.partitioned and super().claims_destination()

    def check_no_conflict(self, stage: str) -> None:
        """``fail``: the whole destination (directory); each partition at task commit
        (partitioned, :meth:`_check_partitions_absent`)."""
        if not self.partitioned:
            super().check_no_conflict(stage)

    def prepare_job(self, resume: bool) -> None:
        _private_directory(self.buffer_dir)
        self.wrapped.setup_job(resume=resume)
        # The wrapped job is this one's bookkeeping: it ends with it, never by itself.
        ACTIVE_JOBS.ended(self.wrapped.job_id, self.wrapped.url)

    def job_active(self) -> bool:
        return self.wrapped.flow.job_active()

    def record_io(self, keeper: JournalKeeper | None) -> S3Store:
        """The destination's store: the journal is in the local staging directory."""
        return self.store

    def journal_keeper(self) -> JournalKeeper:
        return JournalKeeper(
            self.wrapped.flow.store, self.wrapped.flow.job_attempt_dir, self.dest, self.job_id
        )

    # -- tasks -----------------------------------------------------------------------------------

    def work_path_for(self, attempt_id: str) -> str:
        """The magic path tasks write to; ``committer.fs`` routes it to
        :meth:`local_attempt_dir`."""
        return self.local_layout.magic_work_path(attempt_id)

    def local_attempt_dir(self, attempt_id: str) -> str:
        """The private local directory where the attempt's files really are."""
        return self.local_layout.task_attempt_dir(attempt_id)

    def prepare_task(self, task: TaskAttempt) -> None:
        _private_directory(self.buffer_dir)
        os.makedirs(self.local_attempt_dir(task.attempt_id), mode=0o700, exist_ok=True)
        self.wrapped.setup_task(self._wrapped_task(task))
        with open(self.local_layout.started_marker(task.attempt_id), "wb") as marker:
            marker.write(task.attempt_id.encode())

    def _check_started(self, task: TaskAttempt) -> None:
        """A task attempt commits only if it was set up, and has not aborted or committed."""
        if not os.path.exists(self.local_layout.started_marker(task.attempt_id)):
            raise not_started_error(self, task)

    def needs_task_commit(self, task: TaskAttempt) -> bool:
        self._check_started(task)
        return bool(local_files(self.local_attempt_dir(task.attempt_id)))

    def commit_task_files(self, commit: TaskCommit, known: list[TaskFile]) -> TaskCommitMessage:
        task = commit.task
        start = time.monotonic()
        self._check_started(task)  # before anything: an earlier attempt's record stays
        files = local_files(self.local_attempt_dir(task.attempt_id))
        commits: list[SinglePendingCommit] = []
        try:
            if self.partitioned and self.options.conflict_mode == "fail":
                self._check_partitions_absent([relative for _, relative in files])
            # The keys this commit will upload to, saved first: if this process dies
            # mid-upload, the job's sweep still finds the uploads it created.
            keys = [self._destination_key(relative) for _, relative in files]
            self.wrapped.flow.store.write_bytes(self._intent_path(task), json.dumps(keys).encode())
            commits = self._upload_all(task, files)
            pendingset = PendingSet(
                job_id=self.job_id,
                commits=commits,
                iostatistics=IOStatisticsSnapshot(
                    counters={"committer_task_file_count": len(commits)}
                ),
                extra_data={TASK_ATTEMPT_ID_KEY: task.attempt_id, **declared_checksums(commits)},
            )
            wrapped = self._wrapped_task(task)
            record = join(wrapped.work_path, task.task_id + PENDINGSET_SUFFIX)
            self.wrapped.flow.store.write_bytes(record, pendingset.to_bytes())
            self._abort_superseded(task)
            self.wrapped.commit_task(wrapped)
        except BaseException:
            self.records.operations().abort(commits)
            TaskLifecycle(self).abort_task(task)
            raise
        self._remove_local(task)  # uploaded; the attempt cannot commit again
        record = self._committed_record(task.task_id)
        return task_committed(
            self, task, record, len(commits), pendingset.total_bytes, start, "uploaded"
        )

    def _intent_path(self, task: TaskAttempt) -> str:
        return join(self.wrapped.flow.job_attempt_dir, INTENTS_DIR, task.attempt_id + ".json")

    def abort_task_files(self, task: TaskAttempt, known: list[TaskFile]) -> None:
        """Delete the local data and the started marker; nothing was uploaded before
        task commit. An aborted attempt cannot commit."""
        self._remove_local(task)
        self.wrapped.abort_task(self._wrapped_task(task))

    def _remove_local(self, task: TaskAttempt) -> None:
        """Delete the attempt's started marker (it can commit no more), then its files."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.local_layout.started_marker(task.attempt_id))
        shutil.rmtree(self.local_attempt_dir(task.attempt_id), ignore_errors=True)

    def _destination_key(self, relative: str) -> str:
        relative = add_uuid(relative, self.job_id) if self.unique_filenames else relative
        return f"{self.dest_key}/{relative}" if self.dest_key else relative

    def _upload_all(
        self, task: TaskAttempt, files: list[tuple[str, str]]
    ) -> list[SinglePendingCommit]:
        uploaded: list[SinglePendingCommit] = []

        def upload(item: tuple[str, str]) -> SinglePendingCommit:
            local, relative = item
            partition = relative.rpartition("/")[0]
            with self.stats.track("committer_upload_file"):
                return upload_pending(
                    self.store,
                    local,
                    self.bucket,
                    self._destination_key(relative),
                    part_size=self.part_size,
                    text=f"partition: {partition}" if partition else "",
                    metadata=upload_metadata(self.job_id, task.attempt_id),
                    checksum=self.checksum,
                )

        with concurrent.futures.ThreadPoolExecutor(self.options.threads, "magicfs-staging") as pool:
            futures = [pool.submit(upload, item) for item in files]
            failure = None
            for future in futures:
                try:
                    commit = future.result()
                except BaseException as e:  # keep collecting: every upload made must be aborted
                    failure = failure or e
                    continue
                commit.job_id, commit.task_id = self.job_id, task.attempt_id
                uploaded.append(commit)
        if failure is not None:
            self.records.operations().abort(uploaded)
            raise failure
        return uploaded

    def _check_partitions_absent(self, relatives: list[str]) -> None:
        for partition in sorted(partitions_of(relatives) - {TABLE_ROOT}):
            path = join(self.dest, partition)
            if _exists(self.store, path):
                raise CommitConflictError(
                    f"{self.store_fs.unstrip_protocol(path)}: partition already exists and "
                    "conflict_mode is 'fail'"
                )

    def _wrapped_task(self, task: TaskAttempt) -> TaskAttempt:
        return self.wrapped.task_attempt(task.task_index, task.attempt_number)

    def _committed_record(self, task_id_: str) -> str:
        return join(self.wrapped.flow.committed_task_dir(task_id_), task_id_ + PENDINGSET_SUFFIX)

    def _abort_superseded(self, task: TaskAttempt) -> None:
        """Another attempt of this task committed before: abort its uploads (last wins)."""
        try:
            previous = self._load_record(self._committed_record(task.task_id))
        except (FileNotFoundError, InvalidCommitData):
            return
        if previous.task_attempt_id != task.attempt_id:
            self.records.operations().abort(previous.commits)

    # -- job commit: the hooks its stages call (magicfs.protocol.job_commit) ----------------

    def load_records(self, records: list[str], messages: Messages | None = None) -> Loaded:
        return self.records.load(records)

    def validate_records(self, loaded: Loaded) -> None:
        self.records.validate(loaded)

    def publish(self, loaded: Loaded) -> Published:
        return self.records.publish(loaded)

    def unpublish(self, loaded: Loaded) -> int:
        return self.records.unpublish(loaded)

    def committed_files(self, loaded: Loaded) -> Iterator[CommittedFile] | None:
        return self.records.committed_files(loaded)

    def records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if messages is not None:
            return self._check_messages(messages, self.wrapped.flow.job_attempt_dir)
        records = self._committed_records()
        if not was_active and not records:
            _remove_ended_job_directory(self.buffer_dir, self.job_id)
            raise NothingToCommitError(
                f"job {self.job_id}: nothing to commit at {self.url}: it was never set up, or "
                "has already been committed or aborted"
            )
        return records

    def _committed_records(self) -> list[str]:
        return [
            self._committed_record(_basename(entry["name"]))
            for entry in self.wrapped.flow.store.children(self.wrapped.flow.job_attempt_dir)
            if entry.get("type") == "directory"
            and not _basename(entry["name"]).startswith(("_", "."))
        ]

    def _read_record(self, path: str) -> bytes:
        return self.wrapped.flow.store.read_bytes(path, PendingSet.MAX_BYTES)

    def _display(self, path: str) -> str:
        return cast(str, self.wrapped.flow.store.fs.unstrip_protocol(path))

    def _load_record(self, path: str) -> PendingSet:
        return PendingSet.from_json(self._read_record(path), source=self._display(path))

    def replaced_partitions(self, loaded: Loaded) -> list[str] | None:
        if not self.partitioned:
            return None
        return written_partitions(self.dest_key, loaded.payload.commits())

    def plan_replace(self, loaded: Loaded) -> list[str]:
        partitions = self.replaced_partitions(loaded)
        if partitions is None:
            return self.options.destination.visible_files()
        doomed: list[str] = []
        for partition in sorted(partitions):  # every file under it (directory markers aside)
            _, key = self.store.split(join(self.dest, partition))
            listed = iterate(self.store, self.store.alist_keys(self.bucket, f"{key}/"))
            doomed.extend(path for path in listed if not path.endswith("/"))
        log.info("job %s: replacing %d partitions", self.job_id, len(partitions))
        return doomed

    def delete_files(self, paths: list[str]) -> None:
        self.store.run(self.store.adelete_objects(self.bucket, [self._key(p) for p in paths]))

    def save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        success = self.records.success_data(
            loaded,
            published,
            start,
            rows,
            f"magicfs StagingCommitter ({self.name}) for job {self.job_id}",
            **{"magicfs.staging_dir": self.staging_dir},
        )
        if self.options.success_file:
            self.store.run(
                self.store.aput_object(
                    self.bucket, self._key(self.options.success_path), success.to_bytes()
                )
            )
        return success.filenames

    # -- abort and clean-up ----------------------------------------------------------------

    def clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """Abort every upload the job made and did not publish, then delete its records.

        Uploads are found by their records (the committed task records) and by key (the
        tasks' intents), so those of a task killed in the middle of its task commit are
        found too.
        """
        keep = kept_uploads(published)
        records = self._committed_records()
        if published is None:
            for commits in self._readable(records):
                self.records.operations().abort(commits)

        def owned(shared: set[str]) -> set[str]:  # asked only for keys another job writes too
            return {
                c.upload_id
                for commits in self._readable(records)
                for c in commits
                if c.destination_key in shared
            }

        keys = KeySet()  # on disk: a job of a million files names a million keys
        try:
            intents = join(self.wrapped.flow.job_attempt_dir, INTENTS_DIR)
            for entry in self.wrapped.flow.store.children(intents):
                data = self.wrapped.flow.store.read(entry["name"], 16 << 20)
                with contextlib.suppress(ValueError, TypeError):
                    keys.update(k for k in json.loads(data or b"[]") if isinstance(k, str))
            sweep_job(self.store, self.bucket, self.dest_key, self.job_id, keys, keep, owned)
        finally:
            keys.discard()
        self.wrapped.cleanup_job()
        _remove_ended_job_directory(self.buffer_dir, self.job_id)

    def _readable(self, records: list[str]) -> Iterator[list[SinglePendingCommit]]:
        """The commits of each task record, one record at a time; unreadable ones skipped."""
        for record in records:
            try:
                yield self._load_record(record).commits
            except (FileNotFoundError, InvalidCommitData) as e:
                log.warning("job %s: skipping unreadable task record: %s", self.job_id, e)

    def _key(self, path: str) -> str:
        return self.store.split(path)[1]


class StagingCommitter(OutputCommitter):
    """``committer="directory"`` (``partitioned=False``) or ``"partitioned"``.

    Options beyond :class:`OutputCommitter`'s: ``retry_policy`` (how every S3 call is
    retried: :mod:`magicfs.stores.s3.retry`) and ``max_request_rate`` (a fixed cap, in
    requests per second, on this job's calls: :mod:`magicfs.stores.s3.rate`); the job
    commit is the pendingset one the magic-layout committer runs, a collaborator both
    hold (:class:`~.pendingsets.PendingsetRecords`).
    """

    name = "directory"
    flow_class = StagingFlow
    flow: StagingFlow


def written_partitions(dest_key: str, commits: Iterable[SinglePendingCommit]) -> list[str]:
    """The partitions (directories below the destination ``dest_key``) ``commits``
    write into; the destination's own top level is none."""
    prefix = f"{dest_key}/" if dest_key else ""
    partitions = {c.destination_key[len(prefix) :].rpartition("/")[0] for c in commits}
    return sorted(partitions - {""})


def _exists(store: S3Store, path: str) -> bool:
    """An object at ``path``, or under it (s3fs's ``exists``, through the store's
    retried and paced calls)."""
    bucket, key = store.split(path)
    under = iterate(store, store.alist_keys(bucket, f"{key}/"))
    if next(under, None) is not None:
        return True
    return store.run(store.ahead_object(bucket, key)) is not None


def local_files(top: str) -> list[tuple[str, str]]:
    """(local path, relative path) of every file below an attempt's local directory
    ``top``, skipping names the task made hidden (``_x``, ``.x``, read unstaged: the task
    view stages every name as ``_<name>.magicfs-task``); the relative path is the task's name
    for it (:func:`~magicfs.layouts.manifest.unstaged`: the task view stages every name
    with a suffix)."""
    found = []
    for root, directories, names in os.walk(top):
        directories[:] = sorted(d for d in directories if not _hidden(d))
        for name in sorted(names):
            if not _hidden(name):
                path = os.path.join(root, name)
                relative = os.path.relpath(path, top).replace(os.sep, "/")
                found.append((path, unstaged(relative)))
    return found


def _remove_ended_job_directory(buffer_dir: str, job_id: str) -> None:
    """Remove the local directory of a job that is over: after its clean-up, or at a
    commit that finds it ended with nothing to commit.

    A clean-up killed after the journal went (with the job's records, by the wrapped
    committer) and before this directory did leaves it behind, and a retried commit is
    what a user runs then. Ended, with no record and no journal, the job needs nothing
    in it: its uploads were swept before its records were deleted.
    """
    local = os.path.join(buffer_dir, job_id)
    if os.path.isdir(local):
        log.info("job %s: removing its local directory %s", job_id, local)
        shutil.rmtree(local, ignore_errors=True)


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # containers without a user name
        return str(os.getuid())


def _private_directory(path: str) -> None:
    """Create ``path`` readable by this user only (staged data is the job's output)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
