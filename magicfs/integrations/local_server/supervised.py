"""A server program of another kind (Azurite, the GCS emulator, Ceph's daemons) run
under the watchdog (:mod:`.watchdog`), so that it never outlives the process that
started it, even should that process be killed."""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Self

from .s3_clients import LOOPBACK
from .watchdog import SCRIPT as WATCHDOG


class ServerStartError(RuntimeError):
    """A supervised server did not come up; the message carries the end of its log."""


class SupervisedServer:
    """A server program (not Python's: Azurite, an emulator) under the watchdog, with its
    output in ``<workdir>/<name>.log``.

    The watchdog (:mod:`.watchdog`, started by :func:`supervise`) starts the program in its
    own process group and stops that group when its stdin reaches end-of-file, which
    happens when the parent ends *or dies*; on Linux the program also gets SIGKILL should
    the watchdog itself die. A subclass gives ``command(port)`` and, where the program
    picks its own port, ``requested_port()`` and ``bound_port()``.
    """

    name = "server"
    startup_timeout = 60.0

    def __init__(self, workdir: pathlib.Path) -> None:
        self.workdir = workdir
        self.log_path = workdir / f"{self.name}.log"
        self.port: int | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def bound_port(self, requested: int) -> int | None:
        """The port the server listens on, once it does; ``None`` while it starts."""
        return requested if accepts_connections(requested) else None

    def requested_port(self) -> int:
        return free_port()

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def start(self) -> Self:
        """Start the server on a free loopback port; retried on a port taken meanwhile."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            try:
                return self._start_once(self.requested_port())
            except ServerStartError:
                if attempt == 2 or not _port_was_taken(self.log_tail()):
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, port: int) -> Self:
        self._watchdog = supervise(
            self.command(port), self.log_path, cwd=self.workdir, env=self.environment()
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._watchdog.poll() is not None:
                self.stop()
                raise ServerStartError(f"{self.name} exited at startup:\n{self.log_tail()}")
            self.port = self.bound_port(port)
            if self.port is not None:
                return self
            time.sleep(0.05)
        self.stop()
        raise ServerStartError(
            f"{self.name} did not accept connections within {self.startup_timeout:.0f}s:\n"
            f"{self.log_tail()}"
        )

    @property
    def watchdog_pid(self) -> int | None:
        return self._watchdog.pid if self._watchdog else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Close the watchdog's stdin (it stops the server) and wait; kill it if it hangs."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            stop_supervised(watchdog)


def supervise(
    command: list[str], log_path: pathlib.Path, cwd: pathlib.Path, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start ``command`` under the watchdog, its output in ``log_path``. The command must
    stay in the foreground: the watchdog stops it by its PID (its process group) when
    :func:`stop_supervised` closes the watchdog's stdin, or when the parent dies.

    The watchdog is :mod:`.watchdog` run as a script by an isolated interpreter (``-I
    -S``: the standard library only, no thread before it starts the command)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", WATCHDOG, *command],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
        )


def stop_supervised(watchdog: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """Close the watchdog's stdin (it stops its server) and wait; kill it if it hangs."""
    with contextlib.suppress(OSError):
        watchdog.stdin.close()  # type: ignore[union-attr]
    try:
        watchdog.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        watchdog.kill()  # the server gets SIGKILL from its parent-death signal
        watchdog.wait()


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _port_was_taken(log: str) -> bool:
    """Did the server fail because another process took its port first?"""
    return "EADDRINUSE" in log or "Address already in use" in log
