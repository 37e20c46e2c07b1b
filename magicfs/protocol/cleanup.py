"""A committed job's clean-up, off the commit's critical path.

A job is committed once ``_SUCCESS`` and the journal's ``committed`` phase are saved:
the output is whole and a retried ``commit_job()`` only cleans up. What follows — the
sweep of the job's uploads, deleting its ``__magic_job-*`` tree, the journal last —
changes nothing a reader sees, and on a many-task job it was a third of the commit's
time (HADOOP-18568 made it optional in Hadoop for the same reason). So the committer's
``cleanup`` option says when it runs:

* ``"inline"`` (default): ``commit_job()`` returns after the clean-up, so when it
  returns nothing of the job is left (what every caller relied on before this option).
* ``"background"``: ``commit_job()`` returns once the job is committed; the clean-up
  runs on a thread the committer owns. ``committer.wait_cleanup()`` waits for it and
  returns what it left (``None``: nothing). ``commit_job()``, ``abort_job()`` and
  ``cleanup_job()`` of the same committer wait for it first.
* ``"off"``: no clean-up (Hadoop's ``fs.s3a.committer.magic.cleanup.enabled=false``):
  the journal stays at ``committed``, ``magicfs jobs`` lists the job, and
  ``magicfs jobs cleanup`` (``cleanup_job()``) finishes it. Uploads of failed or
  speculative attempts stay parked until then; the summary's ``cleanup_incomplete``
  says so and names the command.

**Nothing is left silently.** The thread is not a daemon and a hook runs at interpreter
exit, *before* ``concurrent.futures`` refuses new work (:func:`magicfs.lifecycle.at_exit`),
so a script or a Spark/Dask/Ray driver that ends right after ``commit_job()`` waits for
its clean-ups, logging which. A process killed meanwhile leaves a job whose journal says
``committed``: every crash guarantee is the journal's, as with an inline clean-up cut
short (``magicfs jobs`` lists it, ``magicfs jobs cleanup`` finishes it, a retried
``commit_job()`` finishes it).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

from ..lifecycle import at_exit

log = logging.getLogger("magicfs.committer")

#: The values of the committers' ``cleanup`` option.
CLEANUP_MODES = ("background", "inline", "off")

_RUNNING: weakref.WeakSet[BackgroundCleanup] = weakref.WeakSet()
_RUNNING_LOCK = threading.Lock()


class BackgroundCleanup:
    """One job's clean-up running on its own (non-daemon) thread.

    ``work`` returns what clean-up left (``None``: nothing); an exception from it is
    logged and reported the same way, never raised into another thread.
    """

    def __init__(self, job_id: str, work: Callable[[], str | None]):
        self.job_id = job_id
        self._work = work
        self._result: str | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"magicfs-cleanup-{job_id}", daemon=False
        )
        with _RUNNING_LOCK:
            _RUNNING.add(self)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._work()
        except BaseException as e:  # reported by wait(); the output is whole either way
            self._result = f"clean-up of job {self.job_id} failed: {type(e).__name__}: {e}"
            log.warning("job %s: %s", self.job_id, self._result)
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(self)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> str | None:
        """Wait for the clean-up; what it left (``None``: nothing). ``TimeoutError`` if
        it is still running after ``timeout`` seconds."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the clean-up of job {self.job_id} is still running")
        return self._result


def wait_for_all() -> None:
    """Interpreter exit: let every clean-up still running finish (logged)."""
    with _RUNNING_LOCK:
        running = [c for c in _RUNNING if c.running]
    for cleanup in running:
        log.info("waiting for the clean-up of job %s before exiting", cleanup.job_id)
        cleanup.wait()


# At exit while thread pools still accept work (magicfs.lifecycle).
at_exit(wait_for_all)
