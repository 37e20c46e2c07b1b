"""An S3 server on 127.0.0.1 for the demo, the tests and the benchmarks (moto, over real HTTP).

The server runs in a child process so that it has its own interpreter lock: client
and server in one process would measure the GIL, not the protocol. The child binds a
free loopback port, reports it on stdout, and exits when its parent goes away (it
watches its stdin), so a crashed test run never leaves a server behind: the child
process shared by every local server (:mod:`magicfs.integrations.local_server`).

Two settings make it cost what S3 costs, for the demo and the benchmarks:

* ``latency_ms`` delays every request before moto sees it: S3's requests take tens of
  milliseconds, and the delays of concurrent requests overlap as on a real network;
* ``copy_mb_per_s`` makes every server-side copy (``CopyObject``, ``UploadPartCopy`` —
  what a rename costs on S3) take ``size / bandwidth``: S3 copies at about 6-10 MB/s per
  copy (the seed documents' figure), while moto copies at memory speed. Concurrent
  copies each get the full bandwidth, as on S3.

And one makes it *as cheap* as S3 where S3 is cheap: connections are kept alive
between requests (HTTP/1.1), as S3 and every SDK do. Werkzeug's development server,
which moto uses, closes the connection after every response, so each request would
cost a new TCP connection and a new server thread on both sides: CPU that grows with
the number of requests and that S3 never charges (see :class:`_KeepAliveHandler`).

The server also counts the server-side copies it answered and the bytes they moved
(:meth:`EmbeddedS3Server.copies`): the demo reports what the server did, not what its
client meant to ask. It counts the latency it added too
(:meth:`EmbeddedS3Server.latency_added`: requests delayed and seconds), so a test can
check the setting by the server's own account, not by a wall-clock bound that a loaded
machine breaks.

Three ways to start one, each on a free loopback port, with buckets made at start:

* ``magicfs.local_s3(bucket="bkt")`` (:mod:`magicfs.integrations.local_s3`): one server
  in the background of this Python process, stopped at exit; returns its storage
  options. The README's and the docs' examples start from it;
* ``magicfs server --bucket bkt`` (:mod:`magicfs.integrations.cli.server`): in a terminal,
  for other processes; prints the options to use and serves until Ctrl-C or SIGTERM;
* ``python -m magicfs.integrations.embedded_s3 --port 0``: the same, with the ready line
  :class:`EmbeddedS3Server` waits for and the cost settings above.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from .extras import SERVER_MODULES, require
from .local_server import (
    ACCESS_KEY,
    LOOPBACK,
    SECRET_KEY,
    ChildServer,
    S3Endpoint,
    announce_ready,
    s3_storage_options,
    watch_parent,
)

_READY = "MAGICFS-S3-READY"

#: S3's rule for bucket names (lower-case letters, digits, dots and hyphens; 3-63 long;
#: a letter or digit at both ends).
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def bucket_name(name: str) -> str:
    """``name`` if S3 accepts it as a bucket name, else ``ValueError`` saying why."""
    if not _BUCKET_NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            f"invalid bucket name {name!r}: use 3-63 lower-case letters, digits, dots or "
            "hyphens, starting and ending with a letter or digit (e.g. 'bkt')"
        )
    return name


class CopyCount(NamedTuple):
    """Server-side copies (``CopyObject``, ``UploadPartCopy``) a server answered with
    success, the bytes they moved, and the seconds the copy bandwidth delayed them by
    (``size / bandwidth`` each). Subtract two counts for what happened between."""

    copies: int
    bytes: int
    delayed: float = 0.0

    def __sub__(self, other: object) -> CopyCount:
        if not isinstance(other, CopyCount):
            return NotImplemented
        return CopyCount(
            self.copies - other.copies, self.bytes - other.bytes, self.delayed - other.delayed
        )


class EmbeddedS3Server(S3Endpoint):
    """A moto S3 server in a child process, bound to 127.0.0.1. Use as a context manager.

    ``storage_options`` has no ``region_name`` in ``client_kwargs``: with it s3fs sends a
    LocationConstraint that moto refuses when creating buckets.
    """

    def __init__(
        self,
        port: int = 0,
        latency_ms: float = 0.0,
        copy_mb_per_s: float = 0.0,
        startup_timeout: float = 30.0,
        buckets: Sequence[str] = (),
    ):
        self.requested_port = port
        self.latency_ms = latency_ms
        self.copy_mb_per_s = copy_mb_per_s
        self.startup_timeout = startup_timeout
        #: Buckets the server has when it starts.
        self.buckets = [bucket_name(name) for name in buckets]
        self.port: int | None = None
        self._child: ChildServer | None = None

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> EmbeddedS3Server:
        _require_moto()
        env = dict(os.environ)
        env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
        command = [
            sys.executable,
            "-m",
            "magicfs.integrations.embedded_s3",
            "--port",
            str(self.requested_port),
            "--latency-ms",
            str(self.latency_ms),
            "--copy-mb-per-s",
            str(self.copy_mb_per_s),
            "--exit-with-parent",
            *(argument for name in self.buckets for argument in ("--bucket", name)),
        ]
        self._child = ChildServer(
            "embedded S3 server", command, _READY, startup_timeout=self.startup_timeout, env=env
        )
        self.port = int(self._child.start())
        return self

    @property
    def pid(self) -> int | None:
        """The server process's PID while it runs."""
        return self._child.pid if self._child else None

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop()

    def cpu_seconds(self) -> float | None:
        """CPU time the server process has used so far (Linux; ``None`` elsewhere).

        The benchmarks report it: on a small machine the emulator's own CPU, which S3
        never charges its clients, can be what limits a run.
        """
        return self._child.cpu_seconds() if self._child else None

    def reset(self) -> None:
        """Forget every bucket and upload (moto's reset API)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def set_latency(self, latency_ms: float) -> None:
        """Change the delay added to every request from now on."""
        self._control(f"{_LATENCY_PATH}?ms={latency_ms}")
        self.latency_ms = latency_ms

    def set_copy_bandwidth(self, mb_per_s: float) -> None:
        """Change the speed of server-side copies from now on (0: moto's own speed)."""
        self._control(f"{_COPY_PATH}?mb_per_s={mb_per_s}")
        self.copy_mb_per_s = mb_per_s

    def latency_added(self) -> tuple[int, float]:
        """The requests the server has delayed so far (the control requests aside) and the
        seconds it added to them: what ``latency_ms`` cost, counted by the server."""
        with urllib.request.urlopen(f"{self.endpoint_url}{_LATENCY_PATH}", timeout=30) as reply:
            counted = json.load(reply)
        return int(counted["requests"]), float(counted["seconds"])

    def copies(self) -> CopyCount:
        """The server-side copies the server has answered with success so far, and their
        bytes (a ranged ``UploadPartCopy`` counts its range)."""
        with urllib.request.urlopen(f"{self.endpoint_url}{_COPIES_PATH}", timeout=30) as reply:
            counted = json.load(reply)
        return CopyCount(int(counted["copies"]), int(counted["bytes"]), float(counted["delayed"]))

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` unless the server has it already."""
        client = self.boto3_client()
        try:
            client.head_bucket(Bucket=bucket_name(name))
        except client.exceptions.ClientError:
            client.create_bucket(Bucket=name)

    def _control(self, path: str) -> None:
        request = urllib.request.Request(f"{self.endpoint_url}{path}", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def __enter__(self) -> EmbeddedS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_LATENCY_PATH = "/_magicfs/latency"
_COPY_PATH = "/_magicfs/copy-bandwidth"
_COPIES_PATH = "/_magicfs/copies"


class _CopyCounter:
    """The server-side copies answered with success and their bytes (thread-safe: the
    server answers requests on threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.copies = 0
        self.bytes = 0
        self.delayed = 0.0

    def add(self, size: int, delay: float) -> None:
        with self._lock:
            self.copies += 1
            self.bytes += size
            self.delayed += delay

    def as_json(self) -> bytes:
        with self._lock:
            counted = {"copies": self.copies, "bytes": self.bytes, "delayed": self.delayed}
            return json.dumps(counted).encode()


def _cost_middleware(app: Any, latency_ms: float, copy_mb_per_s: float) -> Any:
    """Delay each request, and each server-side copy by its size; count the copies (see
    the module docstring).

    ``POST /_magicfs/latency?ms=N`` and ``POST /_magicfs/copy-bandwidth?mb_per_s=N``
    change the settings at run time; ``GET /_magicfs/copies`` answers the copy count as
    JSON (``{"copies": N, "bytes": N, "delayed": seconds}``), ``GET /_magicfs/latency``
    the requests delayed and the seconds added (``{"requests": N, "seconds": s}``).
    """
    settings = {"delay": latency_ms / 1000.0, "copy": copy_mb_per_s * 1e6}
    counter = _CopyCounter()
    added = {"requests": 0, "seconds": 0.0}  # the latency added, for GET /_magicfs/latency
    added_lock = threading.Lock()

    def control(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == _COPIES_PATH:
            start_response("200 OK", [("Content-Type", "application/json")])
            return [counter.as_json()]
        if environ.get("PATH_INFO") == _LATENCY_PATH and environ.get("REQUEST_METHOD") == "GET":
            with added_lock:
                answer = json.dumps(added).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [answer]
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        if environ.get("PATH_INFO") == _LATENCY_PATH:
            settings["delay"] = float(query.get("ms", ["0"])[0]) / 1000.0
        else:
            settings["copy"] = float(query.get("mb_per_s", ["0"])[0]) * 1e6
        start_response("204 No Content", [])
        return [b""]

    def costly(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") in (_LATENCY_PATH, _COPY_PATH, _COPIES_PATH):
            return control(environ, start_response)
        delay = settings["delay"]
        if delay:
            with added_lock:
                added["requests"] += 1
                added["seconds"] += delay
            time.sleep(delay)
        statuses: list[str] = []

        def recording_start_response(status: str, headers: Any, *args: Any) -> Any:
            statuses.append(status)
            return start_response(status, headers, *args)

        # The whole response is built here, before werkzeug sends a byte of it: an error
        # answers a complete 500 (see _keep_alive_handler).
        body = list(app(environ, recording_start_response))
        if "HTTP_X_AMZ_COPY_SOURCE" not in environ or not statuses[-1].startswith("2"):
            return body
        size = _copied_bytes(app, environ)
        delay = size / settings["copy"] if settings["copy"] else 0.0
        counter.add(size, delay)
        time.sleep(delay)
        return body

    return costly


def _copied_bytes(app: Any, environ: dict[str, Any]) -> int:
    """How many bytes a copy request moved: its range, or the size of its source object."""
    copy_range = environ.get("HTTP_X_AMZ_COPY_SOURCE_RANGE", "")
    if copy_range.startswith("bytes="):
        first, _, last = copy_range[len("bytes=") :].partition("-")
        return int(last) - int(first) + 1
    source = urllib.parse.unquote(environ["HTTP_X_AMZ_COPY_SOURCE"].split("?", 1)[0])
    head = {
        **environ,
        "REQUEST_METHOD": "HEAD",
        "PATH_INFO": "/" + source.lstrip("/"),
        "QUERY_STRING": "",
        "CONTENT_LENGTH": "0",
    }
    for name in list(head):
        if name.startswith("HTTP_X_AMZ_COPY") or name == "HTTP_CONTENT_MD5":
            del head[name]
    found: dict[str, str] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *args: Any) -> None:
        found.update((key.lower(), value) for key, value in headers)

    for _ in app(head, start_response):
        pass
    return int(found.get("content-length", "0") or 0)


class _Body(io.RawIOBase):
    """A request body of known length, read from the connection and never past its end.

    Reads stop at the body's end, so nothing (the app, werkzeug's after-response drain)
    can consume the next request on a kept-alive connection.
    """

    def __init__(self, stream: Any, length: int) -> None:
        self._stream = stream
        self.remaining = length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        wanted = min(len(buffer), self.remaining)
        if wanted <= 0:
            return 0
        got = self._stream.readinto(memoryview(buffer)[:wanted]) or 0
        self.remaining -= got
        if got == 0:  # the client went away mid-body
            self.remaining = 0
        return got


def _keep_alive_handler(base: Any) -> Any:
    """``base`` (moto's werkzeug request handler) with HTTP/1.1 keep-alive.

    Werkzeug closes every connection because Python's ``http.server`` cannot skip a
    request body the app left unread. This handler bounds each body by its
    ``Content-Length`` and reads what the app left before the next request; requests
    whose length is unknown (chunked) still close their connection. The app's whole
    response is built before anything is sent (:func:`_cost_middleware`), so a failing
    request answers a complete 500 and never a truncated response on a live connection.

    Nagle's algorithm is off (``TCP_NODELAY``), as on S3's front ends: werkzeug writes
    headers and body separately, and on a kept-alive connection the body would wait for
    the client's delayed ACK, about 40 ms added to every reply that has a body.
    """

    class KeepAliveHandler(base):
        rfile: Any  # the connection's buffered reader (http.server)
        _keep_alive = False
        disable_nagle_algorithm = True

        def run_wsgi(self) -> None:
            length = self.headers.get("Content-Length")
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            if chunked or (length is not None and not length.isdigit()):
                super().run_wsgi()
                return
            raw: Any = self.rfile
            body = _Body(raw, int(length or 0))
            self.rfile, self._keep_alive = body, True
            try:
                super().run_wsgi()
            finally:
                self.rfile, self._keep_alive = raw, False
            if body.remaining:  # the app did not read all of it: skip the rest
                if body.remaining > 64 << 20:
                    self.close_connection = True
                else:
                    while body.read(1 << 20):
                        pass

        def send_header(self, keyword: str, value: str) -> None:
            if self._keep_alive and keyword.lower() == "connection" and value.lower() == "close":
                return  # http.server then keeps the connection as the request asked
            super().send_header(keyword, value)

    return KeepAliveHandler


def serve(
    port: int,
    latency_ms: float = 0.0,
    copy_mb_per_s: float = 0.0,
    exit_with_parent: bool = False,
    buckets: Sequence[str] = (),
    ready_line: bool = True,
) -> None:
    """Run the server in this process, with ``buckets`` made before it answers.

    Started by :class:`EmbeddedS3Server` (``exit_with_parent``) it stops when its parent
    closes its stdin. Otherwise it prints how to connect and serves until SIGINT (Ctrl-C)
    or SIGTERM, then returns: it never starts another process, so none is left behind.
    ``ready_line`` first prints the line :class:`EmbeddedS3Server` waits for (``magicfs
    server``, for people, leaves it out).
    """
    server = _make_server(port, latency_ms, copy_mb_per_s, buckets)
    bound = server.server_address[1]
    if ready_line:
        announce_ready(_READY, bound)
    if exit_with_parent:
        watch_parent(server.shutdown)
    else:

        def stop(*_: object) -> None:
            # shutdown() waits for serve_forever() to return: not from its own thread.
            threading.Thread(target=server.shutdown).start()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        print(_banner(bound, latency_ms, copy_mb_per_s, buckets), flush=True)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C in a terminal reaches children
            server.serve_forever()
    finally:
        server.server_close()
    if not exit_with_parent:
        print("magicfs S3 server stopped", flush=True)


def _require_moto() -> None:
    """Say which extra to install before a server fails to start without moto."""
    require("demo", SERVER_MODULES, "the embedded S3 server (moto)")


def _make_server(port: int, latency_ms: float, copy_mb_per_s: float, buckets: Iterable[str]) -> Any:
    """moto behind the cost middleware and the keep-alive handler, listening on
    127.0.0.1:``port`` (0: a free port), with ``buckets`` made."""
    _require_moto()
    os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    app: Any = _cost_middleware(
        DomainDispatcherApplication(create_backend_app), latency_ms, copy_mb_per_s
    )
    handler = _keep_alive_handler(MotoRequestHandler)
    server = make_server(LOOPBACK, port, app, threaded=True, request_handler=handler)
    for name in buckets:
        _create_bucket(app, f"http://{LOOPBACK}:{server.server_address[1]}", name)
    return server


def _create_bucket(app: Any, endpoint: str, name: str) -> None:
    """Create bucket ``name`` by calling the app directly (nothing listens yet)."""
    from werkzeug.test import Client

    reply = Client(app).put(f"/{bucket_name(name)}", base_url=endpoint)
    if reply.status_code != 200:
        raise RuntimeError(f"creating bucket {name!r} failed: {reply.status} {reply.text}")


def _banner(port: int, latency_ms: float, copy_mb_per_s: float, buckets: Sequence[str]) -> str:
    """How to connect: the endpoint, then the options for Python, the AWS CLI and magicfs."""
    endpoint = f"http://{LOOPBACK}:{port}"
    options = s3_storage_options(endpoint)
    costs = []
    if latency_ms:
        costs.append(f"{latency_ms:g} ms added to every request")
    if copy_mb_per_s:
        costs.append(f"server-side copies at {copy_mb_per_s:g} MB/s")
    bucket = buckets[0] if buckets else "BUCKET"
    holding = f"bucket{'s' if len(buckets) > 1 else ''} {', '.join(buckets)}" if buckets else ""
    store = f"--endpoint-url {endpoint} -o key={ACCESS_KEY} -o secret={SECRET_KEY}"
    return "\n".join(
        [
            f"magicfs S3 server (moto, data in memory) on {endpoint}"
            + "".join(f", {part}" for part in [holding, *costs] if part),
            f"  credentials: AWS_ACCESS_KEY_ID={ACCESS_KEY} AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
            f"  Python:      opts = {json.dumps(options)}",
            f"  AWS CLI:     aws --endpoint-url {endpoint} s3 ls s3://{bucket}/"
            " (with the credentials above)",
            f"  magicfs:     magicfs uploads list {store} s3://{bucket}/",
            "  stop with Ctrl-C",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="An S3 server (moto) on 127.0.0.1, optionally as slow as S3 itself."
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay per request")
    parser.add_argument(
        "--copy-mb-per-s",
        type=float,
        default=0.0,
        help="speed of server-side copies (S3: about 10); 0 = as fast as moto copies",
    )
    parser.add_argument(
        "--bucket",
        action="append",
        default=[],
        type=bucket_argument,
        metavar="NAME",
        help="a bucket the server has from the start (repeatable)",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when stdin closes (how magicfs's tests and demo run it)",
    )
    args = parser.parse_args(argv)
    serve(args.port, args.latency_ms, args.copy_mb_per_s, args.exit_with_parent, args.bucket)


def bucket_argument(text: str) -> str:
    """argparse's type for ``--bucket``: a bad name is a usage error that says why."""
    try:
        return bucket_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


if __name__ == "__main__":
    main()
