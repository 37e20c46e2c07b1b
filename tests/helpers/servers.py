"""Emulators of the rename stores (Azure Blob, GCS) as real processes on 127.0.0.1.

Each emulator runs under a small watchdog: this file, run as a script. The watchdog
starts the emulator in its own process group, and stops that group when its standard
input reaches end-of-file, which happens when the test session ends *or dies* (even by
SIGKILL: the kernel closes the pipe). On Linux the emulator also gets SIGKILL should
the watchdog itself die. So no run, however it ends, leaves an emulator behind, the
same promise ``magicfs.integrations.embedded_s3`` makes for the moto server.

Usage (``conftest.py``): ``with AzuriteServer(binary, workdir) as server:`` (or
``start()`` then ``stop()``); the same for ``GcsEmulatorServer(workdir)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

LOOPBACK = "127.0.0.1"

# Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURITE_INSTALL = "npm install --prefix .ci/node --no-save --silent azurite@3"
#: Where ``AZURITE_INSTALL``, run in the repository root, puts Azurite's Blob service.
AZURITE_BLOB = (
    pathlib.Path(__file__).resolve().parents[2] / ".ci/node/node_modules/.bin/azurite-blob"
)

GCS_PROJECT = "test"

#: One request in Azurite's ``--debug`` log: the operation its dispatcher picked.
_AZURITE_OPERATION = re.compile(r"DispatchMiddleware: Operation=(\w+)")
#: The account, container and blob a request of that log is for.
_AZURITE_TARGET = re.compile(
    r"BlobStorageContextMiddleware: Account=\S+ Container=(\S*?)(?: Blob=(.*))?$"
)


class ServerStartError(RuntimeError):
    """An emulator did not come up; the message carries the end of its log."""


class SupervisedServer:
    """An emulator process under the watchdog, with its output in a log file."""

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

    def start(self) -> SupervisedServer:
        """Start the server on a free loopback port; retried on a port taken meanwhile."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            try:
                return self._start_once(self.requested_port())
            except ServerStartError:
                if attempt == 2 or not _port_was_taken(self.log_tail()):
                    raise
        raise AssertionError("unreachable")

    def requested_port(self) -> int:
        return free_port()

    def _start_once(self, port: int) -> SupervisedServer:
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

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> SupervisedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Close the watchdog's stdin (it stops the server) and wait; kill it if it hangs."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            stop_supervised(watchdog)


class AzuriteServer(SupervisedServer):
    """Azurite's Blob service (npm ``azurite``), data in memory, telemetry off."""

    name = "azurite-blob"
    _LISTENING = re.compile(rb"successfully listens on http://127\.0\.0\.1:(\d+)")

    def __init__(
        self,
        binary: pathlib.Path,
        workdir: pathlib.Path,
        debug_log: pathlib.Path | None = None,
    ) -> None:
        super().__init__(workdir)
        self.binary = binary
        #: Opt-in request log (``--debug``): one ``Operation=<Op>`` line per request
        #: handled (``BlockBlob_StageBlock``, ``Blob_StartCopyFromURL``...). Azurite
        #: appends to it, so give each server a fresh path.
        self.debug_log = debug_log

    def operations(self) -> list[str]:
        """The operations in the debug log so far, in the order Azurite dispatched them."""
        return [operation for operation, _, _ in self.requests()]

    def requests(self) -> list[tuple[str, str, str]]:
        """``(operation, container, blob)`` of every request in the debug log so far, in
        the order Azurite dispatched them (container and blob ``""`` where none)."""
        if self.debug_log is None:
            raise ValueError("this Azurite server was started without a debug_log")
        try:
            text = self.debug_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        targets: dict[str, tuple[str, str]] = {}
        found: list[tuple[str, str]] = []
        for line in text.splitlines():
            parts = line.split(" ", 2)
            if len(parts) < 3:
                continue
            request_id = parts[1]
            target = _AZURITE_TARGET.search(line)
            if target:
                targets[request_id] = (target.group(1), target.group(2) or "")
                continue
            operation = _AZURITE_OPERATION.search(line)
            if operation:
                found.append((request_id, operation.group(1)))
        return [(op, *targets.get(request_id, ("", ""))) for request_id, op in found]

    def requested_port(self) -> int:
        return 0  # Azurite binds a free port itself and logs it: no race with other runs

    def command(self, port: int) -> list[str]:
        return [
            str(self.binary),
            "--blobHost",
            LOOPBACK,
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--disableTelemetry",  # otherwise it reports to an Azure endpoint
            "--skipApiVersionCheck",
            "--loose",
            "--silent",
            *(["--debug", str(self.debug_log)] if self.debug_log is not None else []),
        ]

    def bound_port(self, requested: int) -> int | None:
        match = self._LISTENING.search(self.log_path.read_bytes())
        if match and accepts_connections(int(match.group(1))):
            return int(match.group(1))
        return None

    @property
    def account_name(self) -> str:
        return AZURITE_ACCOUNT

    @property
    def account_key(self) -> str:
        return AZURITE_KEY

    @property
    def blob_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.blob_endpoint};"
        )

    @property
    def storage_options(self) -> dict[str, str]:
        """Options for ``adlfs.AzureBlobFileSystem`` / ``fsspec.filesystem("abfs", ...)``."""
        return {"connection_string": self.connection_string}


