"""A loopback HTTP front for a GCS emulator: logs every request, and can answer ``moveTo``.

Neither GCS emulator has the JSON API's atomic move (``POST .../b/<bucket>/o/<source>/
moveTo/o/<dest>``: gcp-storage-emulator answers 501, fake-gcs-server 400); real GCS has.
:class:`GcsFront` stands between gcsfs and an emulator on its own 127.0.0.1 port:

* every request is forwarded to the emulator as it came, and its answer returned, with
  the emulator's address in headers and JSON bodies replaced by the front's (resumable
  upload sessions and media links keep coming through the front);
* with ``answers_moves=True`` the front answers ``moveTo`` itself, the way GCS would,
  by the emulator's own ``rewriteTo`` then ``DELETE`` of the source (the client sees
  one request per file, the emulator a copy and a delete);
* ``log`` lists every client request as a :class:`Seen` (method, the JSON API
  operation, the front's answer), so a test asserts which requests magicfs sent;
* ``fail_moves`` answers that many ``moveTo`` requests with 503 first (a store that
  fails a probe for a reason other than lacking the move).

It runs in a thread of the test process (a ``ThreadingHTTPServer``) and is stopped by
``stop()`` or the ``with`` block.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import re
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from magicfs.integrations.local_server import LOOPBACK

_MOVE = re.compile(
    r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<source>[^/]+)/moveTo/o/(?P<dest>[^/?]+)$"
)
#: Hop-by-hop headers a proxy does not forward.
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass(frozen=True)
class Seen:
    """One client request: ``operation`` is ``moveTo``, ``rewriteTo``, ``delete``,
    ``upload``, ``get`` or ``other``; ``status`` the front's answer; ``path`` as sent."""

    method: str
    operation: str
    status: int
    path: str


def operation_of(method: str, path: str) -> str:
    """The JSON API operation of a request, by its method and path."""
    route = urllib.parse.urlsplit(path).path
    if "/moveTo/" in route:
        return "moveTo"
    if "/rewriteTo/" in route or "/copyTo/" in route:
        return "rewriteTo"
    if route.startswith("/upload/"):
        return "upload"
    if method == "DELETE" and "/o/" in route:
        return "delete"
    if method == "GET":
        return "get"
    return "other"


class GcsFront:
    """A front on a free loopback port before the emulator at ``upstream``."""

    def __init__(self, upstream: str, answers_moves: bool = False, fail_moves: int = 0) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.answers_moves = answers_moves
        self.fail_moves = fail_moves
        self.log: list[Seen] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    @property
    def storage_options(self) -> dict[str, str]:
        """Options for ``gcsfs.GCSFileSystem`` through the front (anonymous)."""
        return {"token": "anon", "project": "test", "endpoint_url": self.endpoint_url}

    def count(self, operation: str) -> int:
        """How many client requests of ``operation`` the front saw."""
        with self._lock:
            return sum(seen.operation == operation for seen in self.log)

    def clear(self) -> None:
        with self._lock:
            self.log.clear()

    def __enter__(self) -> GcsFront:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    # --- forwarding ------------------------------------------------------------------------

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send one request to the emulator; its status, headers and body, addresses
        rewritten to the front's."""
        connection = http.client.HTTPConnection(self.upstream.netloc, timeout=60)
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            data = response.read()
            answer = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP]
        finally:
            connection.close()
        upstream = f"{self.upstream.scheme}://{self.upstream.netloc}"
        answer = [(k, v.replace(upstream, self.endpoint_url)) for k, v in answer]
        if data and any(k.lower() == "content-type" and "json" in v for k, v in answer):
            data = data.replace(upstream.encode(), self.endpoint_url.encode())
        return response.status, answer, data

    def move(
        self, bucket: str, source: str, dest: str, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """GCS's move, made of the emulator's rewrite (until done) and delete."""
        objects = f"/storage/v1/b/{bucket}/o"
        rewrite = f"{objects}/{source}/rewriteTo/b/{bucket}/o/{dest}"
        token = None
        while True:
            query = "" if token is None else "?" + urllib.parse.urlencode({"rewriteToken": token})
            status, _, data = self.forward("POST", rewrite + query, headers, b"")
            if status != 200:
                return status, data
            reply: dict[str, Any] = json.loads(data)
            if reply.get("done"):
                break
            token = reply["rewriteToken"]
        status, _, deleted = self.forward("DELETE", f"{objects}/{source}", headers, b"")
        if status not in (200, 204):
            return status, deleted
        return 200, json.dumps(reply["resource"]).encode()

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                status, answer, data = front._answer(self.command, self.path, headers, body)
                with front._lock:
                    front.log.append(
                        Seen(self.command, operation_of(self.command, self.path), status, self.path)
                    )
                self.send_response(status)
                for key, value in answer:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    # gcsfs's info() sends two requests at once and drops the slower
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve

        return Handler

    def _answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        move = _MOVE.match(urllib.parse.urlsplit(path).path) if method == "POST" else None
        if move is not None:
            with self._lock:
                failing, self.fail_moves = self.fail_moves > 0, max(0, self.fail_moves - 1)
            if failing:
                return 503, [("Content-Type", "application/json")], b'{"error": {"code": 503}}'
            if self.answers_moves:
                status, data = self.move(move["bucket"], move["source"], move["dest"], headers)
                return status, [("Content-Type", "application/json")], data
        return self.forward(method, path, headers, body)
