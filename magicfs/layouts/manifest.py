"""Where a manifest committer job keeps its files, and how magic paths map into them.

Hadoop's layout (its code, not its stale docs)::

    dest/_temporary/<job>/                           job dir (clean-up deletes it)
        _magicfs_job.json                            the job is active (see magicfs.layouts.magic)
        <NN>/                                        job attempt dir, NN = app attempt
            tasks/<attempt>/<relative files>         a task attempt's working directory
                                                     (names staged: see below)
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
        -> dest/_temporary/7/00/tasks/a_0/_year=2024.magicfs-task/_p.parquet.magicfs-task

Below ``__base`` the tree is kept; a path without ``__base`` keeps only its file name,
exactly as its final destination on S3 would. Each element below the attempt's
directory starts with :data:`~magicfs.names.STAGED_PREFIX` and ends with
:data:`~magicfs.names.STAGED_SUFFIX` (:func:`staged_names`): while the job runs, a
reader globbing the destination for its data by suffix, partition or file-name prefix
(``dest/**/*.parquet``, as DuckDB, polars and fsspec do, ``dest/**/year=2024/*``,
``dest/*/year=2024/*``, ``dest/**/part-*``) finds none of the files it stages, which
Hadoop's own layout (real names under ``_temporary``) would show. The task sees its
files under its own names (:meth:`AttemptRoute.back`), its manifest's ``dest`` names
each file's final path without them (and ``source`` the staged file: Hadoop's classes
rename what the manifest says), and job commit's rename drops them. An attempt
directory written without them (by 0.1.0, or by Hadoop's tasks) is read as it is
(:func:`unstaged`). Magic paths that name no task attempt
(``dest/__magic/x``, or the magic directory itself) cannot be mapped and are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..names import (
    BASE,
    JOB_DIR_PREFIX,
    JOB_MARKER,
    MAGIC_JOB_PREFIX,
    MANIFEST_SUFFIX,
    MANIFESTS_DIR,
    STARTED_SUFFIX,
    TASKS_DIR,
    TEMPORARY,
)
from ..paths import join, split_magic_path, staged_name, unstaged_name


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
    def magic_dir(self) -> str:
        """Where tasks' magic paths point (nothing is stored there when writes go through
        magicfs, which routes them to the attempt directories)."""
        return join(self.dest, MAGIC_JOB_PREFIX + self.job_id)

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


@dataclass(frozen=True)
class AttemptRoute:
    """How one task attempt's magic paths map to its working directory, and back.

    ``magic_root`` is ``<dest>/__magic_job-<job>/job-<job>/<NN>/tasks/<attempt>``,
    ``attempt_dir`` the working directory the files really go to. Below ``__base``
    the tree is kept; without ``__base`` only the file name survives (as on S3).
    Paths in results map back below ``<magic_root>/__base`` (the task's work path).
    """

    magic_root: str
    attempt_dir: str

    @property
    def work_path(self) -> str:
        return join(self.magic_root, BASE)

    def into(self, path: str) -> str:
        """The working-directory path of magic ``path`` (a trailing ``/`` is kept)."""
        trail = "/" if path.endswith("/") and not path.endswith("//") else ""
        magic = split_magic_path(path)
        assert magic is not None
        below = magic.children[4:]
        if below and below[0] == BASE:
            relative = below[1:]
        elif below:
            relative = (below[-1],)  # as on S3: without __base only the file name survives
        else:
            relative = ()
        routed = join(self.attempt_dir, *staged_names(relative))
        return routed + trail if relative or trail else routed

    def back(self, path: str) -> str:
        """A path found in the working directory, as the task sees it (others unchanged)."""
        if path.rstrip("/") == self.attempt_dir:
            return self.work_path + path[len(self.attempt_dir) :]
        if path.startswith(self.attempt_dir + "/"):
            return self.work_path + "/" + unstaged(path[len(self.attempt_dir) + 1 :])
        return path


def staged_names(relative: Iterable[str]) -> list[str]:
    """The names a task's path elements get in its attempt's working directory
    (:func:`~magicfs.paths.staged_name`), so that no glob of the destination's data
    (``dest/**/*.parquet``, ``dest/**/year=2024/*``, ``dest/**/part-*``) reaches a file
    a running job stages."""
    return [staged_name(name) for name in relative]


def unstaged(relative: str) -> str:
    """A path below an attempt's working directory (``/``-separated, relative) as the task
    named it: :func:`staged_names` undone element by element
    (:func:`~magicfs.paths.unstaged_name`); elements not staged (files 0.1.0, Hadoop's
    tasks or another writer put there) keep their names. A trailing ``/`` is kept."""
    return "/".join(map(unstaged_name, relative.split("/")))


def route_for(path: str) -> AttemptRoute | None:
    """The :class:`AttemptRoute` of a magic ``path`` (``None`` if it is not magic).

    Raises ``ValueError`` for a magic path that names no task attempt of a
    ``__magic_job-<id>`` directory: on a rename store there is nowhere to put it.
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
    return AttemptRoute(
        magic_root=join(magic.magic_dir, *children[:4]),
        attempt_dir=join(
            magic.destination_dir, TEMPORARY, job_id, children[1], TASKS_DIR, children[3]
        ),
    )
