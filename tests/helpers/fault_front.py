"""A fault-injecting HTTP front for S3: a reverse proxy between an S3 client and moto.

The client (boto3, s3fs) talks to the front exactly as it would talk to S3; the front
names each request's S3 operation (botocore's names: ``CreateMultipartUpload``,
``UploadPart``, ``PutObject``, ...), consults a list of rules, and either forwards the
request to the upstream server unchanged or misbehaves the way S3 and the network do.
Nothing in the client or in magicfs is patched: the wire itself fails.

Actions (``FaultFront.add_rule(operation, action, ...)``):

``"503"``
    Reply ``503 SlowDown`` without forwarding: S3 throttling a prefix ("Please reduce
    your request rate"). The server did nothing.
``"500"``
    Reply ``500 InternalError`` without forwarding: S3's transient internal error
    before it acted ("We encountered an internal error. Please try again.").
``"500-after"``
    Forward (the server acts), then reply ``500 InternalError`` instead of the real
    reply: an error reported for a request that did in fact take effect, as happens
    when an S3 front end times out waiting for its back end.
``"error-200"``
    Reply ``200 OK`` whose body is ``<Error><Code>InternalError</Code>...``, without
    forwarding. S3 documents this for ``CopyObject``, ``UploadPartCopy`` and
    ``CompleteMultipartUpload``: the status line is sent before the work finishes, so a
    failure can only be reported in the body.
``"reset-before"``
    Read the request, then close the connection with a TCP RST (``SO_LINGER`` 0)
    without forwarding: a connection dropped by a load balancer or the network before
    the request reached S3.
``"reset-after"``
    Forward, let the server act, then reset the client's connection without replying:
    the *lost reply*. The operation happened but the client cannot know; a retry
    repeats it (a second, orphaned upload for ``CreateMultipartUpload``; moto answers a
    repeated ``CompleteMultipartUpload`` of the completed upload with success).
``"delay"``
    Sleep ``ms`` milliseconds, then forward normally: a slow request (with a client
    ``read_timeout`` below ``ms`` it becomes a timeout while the server still acts).

Rules are evaluated in the order they were added; the first rule that matches the
request and has budget left fires, and at most one rule fires per request. A rule
matches on ``operation`` (a name, a list of names, or ``"*"``) and optionally ``key``
(a regular expression, ``re.search`` against the object key). ``nth=n`` fires only on the
n-th request the rule matches (counted from when it was added, whether or not another
rule fired on the earlier ones); ``count=n`` fires at most n times; ``rate=p`` fires with
probability p, drawn from a random generator seeded with the front's ``seed`` and the
rule's number (rules are numbered from 0 after each ``clear()``), so the same sequence of
requests fails the same way on every run. ``latency_ms`` delays every request.

**Retries absorb faults.** botocore retries 500, 502, 503 and 504 replies, a 200 whose
body is an ``<Error>`` document (it turns it into a 500 for every S3 operation without a
streaming payload, ``CompleteMultipartUpload`` and ``PutObject`` included; a ``GetObject``
returns the document as the object's bytes) and connection errors (resets, lost
replies), with random exponential back-off (about 0.5 s, then 1 s, ... on average): 5
attempts in its default ``legacy`` mode. So a single fault on a retried operation is
usually *absorbed*: the call succeeds, and only the front's statistics show the fault.
A test that needs the failure to reach the caller either makes it persistent (no
``count``, or a ``count`` above the number of attempts) or turns retries off with
``boto3_client(retries={"total_max_attempts": 1})``. Beware: botocore's
``retries={"max_attempts": n}`` counts *retries*, so ``max_attempts=1`` still sends a
request twice (``max_attempts=0`` is one attempt).

s3fs adds two layers. aiohttp resends a PUT, GET, HEAD or DELETE (not a POST) once when
its connection is reset, before botocore sees anything; a reset that gets through
reaches the caller as botocore's ``EndpointConnectionError`` ("Could not connect to the
endpoint URL", not an ``OSError``), which s3fs does not retry. s3fs itself retries
``SlowDown`` replies after botocore gave up (``S3FileSystem.retries``, 5: a persistent
503 costs 25 requests and half a minute), and turns other S3 errors into ``OSError``
(``InternalError``: ``EREMOTEIO``, ``SlowDown``: ``EBUSY``). For one attempt per call:
``s3fs.S3FileSystem(skip_instance_cache=True, config_kwargs={"retries":
{"total_max_attempts": 1}}, **front.storage_options)`` and then ``fs.retries = 1`` (an
attribute, not a constructor argument); resets of idempotent requests still go out twice.

Addressing is path-style (``http://front/bucket/key``), as the tests use. Each
request's body is read completely before it is forwarded (``Content-Length`` or
``Transfer-Encoding: chunked``; ``Expect: 100-continue`` is answered by the front);
headers, the request target and the ``Host`` header go upstream unchanged, so SigV4
signatures stay valid; responses stream back (HEAD replies without a body). Each client
connection gets one keep-alive connection upstream.

The front runs in a child process (its own interpreter lock; the proxy is standard
library only) on a free 127.0.0.1 port and stops when its parent goes away, as every
local server does (:mod:`magicfs.integrations.local_server`, which also names each
request's operation): it watches its stdin when that is a pipe from the parent
(end-of-file: the parent closed it or died), and polls its parent's pid in every case
(so a front started by hand with stdin on ``/dev/null`` does not stop at once). When it
stops, it sends nothing more upstream and waits (at most :data:`DRAIN_SECONDS`) until
the server has answered every request already sent to it, so ``FaultFront.stop()``
returns with the server quiet: a test that kills a client and then stops its front
reads the store with nothing of the dead client still being acted on. It is
controlled over HTTP on the same port under ``/_fault/`` (never a valid bucket name):
``GET|POST|DELETE /_fault/rules``, ``GET|DELETE /_fault/stats``, ``GET /_fault/arrivals``
(each request's arrival time, operation and signing time; reset with the statistics),
``GET|PUT /_fault/config``, ``GET /_fault/status`` (``{"parent_gone": ...}``: whether it has
decided its parent went).

Usage::

    with FaultFront(s3_server.endpoint_url, seed=0) as front:
        front.add_rule("CreateMultipartUpload", "reset-after", count=1)
        client = front.boto3_client()
        client.create_multipart_upload(Bucket="bkt", Key="k")  # retried: succeeds
        front.stats()["CreateMultipartUpload"]
        # {"requests": 2, "faults": {"reset-after": 1}}

Run ``python tests/helpers/fault_front.py --upstream http://127.0.0.1:PORT`` to start
one by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import io
import json
import os
import random
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any
from xml.sax.saxutils import escape

from magicfs.integrations.local_server import (
    CREDENTIALS,
    LOOPBACK,
    OPERATIONS,
    ChildServer,
    S3Endpoint,
    announce_ready,
    watch_parent,
)
from magicfs.integrations.local_server import s3_operation as classify

__all__ = ["ACTIONS", "OPERATIONS", "FaultFront", "classify"]

CONTROL_PREFIX = "/_fault/"

#: What a rule can do to a request (see the module docstring).
ACTIONS = ("503", "500", "500-after", "error-200", "reset-before", "reset-after", "delay")

_READY = "MAGICFS-FAULT-FRONT-READY"

# Headers that describe one connection, not the request (RFC 9110 7.6.1), and ``Expect``:
# the front answers ``100-continue`` itself and forwards a complete body. botocore never
# signs these (``Expect`` is on its SigV4 deny-list), so dropping them keeps signatures valid.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    }
)

# --- rules and statistics (in the front's process) ------------------------------------------


def validate_rule(spec: dict[str, Any]) -> dict[str, Any]:
    """A rule's JSON form, normalised; ``ValueError`` names what is wrong with it."""
    unknown = set(spec) - {"operation", "action", "rate", "nth", "count", "key", "ms"}
    if unknown:
        raise ValueError(f"unknown rule fields: {sorted(unknown)}")
    operation = spec.get("operation")
    operations = [operation] if isinstance(operation, str) else operation
    if not operations or not all(isinstance(op, str) for op in operations):
        raise ValueError(f"operation must be a name or a list of names, not {operation!r}")
    for op in operations:
        if op != "*" and op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}; one of {', '.join(OPERATIONS)} or '*'")
    action = spec.get("action")
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    rate = spec.get("rate", 1.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be a probability in [0, 1], not {rate!r}")
    for name in ("nth", "count"):
        value = spec.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    ms = spec.get("ms")
    if action == "delay" and ms is None:
        raise ValueError("a 'delay' rule needs ms")
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int | float) or ms < 0):
        raise ValueError(f"ms must be a non-negative number, not {ms!r}")
    key = spec.get("key")
    if key is not None:
        if not isinstance(key, str):
            raise ValueError(f"key must be a regular expression, not {key!r}")
        try:
            re.compile(key)
        except re.error as error:
            raise ValueError(f"key {key!r} is not a regular expression: {error}") from None
    return {
        "operation": sorted(set(operations)),
        "action": action,
        "rate": float(rate),
        "nth": spec.get("nth"),
        "count": spec.get("count"),
        "key": key,
        "ms": ms,
    }


