"""What every local S3 server of magicfs shares: credentials, client options, the child
process that runs it, and the name of the S3 operation a request asks for.

Three servers run on 127.0.0.1 for the demo, the tests and the benchmarks: the embedded
moto server (:mod:`magicfs.integrations.embedded_s3`), the benchmarks' stub
(``benchmarks/stub_s3.py``) and the tests' fault front (``tests/helpers/fault_front.py``).
Each runs in a child process, so that it has its own interpreter lock: a client and a
server in one process would measure the GIL, not the protocol. They share one way to
start and stop that child (:class:`ChildServer` in the parent, :func:`announce_ready` and
:func:`watch_parent` in the child):

* the child binds a free loopback port and prints one line, ``<TAG> <value>`` (its port
  or its endpoint), which the parent waits for;
* the parent holds the child's stdin open; the child stops when it reaches end-of-file,
  which happens when the parent closes it *or dies* (even by SIGKILL: the kernel closes
  the pipe), so a crashed run never leaves a server behind;
* the parent stops the child by its PID: it closes the stdin, waits, then terminates and
  at last kills it should it linger.

This module imports the standard library only (boto3 when a client is asked for).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Self

LOOPBACK = "127.0.0.1"
#: The local servers' credentials: moto and the stub take any; never real ones.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
CREDENTIALS = (ACCESS_KEY, SECRET_KEY)
REGION = "us-east-1"


# --- clients ------------------------------------------------------------------------------


def s3_storage_options(
    endpoint_url: str, credentials: tuple[str, str] = CREDENTIALS, region: str | None = None
) -> dict[str, Any]:
    """Options for ``s3fs.S3FileSystem`` (and ``fsspec.filesystem("s3", ...)``).

    ``region`` goes into ``client_kwargs`` only when given: with a region s3fs sends a
    ``LocationConstraint`` when it creates a bucket, which moto refuses for us-east-1.
    """
    client_kwargs: dict[str, Any] = {"endpoint_url": endpoint_url}
    if region is not None:
        client_kwargs["region_name"] = region
    key, secret = credentials
    return {"key": key, "secret": secret, "client_kwargs": client_kwargs}


def s3_boto3_client(
    endpoint_url: str,
    credentials: tuple[str, str] = CREDENTIALS,
    region: str = REGION,
    **config: Any,
) -> Any:
    """A boto3 S3 client bound to ``endpoint_url``; ``config``: ``botocore.config.Config``
    options (``retries={"total_max_attempts": 1}``, ``read_timeout=...``)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=credentials[0],
        aws_secret_access_key=credentials[1],
        config=Config(**config) if config else None,
    )


class S3Endpoint:
    """``storage_options`` and ``boto3_client()`` of a server at ``endpoint_url``.

    A server class sets ``credentials`` (its keys) and ``region_name`` (``None``: none in
    the storage options, see :func:`s3_storage_options`) and defines ``endpoint_url``.
    """

    credentials: tuple[str, str] = CREDENTIALS
    region_name: str | None = None

    @property
    def endpoint_url(self) -> str:
        raise NotImplementedError

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``s3fs.S3FileSystem`` (add ``skip_instance_cache=True`` for a fresh one)."""
        return s3_storage_options(self.endpoint_url, self.credentials, self.region_name)

    def boto3_client(self, **config: Any) -> Any:
        """A boto3 S3 client of this server; ``config``: ``botocore.config.Config`` options."""
        return s3_boto3_client(
            self.endpoint_url, self.credentials, self.region_name or REGION, **config
        )


# --- the parent's side of a child server ----------------------------------------------------


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


# --- a program of another kind under a watchdog (Azurite, the GCS emulator, Ceph) -------------


class ServerStartError(RuntimeError):
    """A supervised server did not come up; the message carries the end of its log."""


class SupervisedServer:
    """A server program (not Python's: Azurite, an emulator) under the watchdog, with its
    output in ``<workdir>/<name>.log``.

    The watchdog (this file run as a script, :func:`supervise`) starts the program in its
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

    The watchdog is this file run as a script by an isolated interpreter (``-I -S``: the
    standard library only, no thread before it starts the command)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), *command],
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
    """The watchdog: run ``command``, stop its group at end-of-file on stdin or SIGTERM."""
    server = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so that helpers it spawns die too
        preexec_fn=_die_with_parent,  # safe: this process has no other thread yet
    )

    def stop_when_parent_leaves() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 65536):  # unbuffered: no lock held should the interpreter end
                pass  # end-of-file: the parent closed it or died
        _stop_group(server)

    signal.signal(signal.SIGTERM, lambda *_: _stop_group(server))
    threading.Thread(target=stop_when_parent_leaves, daemon=True).start()
    return server.wait()


