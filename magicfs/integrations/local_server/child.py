"""A local server in a child process: the parent's side (:class:`ChildServer`) and the
child's (:func:`announce_ready`, :func:`watch_parent`); see the package docstring."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping


class ChildServer:
    """A server in a child process that prints ``<ready_tag> <value>`` once it listens and
    stops when its stdin reaches end-of-file (see the module docstring).

    ``start()`` returns the value (a port or an endpoint); ``stop()`` stops it by its PID.
    """

    def __init__(
        self,
        name: str,
        command: list[str],
        ready_tag: str,
        *,
        startup_timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.command = command
        self.ready_tag = ready_tag
        self.startup_timeout = startup_timeout
        self.env = dict(env) if env is not None else None
        self._process: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> str:
        """Start the child and wait for its ready line; stop it if none comes in time."""
        self._process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
            close_fds=True,
        )
        value = self._ready_value(self._process)
        if value is None:
            self.stop()
            raise RuntimeError(
                f"{self.name} did not start within {self.startup_timeout:.0f}s "
                f"(command: {' '.join(self.command)}); its errors are above"
            )
        return value

    def _ready_value(self, process: subprocess.Popen[str]) -> str | None:
        """The value of the ready line, read on a thread so that a silent child cannot
        block the parent beyond ``startup_timeout``."""
        found: list[str] = []

        def read_ready_line() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith(self.ready_tag + " "):
                    found.append(line.split()[1])
                    return

        reader = threading.Thread(target=read_ready_line, daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        return found[0] if found else None

    def stop(self, grace: float = 5.0) -> None:
        """Close the child's stdin (it stops); terminate, then kill it, should it linger."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout:
            process.stdout.close()

    def cpu_seconds(self) -> float | None:
        """CPU time the child has used so far (Linux; ``None`` elsewhere or once stopped)."""
        if self._process is None:
            return None
        try:
            with open(f"/proc/{self._process.pid}/stat") as proc_stat:
                fields = proc_stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the child's side -------------------------------------------------------------------------


def announce_ready(tag: str, value: object) -> None:
    """Print the ready line :class:`ChildServer` waits for."""
    print(f"{tag} {value}", flush=True)


def watch_parent(stop: Callable[[], None], parent_pid: int | None = None) -> threading.Event:
    """Call ``stop`` once when the parent goes away: at end-of-file on stdin when that is
    a pipe (the parent closed it or died), or when this process is orphaned (its parent
    PID changes from ``parent_pid``, default the current one), checked twice a second.

    Only a pipe's end-of-file means "the parent has gone": ``/dev/null`` is always at it,
    so a server started by hand is stopped by its parent's death alone. Returns the event
    that is set once ``stop`` has been called.
    """
    parent = os.getppid() if parent_pid is None else parent_pid
    stopped = threading.Event()
    lock = threading.Lock()

    def stop_once() -> None:
        with lock:
            if stopped.is_set():
                return
            stopped.set()
        stop()

    def at_end_of_stdin() -> None:
        with contextlib.suppress(OSError, ValueError):
            while os.read(0, 65536):
                pass
        stop_once()

    def when_orphaned() -> None:
        while not stopped.wait(0.5):
            if os.getppid() != parent:
                stop_once()

    if _stdin_is_pipe():
        threading.Thread(target=at_end_of_stdin, daemon=True).start()
    threading.Thread(target=when_orphaned, daemon=True).start()
    return stopped


def _stdin_is_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(0).st_mode)
    except OSError:
        return False
