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

Run ``python -m magicfs.integrations.embedded_s3 --port 0`` to start one by hand: it prints its
endpoint and the credentials to use, and serves until interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

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
    ):
        self.requested_port = port
        self.latency_ms = latency_ms
        self.copy_mb_per_s = copy_mb_per_s
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._child: ChildServer | None = None

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> EmbeddedS3Server:
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


def _cost_middleware(app: Any, latency_ms: float, copy_mb_per_s: float) -> Any:
    """Delay each request, and each server-side copy by its size (see the module docstring).

    ``POST /_magicfs/latency?ms=N`` and ``POST /_magicfs/copy-bandwidth?mb_per_s=N``
    change the settings at run time.
    """
    settings = {"delay": latency_ms / 1000.0, "copy": copy_mb_per_s * 1e6}

    def control(environ: dict[str, Any], start_response: Any) -> Any:
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        if environ.get("PATH_INFO") == _LATENCY_PATH:
            settings["delay"] = float(query.get("ms", ["0"])[0]) / 1000.0
        else:
            settings["copy"] = float(query.get("mb_per_s", ["0"])[0]) * 1e6
        start_response("204 No Content", [])
        return [b""]

    def costly(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") in (_LATENCY_PATH, _COPY_PATH):
            return control(environ, start_response)
        if settings["delay"]:
            time.sleep(settings["delay"])
        # The whole response is built here, before werkzeug sends a byte of it: an error
        # answers a complete 500 (see _keep_alive_handler).
        body = list(app(environ, start_response))
        if not settings["copy"] or "HTTP_X_AMZ_COPY_SOURCE" not in environ:
            return body
        time.sleep(_copied_bytes(app, environ) / settings["copy"])
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


def serve(port: int, latency_ms: float, copy_mb_per_s: float, exit_with_parent: bool) -> None:
    """Run the server in this process.

    Started by :class:`EmbeddedS3Server` (``exit_with_parent``) it stops when its parent
    closes its stdin; started by hand it serves until SIGINT or SIGTERM.
    """
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
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=handler)
    bound = server.server_address[1]
    announce_ready(_READY, bound)
    if exit_with_parent:
        watch_parent(server.shutdown)
    else:
        print(_banner(bound, latency_ms, copy_mb_per_s), flush=True)
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


def _banner(port: int, latency_ms: float, copy_mb_per_s: float) -> str:
    endpoint = f"http://{LOOPBACK}:{port}"
    options = s3_storage_options(endpoint)
    costs = []
    if latency_ms:
        costs.append(f"{latency_ms:g} ms added to every request")
    if copy_mb_per_s:
        costs.append(f"server-side copies at {copy_mb_per_s:g} MB/s")
    return "\n".join(
        [
            f"magicfs embedded S3 server (moto, data in memory) on {endpoint}"
            + (f": {', '.join(costs)}" if costs else ""),
            f"  credentials: AWS_ACCESS_KEY_ID={ACCESS_KEY} AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
            f"  s3fs / storage_options: {json.dumps(options)}",
            f"  command line: magicfs uploads list --endpoint-url {endpoint} "
            f"-o key={ACCESS_KEY} -o secret={SECRET_KEY} s3://BUCKET",
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
        "--exit-with-parent",
        action="store_true",
        help="stop when stdin closes (how magicfs's tests and demo run it)",
    )
    args = parser.parse_args(argv)
    serve(args.port, args.latency_ms, args.copy_mb_per_s, args.exit_with_parent)


if __name__ == "__main__":
    main()
