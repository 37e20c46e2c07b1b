"""The watchdog of a supervised server: ``python -I -S watchdog.py COMMAND...``.

It starts the command in its own process group and stops that group when its own stdin
reaches end-of-file, which happens when the process that started it closes it *or dies*
(even by SIGKILL: the kernel closes the pipe), or when it gets SIGTERM; on Linux the
command also gets SIGKILL should the watchdog itself die. It runs as a script in an
isolated interpreter, so it imports the standard library only, and nothing of the
package: no thread may run before it forks the command (``preexec_fn``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

#: This file, which ``supervise`` runs as the watchdog.
SCRIPT = os.path.abspath(__file__)


def _in_server() -> None:
    """In the server, before it runs: SIGTERM delivered again (the watchdog holds it back
    while it starts the server) and (Linux) SIGKILL when the watchdog dies, however it
    dies."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _watch(command: list[str]) -> int:
    """The watchdog: run ``command``, stop its group at end-of-file on stdin or SIGTERM.

    SIGTERM is held back until its handler is in place: one that came while the server
    was starting would otherwise end the watchdog without stopping the server in order."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    server = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so that helpers it spawns die too
        preexec_fn=_in_server,  # safe: this process has no other thread yet
    )

    def stop_when_parent_leaves() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 65536):  # unbuffered: no lock held should the interpreter end
                pass  # end-of-file: the parent closed it or died
        _stop_group(server)

    def stop_on_sigterm(*_: object) -> None:
        # The handler runs on the main thread *inside* ``server.wait()``, which holds the
        # Popen's wait lock: waiting here would deadlock (the server left a zombie and
        # this process hung). So: signal the group and let a thread escalate; the main
        # thread's wait then reaps the server and this process ends.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        threading.Thread(target=_stop_group, args=(server,), daemon=True).start()

    signal.signal(signal.SIGTERM, stop_on_sigterm)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a held one runs now
    threading.Thread(target=stop_when_parent_leaves, daemon=True).start()
    return server.wait()


if __name__ == "__main__":
    sys.exit(_watch(sys.argv[1:]))
