"""This process's exit and fork: the one place magicfs hooks into either.

Other modules say what they need done and this module registers it with the
interpreter once:

* :func:`at_exit`: run before the interpreter stops its thread pools. Hooks run last
  registered first (as :mod:`atexit`'s do). They are what must not be lost when a script
  ends right after writing or committing: task files still closing in the background
  (:mod:`magicfs.task_files`), writers' job checks (:mod:`magicfs.stores.deferred_writer`),
  background clean-ups (:mod:`magicfs.protocol.cleanup`).
* :func:`at_last_exit`: run at exit once the process's other threads have ended (a
  job committed on a thread of the user's own is not reported as left active):
  :func:`atexit.register`, public.
* :func:`after_fork`: run in a forked child. A child inherits its parent's registries
  (open task files, job contexts, running checks) but none of its threads: each hook
  forgets what belongs to the parent.

**Why one private call remains.** Forks use :func:`os.register_at_fork`, a public API.
Exit cannot use :func:`atexit.register` and keep the behaviour: the interpreter runs
:mod:`atexit` hooks only after ``threading._shutdown``, which first runs
:mod:`concurrent.futures`'s own exit hook; from then on every ``ThreadPoolExecutor``
refuses new work (``RuntimeError: cannot schedule new futures after interpreter
shutdown``). A task file finishing its close at exit still sends requests, and s3fs's
client resolves host names on asyncio's default executor, a thread pool: from an
:mod:`atexit` hook those requests fail and the file is lost. No public API runs
earlier (a watcher thread joining the main thread wakes only after those hooks too).
So the one hook is registered with ``threading._register_atexit``, the call
:mod:`concurrent.futures` itself uses, after :mod:`concurrent.futures.thread` has
registered its own (hooks run last registered first, so ours runs before it); on an
interpreter without it (another implementation), :func:`atexit.register`, where the
hooks still run but their requests may fail. ``tests/test_job_context.py`` shows both
halves: a hook registered here can still use a thread pool at exit, one registered with
:func:`atexit.register` cannot.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 (its exit hook must be registered before ours)
import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger("magicfs.lifecycle")

_lock = threading.Lock()
_exit_hooks: list[Callable[[], None]] = []
_fork_hooks: list[Callable[[], None]] = []


def at_exit(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` at interpreter exit while thread pools still take work (module
    docstring); last registered, first run. Returns ``hook`` (usable as a decorator)."""
    with _lock:
        _exit_hooks.append(hook)
    return hook


def at_last_exit(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` at interpreter exit after the process's non-daemon threads have
    ended (the warning about jobs left active, :mod:`magicfs.protocol.active_jobs`).
    Returns ``hook``."""
    atexit.register(hook)
    return hook


def after_fork(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` in a forked child, in registration order. Returns ``hook``."""
    with _lock:
        _fork_hooks.append(hook)
    return hook


def _run_exit_hooks() -> None:
    with _lock:
        hooks = list(reversed(_exit_hooks))
    for hook in hooks:
        try:
            hook()
        except Exception:  # one failing hook must not cost the others their work
            log.exception("magicfs: an exit hook failed")


def _run_fork_hooks() -> None:
    for hook in list(_fork_hooks):
        hook()


_register: Callable[[Callable[[], None]], object] = getattr(
    threading, "_register_atexit", atexit.register
)
_register(_run_exit_hooks)
os.register_at_fork(after_in_child=_run_fork_hooks)