#: How long a stopping front waits for the answers of the requests it had sent upstream.
DRAIN_SECONDS = 30.0


class _Rule:
    def __init__(self, number: int, spec: dict[str, Any], seed: int) -> None:
        self.number = number
        self.spec = spec
        self.operations = frozenset(spec["operation"])
        self.key = re.compile(spec["key"]) if spec["key"] is not None else None
        self.random = random.Random(f"magicfs-fault-front/{seed}/{number}")
        self.matched = 0
        self.fired = 0

    def matches(self, operation: str, key: str | None) -> bool:
        if "*" not in self.operations and operation not in self.operations:
            return False
        return self.key is None or (key is not None and self.key.search(key) is not None)

    def fires(self) -> bool:
        """Called once for each request this rule matched, in order, until one fires."""
        spec = self.spec
        if spec["count"] is not None and self.fired >= spec["count"]:
            return False
        if spec["nth"] is not None and self.matched != spec["nth"]:
            return False
        return spec["rate"] >= 1.0 or self.random.random() < spec["rate"]

    def describe(self) -> dict[str, Any]:
        return {"id": self.number, **self.spec, "matched": self.matched, "fired": self.fired}


class FaultPlan:
    """The rules and the statistics; every method is thread-safe."""

    def __init__(self, seed: int = 0, latency_ms: float = 0.0) -> None:
        self.seed = seed
        self.latency_ms = latency_ms
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._numbers = 0
        self._stats: dict[str, dict[str, Any]] = {}
        #: (seconds since the front started, operation, X-Amz-Date) of each request, in
        #: arrival order.
        self._arrivals: list[tuple[float, str, str]] = []
        self._started = time.monotonic()

    def add(self, spec: dict[str, Any]) -> dict[str, Any]:
        normalised = validate_rule(spec)
        with self._lock:
            rule = _Rule(self._numbers, normalised, self.seed)
            self._numbers += 1
            self._rules.append(rule)
            return rule.describe()

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()
            self._numbers = 0

    def reset_stats(self) -> None:
        with self._lock:
            self._stats.clear()
            self._arrivals.clear()

    def arrivals(self) -> list[tuple[float, str, str]]:
        with self._lock:
            return list(self._arrivals)

    def rules(self) -> list[dict[str, Any]]:
        with self._lock:
            return [rule.describe() for rule in self._rules]

    def stats(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return json.loads(json.dumps(self._stats))

    def decide(self, operation: str, key: str | None, signed: str = "") -> dict[str, Any] | None:
        """Count the request (``signed``: its ``X-Amz-Date``); the spec of the rule that
        fires on it, if any."""
        with self._lock:
            entry = self._stats.setdefault(operation, {"requests": 0, "faults": {}})
            entry["requests"] += 1
            self._arrivals.append((time.monotonic() - self._started, operation, signed))
            matching = [rule for rule in self._rules if rule.matches(operation, key)]
            for rule in matching:
                rule.matched += 1
            for rule in matching:
                if rule.fires():
                    rule.fired += 1
                    faults = entry["faults"]
                    faults[rule.spec["action"]] = faults.get(rule.spec["action"], 0) + 1
                    return rule.spec
            return None


# --- the proxy ----------------------------------------------------------------------------


class _ClientGone(Exception):
    """The client closed its connection or sent a malformed request."""


class _UpstreamConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue answered by the base class
    # Headers and body go out in separate writes: without TCP_NODELAY each small reply
    # would wait for the client's delayed ACK (40 ms on Linux).
    disable_nagle_algorithm = True
    server: FrontServer

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        self._close_upstream()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # one line per request: no
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _dispatch(self) -> None:
        try:
            if self.path.startswith(CONTROL_PREFIX):
                self._control()
            else:
                self._proxy()
        except _ClientGone:
            self.close_connection = True

    # -- S3 traffic --

    def _proxy(self) -> None:
        body, trailers = self._read_body()
        operation, bucket, key = classify(self.command, self.path, self.headers)
        plan = self.server.plan
        rule = plan.decide(operation, key, self.headers.get("X-Amz-Date", ""))
        if plan.latency_ms:
            time.sleep(plan.latency_ms / 1000.0)
        action = rule["action"] if rule else None
        resource = "/" + "/".join(filter(None, [bucket, key]))
        if action == "delay":
            time.sleep(rule["ms"] / 1000.0)  # type: ignore[index]
        elif action == "503":
            return self._reply_error(503, "SlowDown", "Please reduce your request rate.", resource)
        elif action == "500":
            return self._reply_error(500, "InternalError", _INTERNAL_ERROR, resource)
        elif action == "error-200":
            return self._reply_error(200, "InternalError", _INTERNAL_ERROR, resource)
        elif action == "reset-before":
            return self._reset()
        if not self.server.begin_forward():
            return self._reset()  # the front is stopping: this request never reaches the server
        try:
            response = self._forward(body, trailers)
        except (OSError, http.client.HTTPException) as error:
            self._close_upstream()
            return self._reply_error(502, "BadGateway", f"upstream failed: {error}", resource)
        finally:
            self.server.end_forward()
        if action in ("500-after", "reset-after"):
            try:
                response.read()
            except (OSError, http.client.HTTPException):
                self._close_upstream()
            if action == "reset-after":
                return self._reset()
            return self._reply_error(500, "InternalError", _INTERNAL_ERROR, resource)
        self._relay(response)

    def _read_body(self) -> tuple[bytes, list[bytes] | None]:
        """The request body, de-chunked; trailer lines when it came chunked, else ``None``."""
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return self._read_chunked()
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0:
                raise ValueError(length)
        except ValueError:
            self.send_error(400, "malformed request body framing")
            raise _ClientGone from None
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            raise _ClientGone
        return body, None

    def _read_chunked(self) -> tuple[bytes, list[bytes]]:
        chunks = []
        while True:
            line = self.rfile.readline(65537)
            if not line.endswith(b"\n"):
                raise _ClientGone
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            chunk = self.rfile.read(size)
            if len(chunk) != size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _ClientGone
            chunks.append(chunk)
        trailers = []
        while True:
            line = self.rfile.readline(65537)
            if not line.endswith(b"\n"):
                raise _ClientGone
            if line in (b"\r\n", b"\n"):
                return b"".join(chunks), trailers
            trailers.append(line)

    def _forward(self, body: bytes, trailers: list[bytes] | None) -> http.client.HTTPResponse:
        """Send the request upstream; on a kept-alive connection the upstream closed
        meanwhile (nothing was answered), send it once more on a fresh one."""
        while True:
            if self._upstream is None:
                host, port = self.server.upstream
                self._upstream = _UpstreamConnection(host, port, timeout=120)
            fresh = self._upstream.sock is None
            try:
                self._send_upstream(self._upstream, body, trailers)
                return self._upstream.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._close_upstream()
                if fresh:
                    raise

    def _send_upstream(
        self, connection: http.client.HTTPConnection, body: bytes, trailers: list[bytes] | None
    ) -> None:
        connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        named_by_connection = {
            name.strip().lower() for name in self.headers.get("Connection", "").split(",")
        }
        for name, value in self.headers.items():
            lower = name.lower()
            if lower in _HOP_BY_HOP or lower in named_by_connection or lower == "content-length":
                continue
            connection.putheader(name, value)
        if trailers is not None:
            connection.putheader("Transfer-Encoding", "chunked")
            connection.endheaders()
            framed = f"{len(body):X}\r\n".encode() + body + b"\r\n" if body else b""
            connection.send(framed + b"0\r\n" + b"".join(trailers) + b"\r\n")
            return
        if body or "Content-Length" in self.headers:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)

    def _relay(self, response: http.client.HTTPResponse) -> None:
        no_body = self.command == "HEAD" or response.status in (204, 304)
        length = response.getheader("Content-Length")
        buffered = None
        try:
            if not no_body and length is None:
                buffered = response.read()  # read-until-close or chunked: give it a length
            self.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                lower = name.lower()
                if lower in _HOP_BY_HOP or (lower == "content-length" and buffered is not None):
                    continue
                self.send_header(name, value)
            if buffered is not None:
                self.send_header("Content-Length", str(len(buffered)))
            self.end_headers()
            if no_body:
                response.read()
            elif buffered is not None:
                self.wfile.write(buffered)
            else:
                while chunk := response.read(1 << 16):
                    self.wfile.write(chunk)
        except (OSError, http.client.HTTPException):
            self._close_upstream()  # the upstream reply may be half read
            raise _ClientGone from None

    def _reply_error(self, status: int, code: str, message: str, resource: str) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>"
            f"<Resource>{escape(resource)}</Resource><RequestId>{request_id}</RequestId>"
            "<HostId>magicfs-fault-front</HostId></Error>"
        ).encode()
        payload = b"" if self.command == "HEAD" else body
        self._reply(status, payload, "application/xml", {"x-amz-request-id": request_id})

    def _reset(self) -> None:
        """Close the client connection with a TCP RST instead of a reply."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The socket closes (and resets) only once its file objects are closed too; the
        # base class flushes ``wfile`` after each request: give it one that goes nowhere.
        for stream in (self.rfile, self.wfile):
            with contextlib.suppress(OSError):
                stream.close()
        self.wfile = io.BytesIO()
        self.connection.close()

    def _close_upstream(self) -> None:
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            upstream.close()

    def _reply(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if body:
                self.wfile.write(body)
        except OSError:
            raise _ClientGone from None

    # -- control --

    def _control(self) -> None:
        body, _ = self._read_body()
        plan = self.server.plan
        route = (self.command, urllib.parse.urlsplit(self.path).path[len(CONTROL_PREFIX) :])
        try:
            payload = json.loads(body) if body else None
            if route == ("GET", "rules"):
                answer: Any = plan.rules()
            elif route == ("POST", "rules"):
                if not isinstance(payload, dict):
                    raise ValueError("a rule is a JSON object")
                answer = plan.add(payload)
            elif route == ("DELETE", "rules"):
                plan.clear_rules()
                answer = {}
            elif route == ("GET", "stats"):
                answer = plan.stats()
            elif route == ("GET", "arrivals"):
                answer = plan.arrivals()
            elif route == ("DELETE", "stats"):
                plan.reset_stats()
                answer = {}
            elif route == ("GET", "status"):
                answer = {"parent_gone": self.server.parent_gone.is_set()}
            elif route in (("GET", "config"), ("PUT", "config")):
                if route[0] == "PUT":
                    latency = (payload or {}).get("latency_ms", plan.latency_ms)
                    if not isinstance(latency, int | float) or latency < 0:
                        raise ValueError(f"latency_ms must be a non-negative number: {latency!r}")
                    plan.latency_ms = float(latency)
                host, port = self.server.upstream
                answer = {
                    "upstream": f"http://{host}:{port}",
                    "seed": plan.seed,
                    "latency_ms": plan.latency_ms,
                }
            else:
                self._reply(404, b'{"error": "no such control path"}', "application/json")
                return
        except ValueError as error:
            self._reply(400, json.dumps({"error": str(error)}).encode(), "application/json")
            return
        self._reply(200, json.dumps(answer).encode(), "application/json")


_INTERNAL_ERROR = "We encountered an internal error. Please try again."


class FrontServer(http.server.ThreadingHTTPServer):
    """The front: one thread per client connection, one upstream connection per thread."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, upstream_url: str, plan: FaultPlan) -> None:
        self.upstream = _loopback_address(upstream_url)
        self.plan = plan
        #: Requests sent upstream and not yet answered; once stopping, none is sent.
        self.forwarding = 0
        self.stopping = False
        self.answered = threading.Condition()
        #: Set once the front has seen its parent go (``watch_parent``): it is stopping.
        self.parent_gone = threading.Event()
        super().__init__((LOOPBACK, port), _Handler)

    def begin_forward(self) -> bool:
        """May a request go upstream now? Not once the front is stopping."""
        with self.answered:
            if self.stopping:
                return False
            self.forwarding += 1
            return True

    def end_forward(self) -> None:
        with self.answered:
            self.forwarding -= 1
            self.answered.notify_all()

    def drain(self, timeout: float) -> None:
        """Stop: no request goes upstream any more (what had not got onto the server is
        lost, as with a dead client), and wait until the server has answered every
        request already sent to it (it acts on them whether or not anyone reads the
        answer). Then the one who stopped the front knows the server is quiet."""
        with self.answered:
            self.stopping = True
            self.answered.wait_for(lambda: self.forwarding == 0, timeout)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would resolve the host name (socket.getfqdn): no lookups.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = LOOPBACK, self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client gone is no news
            super().handle_error(request, client_address)


