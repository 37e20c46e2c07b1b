"""Every name magicfs gives a file or directory on a store, defined once.

The lowest layer: imports nothing. Hadoop's names come first (they must match Hadoop's
byte for byte, see ``../shared/reference``), then magicfs's own. Modules that use a
name import it from here (``paths``, the layouts, the records, the committers, the CLI).
"""

from __future__ import annotations

# --- Hadoop's names ----------------------------------------------------------------------

#: A path element that makes a path magic (S3A: ``__magic``), and the per-job form
#: ``__magic_job-<job id>`` (Hadoop 3.3.5+, HADOOP-17833).
MAGIC = "__magic"
MAGIC_JOB_PREFIX = "__magic_job-"
#: Elements after ``__base`` under a magic path keep their place in the final path.
BASE = "__base"
#: A job attempt's directory (``job-<job id>``) and its tasks' directory.
JOB_DIR_PREFIX = "job-"
TASKS_DIR = "tasks"
#: One file's commit data, and one task's set of them (S3A committers).
PENDING_SUFFIX = ".pending"
PENDINGSET_SUFFIX = ".pendingset"
#: The job summary every committer writes at the destination.
SUCCESS_FILE = "_SUCCESS"
#: FileOutputCommitter's and the manifest committer's working directory.
TEMPORARY = "_temporary"
#: The manifest committer's task manifests: ``manifests/<task id>-manifest.json``.
MANIFESTS_DIR = "manifests"
MANIFEST_SUFFIX = "-manifest.json"

# --- magicfs's own -----------------------------------------------------------------------

#: The job marker: while it exists the job is active (the zombie handshake).
JOB_MARKER = "_magicfs_job.json"
#: The classic committers' job marker, ``_temporary/<app attempt>/_magicfs_job-<job id>.json``:
#: their jobs share that directory, so each marker's name carries its job id.
CLASSIC_JOB_MARKER_PREFIX = "_magicfs_job-"
CLASSIC_JOB_MARKER_SUFFIX = ".json"
#: Written by task set-up, deleted by task abort: only a started attempt may commit (the
#: manifest and staging committers; the magic layout wrote it in earlier versions).
STARTED_SUFFIX = ".started"
#: Written by the abort of an attempt in another process than the one that set it up:
#: the attempt may never commit (the magic layout: ``magicfs.committers.magic_layout``).
ABORTED_SUFFIX = ".aborted"
#: ``<magic dir>/_magicfs_job.touched/<task id>``: something of the task is on the store
#: that the process which set an attempt of it up may not know (another process wrote,
#: deleted or aborted there, or a later attempt of the task commits). A task commit that
#: trusts its process's memory (``in_memory``) lists the task's attempts only then: the
#: job check it makes anyway lists the job marker's name, which these share
#: (``magicfs.committers.magic_layout``).
TOUCHED_DIR = "_magicfs_job.touched"
#: A deferred task file's intent marker (S3, Azure block lists, the in-process store) is
#: its task path with the elements below ``__base`` staged (:data:`STAGED_PREFIX`,
#: :data:`STAGED_SUFFIX`) and this suffix (:func:`magicfs.paths.marker_path`), its
#: ``.pending`` record the same with :data:`PENDING_SUFFIX`: so that no glob of data
#: (``dest/**/*.parquet``, ``dest/**/year=1/*``, ``dest/**/part-*``) matches either
#: while the job runs. 0.1.0 put the marker at the task path itself and the record at
#: ``<task path>.pending``; readers of a job's tree still read both
#: (:func:`magicfs.paths.marked_file`, :func:`magicfs.paths.pending_file`).
MARKER_SUFFIX = ".magicfs-marker"
#: Put around every path element a task writes below its attempt's working directory on a rename
#: store (``tasks/<attempt>/_year=1.magicfs-task/_part-0.parquet.magicfs-task``; the manifest's
#: ``dest`` names the file without them), and around those below ``__base`` of a deferred task
#: file's marker and record (:data:`MARKER_SUFFIX`): no glob of the destination's data, partition
#: directories or file-name prefixes (``dest/**/*.parquet``, ``dest/**/year=1/*``,
#: ``dest/**/part-*``) reaches the files a running job stages there, and the leading ``_`` is the
#: hidden-file mark Hadoop, Spark and pyarrow skip (:class:`magicfs.layouts.manifest.AttemptRoute`).
#: 0.1.0 added neither: its names are still read.
STAGED_PREFIX = "_"
STAGED_SUFFIX = ".magicfs-task"
#: The commit journal, in the job's own directory: how an interrupted commit resumes.
JOURNAL_FILE = "_magicfs_commit.json"
#: Its delete pages beside it: ``_magicfs_commit.deletes-<5-digit page number>.json``.
JOURNAL_PAGE_PREFIX = "_magicfs_commit.deletes-"
JOURNAL_PAGE_SUFFIX = ".json"
#: In a magic job's tree: the job found no other job covering its destination at set-up,
#: so its writers put no per-file intent marker (:mod:`magicfs.stores.s3.tracking`).
UNMARKED_FILE = "_magicfs_unmarked"
#: The job index, at the top of a bucket or container: one entry per job, at
#: ``__magicfs_jobs/<destination key>/<job id>.json`` (:mod:`magicfs.layouts.job_index`).
JOB_INDEX = "__magicfs_jobs"
JOB_INDEX_SUFFIX = ".json"
#: A destination's claims, ``<destination>/_magicfs/claims/<name>``: a create-only record
#: naming the one job that holds it (:mod:`magicfs.stores.claims`). ``fail``: the claim a
#: ``conflict_mode="fail"`` job holds while it commits.
CLAIMS_DIR = "_magicfs/claims"
FAIL_CLAIM = "fail"
#: At the top of a bucket: ``_magicfs/claims/create/<SHA-256 of a key>``, held by the one
#: job publishing a create-only (``"xb"``) file at that key
#: (:mod:`magicfs.stores.s3.create_claims`).
CREATE_CLAIMS_DIR = "_magicfs/claims/create"


def journal_page(number: int) -> str:
    """The name of the commit journal's delete page ``number``."""
    return f"{JOURNAL_PAGE_PREFIX}{number:05d}{JOURNAL_PAGE_SUFFIX}"


#: A destination's job commit records (``magicfs.records.job_record``):
#: ``<dest>/_magicfs/jobs/<sequence>-<job id>.json`` (the head, written last) and
#: ``<sequence>-<job id>.files.jsonl.gz`` beside it (the job's files). The ``_`` keeps them out of
#: Spark's, Hive's and pyarrow's data, and out of what ``fail``/``replace`` see as data.
JOB_RECORDS_DIR = "_magicfs/jobs"
JOB_RECORD_SUFFIX = ".json"
JOB_FILE_LIST_SUFFIX = ".files.jsonl.gz"
#: A replace job's old files still to delete, beside its head (``magicfs jobs vacuum``).
RETIRE_LIST_SUFFIX = ".retire.jsonl.gz"