class GcsEmulatorServer(SupervisedServer):
    """``gcp-storage-emulator`` (PyPI), objects in memory."""

    name = "gcp-storage-emulator"

    def command(self, port: int) -> list[str]:
        executable = pathlib.Path(sys.executable).with_name("gcp-storage-emulator")
        return [str(executable), "start", "--host", LOOPBACK, "--port", str(port), "--in-memory"]

    def bound_port(self, requested: int) -> int | None:
        """Ready when the bucket listing answers: proof that the emulator, not some
        other process that took the free port first, is listening."""
        url = f"http://{LOOPBACK}:{requested}/storage/v1/b?project={GCS_PROJECT}"
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with no_proxy.open(url, timeout=2) as response:
                answer = json.load(response)
        except (OSError, ValueError):
            return None
        return requested if answer.get("kind") == "storage#buckets" else None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def project(self) -> str:
        return GCS_PROJECT

    @property
    def storage_options(self) -> dict[str, str]:
        """Options for ``gcsfs.GCSFileSystem``: anonymous, so no credential lookup at all."""
        return {"token": "anon", "project": GCS_PROJECT, "endpoint_url": self.endpoint_url}


def supervise(
    command: list[str], log_path: pathlib.Path, cwd: pathlib.Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start ``command`` under the watchdog (this file, run as a script), its output in
    ``log_path``. The command must stay in the foreground: the watchdog stops it by its
    PID (its process group) when :func:`stop_supervised` closes the watchdog's stdin, or
    when the test session dies."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, __file__, *command],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
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
        return probe.getsockname()[1]


def _port_was_taken(log: str) -> bool:
    """Did the server fail because another process took its port first?"""
    return "EADDRINUSE" in log or "Address already in use" in log


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


# --- the watchdog: ``python servers.py <command...>`` --------------------------------------


def _die_with_parent() -> None:
    """In the server (Linux): receive SIGKILL when the watchdog dies, however it dies."""
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
    server = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so that helpers it spawns die too
        preexec_fn=_die_with_parent,  # safe: this process has no other thread yet
    )

    def stop_when_parent_leaves() -> None:
        sys.stdin.buffer.read()  # returns at end-of-file: the test session closed or died
        _stop_group(server)

    signal.signal(signal.SIGTERM, lambda *_: _stop_group(server))
    threading.Thread(target=stop_when_parent_leaves, daemon=True).start()
    return server.wait()


if __name__ == "__main__":
    sys.exit(_watch(sys.argv[1:]))