def _loopback_address(url: str) -> tuple[str, int]:
    split = urllib.parse.urlsplit(url)
    if split.scheme != "http" or split.hostname != LOOPBACK or split.port is None:
        raise ValueError(f"the upstream must be http://{LOOPBACK}:<port>, not {url!r}")
    return LOOPBACK, split.port


def serve(upstream_url: str, port: int, seed: int, latency_ms: float, parent_pid: int) -> None:
    """Run a front until its parent goes away (see the module docstring)."""
    server = FrontServer(port, upstream_url, FaultPlan(seed, latency_ms))
    announce_ready(_READY, server.server_address[1])
    server.parent_gone = watch_parent(server.shutdown, parent_pid)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.drain(DRAIN_SECONDS)
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="fault-injecting S3 front on 127.0.0.1")
    parser.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT of the server")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--seed", type=int, default=0, help="seed of the rules' random draws")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay per request")
    parser.add_argument("--parent-pid", type=int, default=None, help="stop when it goes away")
    args = parser.parse_args(argv)
    parent = args.parent_pid if args.parent_pid is not None else os.getppid()
    serve(args.upstream, args.port, args.seed, args.latency_ms, parent)


# --- the test process's side ------------------------------------------------------------------


class FaultFront(S3Endpoint):
    """A fault-injecting front in a child process, in front of ``upstream_url``.

    Use as a context manager (or ``start()`` / ``stop()``). ``seed`` seeds the rules'
    ``rate`` draws; ``latency_ms`` delays every request. ``storage_options`` and
    ``boto3_client(**config)`` bind clients to the front (add ``skip_instance_cache=True``
    to the options for a fresh s3fs).
    """

    def __init__(
        self,
        upstream_url: str,
        seed: int = 0,
        *,
        latency_ms: float = 0.0,
        port: int = 0,
        startup_timeout: float = 30.0,
        credentials: tuple[str, str] = CREDENTIALS,
    ) -> None:
        _loopback_address(upstream_url)
        self.upstream_url = upstream_url
        #: The upstream store's access key and secret, for the clients made here (moto
        #: takes any; Ceph RGW checks them: the front forwards SigV4 signatures intact).
        self.credentials = credentials
        self.seed = seed
        self.latency_ms = latency_ms
        self.requested_port = port
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._child: ChildServer | None = None
        # Control requests never go through a proxy, whatever the environment says.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- lifecycle --

    def start(self) -> FaultFront:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--upstream",
            self.upstream_url,
            "--port",
            str(self.requested_port),
            "--seed",
            str(self.seed),
            "--latency-ms",
            str(self.latency_ms),
            "--parent-pid",
            str(os.getpid()),
        ]
        self._child = ChildServer(
            "fault front", command, _READY, startup_timeout=self.startup_timeout
        )
        self.port = int(self._child.start())
        return self

    def stop(self) -> None:
        """Close the front's stdin (it stops); terminate, then kill it, should it linger."""
        child, self._child = self._child, None
        if child is not None:
            child.stop()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    def __enter__(self) -> FaultFront:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("fault front not started")
        return f"http://{LOOPBACK}:{self.port}"

    # -- rules and statistics --

    def add_rule(
        self,
        operation: str | list[str],
        action: str,
        *,
        rate: float = 1.0,
        nth: int | None = None,
        count: int | None = None,
        key: str | None = None,
        ms: float | None = None,
    ) -> dict[str, Any]:
        """Add a rule after the existing ones; returns it with its ``id`` and counters."""
        spec = {"operation": operation, "action": action, "rate": rate}
        spec.update({"nth": nth, "count": count, "key": key, "ms": ms})
        validate_rule(spec)  # refuse a bad rule here, with a traceback into the test
        return self._call("POST", "rules", spec)

    def rules(self) -> list[dict[str, Any]]:
        """The rules in order, each with how many requests it ``matched`` and ``fired`` on."""
        return self._call("GET", "rules")

    def clear(self) -> None:
        """Remove every rule (numbering restarts at 0) and reset the statistics."""
        self._call("DELETE", "rules")
        self._call("DELETE", "stats")

    def reset_stats(self) -> None:
        self._call("DELETE", "stats")

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per operation seen since the last reset: ``{"requests": n, "faults": {action: n}}``."""
        return self._call("GET", "stats")

    def arrivals(self) -> list[tuple[float, str, str]]:
        """``(seconds, operation, signed)`` of each request since the last reset, in the
        order the front received them: seconds on the front's own monotonic clock, and the
        ``X-Amz-Date`` the client signed it with (``20261207T061500Z``; ``""``: none)."""
        return [(float(t), str(op), str(signed)) for t, op, signed in self._call("GET", "arrivals")]

    def set_latency(self, latency_ms: float) -> None:
        """Delay every request by ``latency_ms`` from now on."""
        self._call("PUT", "config", {"latency_ms": latency_ms})
        self.latency_ms = latency_ms

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(
            f"{self.endpoint_url}{CONTROL_PREFIX}{path}", data=data, method=method
        )
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            raise ValueError(f"fault front refused {method} {path}: {detail}") from None


if __name__ == "__main__":
    main()
