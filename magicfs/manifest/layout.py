"""Where a manifest committer job keeps its files, and how magic paths map into them.

Hadoop's layout (its code, not its stale docs)::

    dest/_temporary/<job>/                           job dir (clean-up deletes it)
        _magicfs_job.json                            the job is active (see magicfs.layout)
        <NN>/                                        job attempt dir, NN = app attempt
            tasks/<attempt>/<relative files>         a task attempt's working directory
            tasks/<attempt>.started                  the attempt was set up (and not aborted)
            tasks/<attempt>-manifest.json            that attempt's own committed manifest
            manifests/<task id>-manifest.json        last committed attempt of each task
            manifests/<attempt>-manifest.json.tmp    a manifest being saved
            _SUCCESS.tmp                             renamed to dest/_SUCCESS at job commit

**Magic paths on rename stores.** Tasks write to the same magic paths on every store
(``task.path(...)`` is ``dest/__magic_job-<job>/job-<job>/<NN>/tasks/<attempt>/__base/..``).
On a rename store nothing can be deferred, so :class:`~magicfs.MagicFileSystem` sends
such a path to the attempt's working directory instead::

    dest/__magic_job-7/job-7/00/tasks/a_0/__base/year=2024/p.parquet
        -> dest/_temporary/7/00/tasks/a_0/year=2024/p.parquet

Below ``__base`` the tree is kept; a path without ``__base`` keeps only its file name,
exactly as its final destination on S3 would. Magic paths that name no task attempt
(``dest/__magic/x``, or the magic directory itself) cannot be mapped and are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import JOB_MARKER, STARTED_SUFFIX
from ..paths import BASE, JOB_DIR_PREFIX, MAGIC_JOB_PREFIX, TASKS_DIR, join, split_magic_path

TEMPORARY = "_temporary"
MANIFESTS_DIR = "manifests"
MANIFEST_SUFFIX = "-manifest.json"


@dataclass(frozen=True)
class ManifestJobLayout:
    """Paths of one manifest-committer job under destination ``dest``."""

    dest: str
    job_id: str
    app_attempt: int = 0

    @property
    def temp_root(self) -> str:
        return join(self.dest, TEMPORARY)

    @property
    def job_dir(self) -> str:
        return join(self.temp_root, self.job_id)

    @property
    def job_marker(self) -> str:
        return join(self.job_dir, JOB_MARKER)

    @property
    def job_attempt_dir(self) -> str:
        return join(self.job_dir, f"{self.app_attempt:02d}")

    @property
    def tasks_dir(self) -> str:
        return join(self.job_attempt_dir, TASKS_DIR)

    @property
    def manifests_dir(self) -> str:
        return join(self.job_attempt_dir, MANIFESTS_DIR)

    def task_attempt_dir(self, attempt_id: str) -> str:
        return join(self.tasks_dir, attempt_id)

    def started_marker(self, attempt_id: str) -> str:
        return join(self.tasks_dir, attempt_id + STARTED_SUFFIX)

    def attempt_manifest(self, attempt_id: str) -> str:
        return join(self.tasks_dir, attempt_id + MANIFEST_SUFFIX)

    def manifest(self, task_id: str) -> str:
        return join(self.manifests_dir, task_id + MANIFEST_SUFFIX)

    def temp_manifest(self, attempt_id: str) -> str:
        return join(self.manifests_dir, attempt_id + MANIFEST_SUFFIX + ".tmp")

    @property
    def temp_success(self) -> str:
        return join(self.job_attempt_dir, "_SUCCESS.tmp")

    def magic_work_path(self, attempt_id: str) -> str:
        """The magic path tasks write to (the same on every store)."""
        return join(
            self.dest,
            MAGIC_JOB_PREFIX + self.job_id,
            JOB_DIR_PREFIX + self.job_id,
            f"{self.app_attempt:02d}",
            TASKS_DIR,
            attempt_id,
            BASE,
        )


def retarget(path: str) -> str | None:
    """The working-directory path for a magic ``path`` (``None`` if it is not magic).

    Raises ``ValueError`` for a magic path that names no task attempt of a
    ``__magic_job-<id>`` directory.
    """
    magic = split_magic_path(path)
    if magic is None:
        return None
    job_id, children = magic.job_id, magic.children
    if (
        not magic.magic.startswith(MAGIC_JOB_PREFIX)
        or not job_id
        or len(children) < 4
        or children[0] != JOB_DIR_PREFIX + job_id
        or children[2] != TASKS_DIR
    ):
        raise ValueError(
            f"{path}: on rename stores a magic path must name a task attempt, "
            f"<dest>/{MAGIC_JOB_PREFIX}<job>/{JOB_DIR_PREFIX}<job>/<NN>/{TASKS_DIR}/<attempt>/..."
            " (use task.path(...))"
        )
    below = children[4:]
    if below and below[0] == BASE:
        relative = below[1:]
    elif below:
        relative = (below[-1],)  # as on S3: without __base only the file name survives
    else:
        relative = ()
    attempt_dir = join(
        magic.destination_dir, TEMPORARY, job_id, children[1], TASKS_DIR, children[3]
    )
    return join(attempt_dir, *relative)


def work_path_of(path: str) -> tuple[str, str]:
    """For a magic path, its attempt's (working directory, magic work path) pair."""
    magic = split_magic_path(path)
    assert magic is not None
    attempt_dir = retarget(join(magic.magic_dir, *magic.children[:4]))
    work_path = join(magic.magic_dir, *magic.children[:4], BASE)
    assert attempt_dir is not None
    return attempt_dir, work_path


def unretarget(path: str, attempt_dir: str, work_path: str) -> str:
    """Inverse of :func:`retarget` for results listed below ``attempt_dir``."""
    if path == attempt_dir:
        return work_path
    if path.startswith(attempt_dir + "/"):
        return work_path + path[len(attempt_dir) :]
    return path