# --- which S3 operation a request is ---------------------------------------------------------

#: The operations :func:`s3_operation` names (botocore's names); anything else is ``"Other"``.
OPERATIONS = (
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "ListMultipartUploads",
    "ListParts",
    "PutObject",
    "CopyObject",
    "GetObject",
    "HeadObject",
    "DeleteObject",
    "DeleteObjects",
    "ListObjectsV2",
    "ListObjects",
    "HeadBucket",
    "CreateBucket",
    "DeleteBucket",
    "GetBucketLocation",
    "ListBuckets",
    "Other",
)

# Query parameters of a plain GET or HEAD of an object or of a bucket listing: any other
# query parameter names a subresource (``?acl``, ``?tagging``, ...), which is "Other".
_GET_OBJECT_PARAMS = frozenset({"versionId", "partNumber"})
_LIST_OBJECTS_PARAMS = frozenset({"prefix", "delimiter", "marker", "max-keys", "encoding-type"})


def s3_operation(
    method: str, target: str, headers: Any = None
) -> tuple[str, str | None, str | None]:
    """``(operation, bucket, key)`` of a path-style S3 request.

    ``target`` is the request target (``/bucket/key?query``); ``headers`` any mapping
    with ``get`` (only ``x-amz-copy-source`` is consulted). The key is percent-decoded.
    """
    split = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
    # Some SDKs name the operation in ``x-id`` (``?x-id=PutObject``); it is no subresource.
    query.pop("x-id", None)
    params = set(query)
    bucket_part, _, key_part = split.path.lstrip("/").partition("/")
    bucket = urllib.parse.unquote(bucket_part) or None
    key = urllib.parse.unquote(key_part) or None
    method = method.upper()
    copy_source = headers is not None and headers.get("x-amz-copy-source") is not None
    if bucket is None:
        operation = "ListBuckets" if method == "GET" and not params else "Other"
    elif key is None:
        operation = _bucket_operation(method, params, query)
    else:
        operation = _object_operation(method, params, copy_source)
    return operation, bucket, key


def _bucket_operation(method: str, params: set[str], query: dict[str, list[str]]) -> str:
    if method == "GET":
        if "uploads" in params:
            return "ListMultipartUploads"
        if "location" in params:
            return "GetBucketLocation"
        if query.get("list-type") == ["2"]:
            return "ListObjectsV2"
        if params <= _LIST_OBJECTS_PARAMS:
            return "ListObjects"
    elif method == "HEAD" and not params:
        return "HeadBucket"
    elif method == "PUT" and not params:
        return "CreateBucket"
    elif method == "DELETE" and not params:
        return "DeleteBucket"
    elif method == "POST" and "delete" in params:
        return "DeleteObjects"
    return "Other"


def _object_operation(method: str, params: set[str], copy_source: bool) -> str:
    if method == "POST":
        if "uploads" in params:
            return "CreateMultipartUpload"
        if "uploadId" in params:
            return "CompleteMultipartUpload"
    elif method == "PUT":
        if {"partNumber", "uploadId"} <= params:
            return "UploadPartCopy" if copy_source else "UploadPart"
        if not params:
            return "CopyObject" if copy_source else "PutObject"
    elif method == "DELETE":
        if "uploadId" in params:
            return "AbortMultipartUpload"
        if params <= {"versionId"}:
            return "DeleteObject"
    elif method == "GET":
        if "uploadId" in params:
            return "ListParts"
        if all(p in _GET_OBJECT_PARAMS or p.startswith("response-") for p in params):
            return "GetObject"
    elif method == "HEAD" and params <= _GET_OBJECT_PARAMS:
        return "HeadObject"
    return "Other"


if __name__ == "__main__":  # the watchdog of supervise()
    sys.exit(_watch(sys.argv[1:]))
