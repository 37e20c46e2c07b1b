"""A STUB S3 endpoint for scale benchmarks: it answers S3's wire protocol, it is not a store.

    python benchmarks/stub_s3.py --port 0                     # prints "READY http://127.0.0.1:PORT"
    python benchmarks/stub_s3.py --port 0 --rate 500 --latency-ms 5
    python benchmarks/stub_s3.py --measure                    # how many requests/s it answers

Why it exists: measuring a job commit of 1,000,000 files needs a server that answers a
million ``CompleteMultipartUpload`` calls in minutes on a 2-core machine. moto (the
project's test server, :mod:`magicfs.integrations.embedded_s3`) spends about 6 ms of CPU
per request:
over an hour and a half of server CPU for such a commit, which then measures moto. This
stub answers the same requests for a small fraction of that, so what a scale benchmark
measures is the client. It is **not** S3 and not a test double for correctness: it
checks no signature, accepts any credentials, keeps everything in one process's memory,
has no versioning, no ACLs, no copy operations, and is only as strict as the
benchmarks need (tests run against moto, the fault front and real stores).

What it answers (path-style ``http://127.0.0.1:PORT/bucket/key``, HTTP/1.1 keep-alive,
every request body read in full, ``Content-Length`` on every response, S3's XML):
CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation, PutObject (``If-None-Match: *``
answers 412 ``PreconditionFailed`` over an existing object; ``x-amz-meta-*`` kept),
GetObject (``Range: bytes=a-b``; 404 ``NoSuchKey``), HeadObject, DeleteObject,
DeleteObjects (``POST ?delete``, ``Quiet``), ListObjectsV2 and ListObjects (prefix,
delimiter and ``CommonPrefixes``, continuation token / marker, ``max-keys`` up to 1,000),
CreateMultipartUpload, UploadPart, CompleteMultipartUpload (``x-amz-mp-object-size``
must match the parts; ``If-None-Match: *``; 404 ``NoSuchUpload``), AbortMultipartUpload,
ListMultipartUploads (prefix, ``key-marker`` / ``upload-id-marker`` paging, up to 1,000)
and ListParts.

**Synthetic uploads.** An upload id that starts with ``synthetic-`` is a pending upload
nobody had to create, so a benchmark can prepare a million ``.pendingset`` entries
without a million ``CreateMultipartUpload`` calls. Completing one creates an object of
``x-amz-mp-object-size`` bytes (zeros; no body is stored, only its length); completing
or aborting it a second time answers ``NoSuchUpload``; it never appears in
ListMultipartUploads.

**Costs and limits, as S3 has them.** ``--latency-ms M`` sleeps M ms in every request
(wall time, no CPU; concurrent requests overlap as on a network). ``--rate N`` throttles
like S3's per-prefix request rate: mutating requests (PUT, POST, DELETE) beyond N per
second (a token bucket holding N/10) answer ``503 SlowDown``.

**Control and counters** (not S3; the ``_stub`` bucket name is invalid on S3):
``GET /_stub/stats`` (JSON: requests by S3 operation and HTTP status, 503s answered,
first/last time of each operation's successes, objects and uploads held, this
process's CPU seconds and peak RSS), ``GET /_stub/log`` (JSON: ``[operation, key,
status]`` of every request in the order answered, kept only while logging is on, so a
benchmark can tell a marker from a record from a destination key on the server's
side), ``POST /_stub/reset-stats`` (counters and log), and
``POST /_stub/config?rate=N&latency_ms=M&log=0|1`` (change the settings at run time;
rate 0 = unlimited). :class:`StubS3Process` starts it in a child process on a free loopback port
and always stops it.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import contextlib
import email.utils
import hashlib
import http.server
import json
import os
import resource
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Any

from magicfs.integrations.local_server import (
    ACCESS_KEY,
    LOOPBACK,
    REGION,
    SECRET_KEY,
    ChildServer,
    S3Endpoint,
    announce_ready,
    s3_operation,
    watch_parent,
)

#: The keys any client may use (the stub checks none); ``large_jobs.py`` imports them here.
CREDENTIALS = (ACCESS_KEY, SECRET_KEY)
READY = "READY"
SYNTHETIC_PREFIX = "synthetic-"
#: Most entries one listing page returns (S3's limit).
MAX_PAGE = 1000
#: S3's minimum size of every part but the last.
MIN_PART = 5 << 20
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_XML_HEAD = b'<?xml version="1.0" encoding="UTF-8"?>\n'
_MUTATING = frozenset({"PUT", "POST", "DELETE"})


# --- the data ---------------------------------------------------------------------------


class _Object:
    """One object. ``body`` is ``None`` for a completed synthetic upload (zeros of ``size``)."""

    __slots__ = ("body", "ctype", "etag", "meta", "mtime", "size")

    def __init__(
        self,
        body: bytes | None,
        size: int,
        etag: str | None,
        meta: tuple[tuple[str, str], ...] | None,
        ctype: str | None,
    ) -> None:
        self.body = body
        self.size = size
        self.etag = etag  # None: derived from the key when asked (synthetic objects)
        self.meta = meta
        self.ctype = ctype
        self.mtime = time.time()

    def etag_of(self, key: str) -> str:
        if self.etag is None:
            return '"' + hashlib.md5(key.encode()).hexdigest() + '-1"'
        return self.etag

    def data(self, start: int, end: int) -> bytes:
        if self.body is None:
            return bytes(end - start)
        return self.body[start:end]


class _Upload:
    __slots__ = ("bucket", "ctype", "initiated", "key", "meta", "parts", "upload_id")

    def __init__(self, bucket: str, key: str, upload_id: str, meta: Any, ctype: str | None):
        self.bucket = bucket
        self.key = key
        self.upload_id = upload_id
        self.meta = meta
        self.ctype = ctype
        self.initiated = time.time()
        self.parts: dict[int, tuple[bytes, str, float]] = {}


class _Bucket:
    """Objects by key, plus a sorted list of keys for listings, merged lazily.

    Listings are rare next to writes (a job commit lists at its start and end), so new
    keys wait in ``added`` and deleted keys stay in ``sorted_keys`` (skipped) until the
    next listing merges them in one pass.
    """

    __slots__ = ("added", "created", "name", "objects", "sorted_keys", "stale")

    def __init__(self, name: str) -> None:
        self.name = name
        self.created = time.time()
        self.objects: dict[str, _Object] = {}
        self.sorted_keys: list[str] = []
        self.added: set[str] = set()
        self.stale = 0

    def put(self, key: str, obj: _Object) -> None:
        if key not in self.objects and not self._in_sorted(key):
            self.added.add(key)
        self.objects[key] = obj

    def delete(self, key: str) -> bool:
        if self.objects.pop(key, None) is None:
            return False
        if key in self.added:
            self.added.discard(key)
        else:
            self.stale += 1
        return True

    def _in_sorted(self, key: str) -> bool:
        keys = self.sorted_keys
        i = bisect.bisect_left(keys, key)
        return i < len(keys) and keys[i] == key

    def keys(self) -> list[str]:
        """The sorted keys (may still hold deleted ones: check ``objects``)."""
        if self.added:
            merged = self.sorted_keys + sorted(self.added)
            merged.sort()  # two sorted runs: one linear merge
            self.sorted_keys, self.added = merged, set()
        if self.stale > max(1000, len(self.sorted_keys) // 4):
            self.sorted_keys = [k for k in self.sorted_keys if k in self.objects]
            self.stale = 0
        return self.sorted_keys


class _TokenBucket:
    """``rate`` tokens a second, at most ``rate / 10`` saved up (S3-like bursts)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate / 10)
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return True
            return False


class S3Error(Exception):
    def __init__(self, status: int, code: str, message: str, resource: str = "") -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.resource = status, code, message, resource


class _Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()
        #: (operation, key, status) of every request, in the order answered, while
        #: ``logging`` is on: what a benchmark classifies by key (``GET /_stub/log``).
        self.log: list[tuple[str, str, int]] = []
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.since = time.time()

    def count(self, operation: str, status: int, key: str = "", logging: bool = False) -> None:
        with self.lock:
            self.counts[(operation, status)] += 1
            if logging:
                self.log.append((operation, key, status))
            if status < 300:
                now = time.time()
                self.first.setdefault(operation, now)
                self.last[operation] = now


class StubState:
    """Everything the server holds: buckets, uploads, settings, counters."""

    def __init__(self, rate: float = 0.0, latency_ms: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.buckets: dict[str, _Bucket] = {}
        self.uploads: dict[str, _Upload] = {}
        self.synthetic_done: set[str] = set()
        self.stats = _Stats()
        self.delay = 0.0
        self.limiter: _TokenBucket | None = None
        self.logging = False
        self.configure(rate, latency_ms)
        self._next_id = 0
        self._id_prefix = os.urandom(6).hex()

    def configure(
        self, rate: float | None = None, latency_ms: float | None = None, log: bool | None = None
    ) -> None:
        if rate is not None:
            self.limiter = _TokenBucket(rate) if rate > 0 else None
        if latency_ms is not None:
            self.delay = latency_ms / 1000.0
        if log is not None:
            self.logging = log

    def new_upload_id(self) -> str:
        with self.lock:
            self._next_id += 1
            return f"{self._id_prefix}-{self._next_id:x}"

    def bucket(self, name: str) -> _Bucket:
        found = self.buckets.get(name)
        if found is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist", name)
        return found

    def stats_document(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with self.stats.lock:
            requests: dict[str, dict[str, int]] = {}
            for (operation, status), n in sorted(self.stats.counts.items()):
                requests.setdefault(operation, {})[str(status)] = n
            total = sum(self.stats.counts.values())
            throttled = sum(n for (_, s), n in self.stats.counts.items() if s == 503)
            first, last = dict(self.stats.first), dict(self.stats.last)
            since = self.stats.since
        return {
            "requests": requests,
            "total": total,
            "throttled": throttled,
            "first_success": first,
            "last_success": last,
            "since": since,
            "now": time.time(),
            "objects": sum(len(b.objects) for b in self.buckets.values()),
            "uploads": len(self.uploads),
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "max_rss_mib": usage.ru_maxrss / 1024,
            "rate": self.limiter.rate if self.limiter else 0,
            "latency_ms": self.delay * 1000,
        }


# --- helpers ----------------------------------------------------------------------------


def _esc(text: str) -> str:
    if "&" in text or "<" in text or ">" in text:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


def _http_date(ts: float) -> str:
    return email.utils.formatdate(ts, usegmt=True)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _parse_xml(body: bytes) -> ET.Element:
    try:
        return ET.fromstring(body)
    except ET.ParseError:
        raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed") from None


def _after_prefix(prefix: str) -> str:
    """The smallest string greater than every string that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _token(kind: str, value: str) -> str:
    return base64.urlsafe_b64encode(f"{kind}{value}".encode()).decode()


def _untoken(token: str) -> tuple[str, str]:
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except ValueError:
        raise S3Error(
            400, "InvalidArgument", "The continuation token provided is incorrect"
        ) from None
    return text[:1], text[1:]


def _max_items(query: dict[str, str], name: str) -> int:
    try:
        value = int(query.get(name, MAX_PAGE))
    except ValueError:
        raise S3Error(400, "InvalidArgument", f"{name} must be an integer") from None
    return max(0, min(MAX_PAGE, value))


def _xml(root: str, parts: list[str]) -> bytes:
    return _XML_HEAD + f'<{root} xmlns="{_NS}">{"".join(parts)}</{root}>'.encode()


def _meta_of(headers: dict[str, str]) -> tuple[tuple[str, str], ...] | None:
    meta = tuple((name, value) for name, value in headers.items() if name[:11] == "x-amz-meta-")
    return meta or None


def _md5_etag(data: bytes) -> str:
    return '"' + hashlib.md5(data).hexdigest() + '"'


Response = tuple[int, list[tuple[str, str]], bytes]


# --- the operations -----------------------------------------------------------------------


class _Operations:
    """S3 operations on a :class:`StubState`; each returns (status, headers, body)."""

    def __init__(self, state: StubState) -> None:
        self.state = state

    # buckets

    def create_bucket(self, bucket: str) -> Response:
        with self.state.lock:
            self.state.buckets.setdefault(bucket, _Bucket(bucket))
        return 200, [("Location", "/" + bucket)], b""

    def head_bucket(self, bucket: str) -> Response:
        self.state.bucket(bucket)
        return 200, [("x-amz-bucket-region", REGION)], b""

    def delete_bucket(self, bucket: str) -> Response:
        with self.state.lock:
            found = self.state.bucket(bucket)
            if found.objects:
                raise S3Error(409, "BucketNotEmpty", "The bucket you tried to delete is not empty")
            del self.state.buckets[bucket]
        return 204, [], b""

    def bucket_location(self, bucket: str) -> Response:
        self.state.bucket(bucket)
        return 200, [], _XML_HEAD + f'<LocationConstraint xmlns="{_NS}"/>'.encode()

    # objects

    def put_object(self, bucket: str, key: str, headers: dict[str, str], body: bytes) -> Response:
        etag = _md5_etag(body)
        obj = _Object(body, len(body), etag, _meta_of(headers), headers.get("content-type"))
        with self.state.lock:
            found = self.state.bucket(bucket)
            if headers.get("if-none-match") == "*" and key in found.objects:
                raise S3Error(
                    412,
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                    key,
                )
            found.put(key, obj)
        return 200, [("ETag", etag)], b""

    def _object(self, bucket: str, key: str) -> _Object:
        obj = self.state.bucket(bucket).objects.get(key)
        if obj is None:
            raise S3Error(404, "NoSuchKey", "The specified key does not exist.", key)
        return obj

    def _object_headers(self, key: str, obj: _Object) -> list[tuple[str, str]]:
        headers = [
            ("ETag", obj.etag_of(key)),
            ("Last-Modified", _http_date(obj.mtime)),
            ("Content-Type", obj.ctype or "binary/octet-stream"),
            ("Accept-Ranges", "bytes"),
        ]
        if obj.meta:
            headers.extend(obj.meta)
        return headers

    def get_object(self, bucket: str, key: str, headers: dict[str, str], head: bool) -> Response:
        obj = self._object(bucket, key)
        out = self._object_headers(key, obj)
        wanted = headers.get("range")
        if not wanted:
            if head:
                return 200, [*out, ("Content-Length", str(obj.size))], b""
            return 200, out, obj.data(0, obj.size)
        start, end = self._range(wanted, obj.size)
        out.append(("Content-Range", f"bytes {start}-{end - 1}/{obj.size}"))
        if head:
            return 206, [*out, ("Content-Length", str(end - start))], b""
        return 206, out, obj.data(start, end)

    @staticmethod
    def _range(header: str, size: int) -> tuple[int, int]:
        """``bytes=a-b``, ``bytes=a-``, ``bytes=-n`` -> ``[start, end)``; 416 past the end."""
        spec = header.strip()
        if not spec.startswith("bytes=") or "," in spec:
            return 0, size
        first, _, last = spec[6:].partition("-")
        try:
            if not first:
                start, end = max(0, size - int(last)), size
            else:
                start = int(first)
                end = min(size, int(last) + 1) if last else size
        except ValueError:
            return 0, size
        if start >= size or end <= start:
            raise S3Error(416, "InvalidRange", "The requested range is not satisfiable")
        return start, end

    def delete_object(self, bucket: str, key: str) -> Response:
        with self.state.lock:
            self.state.bucket(bucket).delete(key)
        return 204, [], b""

    def delete_objects(self, bucket: str, body: bytes) -> Response:
        root = _parse_xml(body)
        quiet = False
        keys: list[str] = []
        for element in root:
            name = _local(element.tag)
            if name == "Quiet":
                quiet = (element.text or "").strip().lower() == "true"
            elif name == "Object":
                for child in element:
                    if _local(child.tag) == "Key":
                        keys.append(child.text or "")
        if len(keys) > MAX_PAGE:
            raise S3Error(400, "MalformedXML", "at most 1000 keys per DeleteObjects")
        with self.state.lock:
            found = self.state.bucket(bucket)
            for key in keys:
                found.delete(key)
        parts = [] if quiet else [f"<Deleted><Key>{_esc(k)}</Key></Deleted>" for k in keys]
        return 200, [], _xml("DeleteResult", parts)

    # listings

    def list_objects(self, bucket: str, query: dict[str, str], v2: bool) -> Response:
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        max_keys = _max_items(query, "max-keys")
        url = query.get("encoding-type") == "url"
        start_key, skip_prefix = "", ""
        if v2 and query.get("continuation-token"):
            kind, value = _untoken(query["continuation-token"])
            if kind == "P":
                skip_prefix = value
            else:
                start_key = value
        elif v2:
            start_key = query.get("start-after", "")
        else:
            start_key = query.get("marker", "")
            if delimiter and start_key.endswith(delimiter) and start_key.startswith(prefix):
                start_key, skip_prefix = "", start_key
        contents: list[str] = []
        prefixes: list[str] = []
        last_kind, last_value = "", ""
        truncated = False
        with self.state.lock:
            found = self.state.bucket(bucket)
            keys, objects = found.keys(), found.objects
            i = bisect.bisect_left(keys, prefix)
            if start_key:
                i = max(i, bisect.bisect_right(keys, start_key))
            if skip_prefix:
                i = max(i, bisect.bisect_left(keys, _after_prefix(skip_prefix)))
            n = len(keys)
            taken = 0
            while i < n:
                key = keys[i]
                if not key.startswith(prefix):
                    break
                obj = objects.get(key)
                if obj is None:  # deleted since the last merge
                    i += 1
                    continue
                if taken == max_keys:
                    truncated = True
                    break
                if delimiter:
                    cut = key.find(delimiter, len(prefix))
                    if cut >= 0:
                        common = key[: cut + len(delimiter)]
                        name = urllib.parse.quote(common) if url else _esc(common)
                        prefixes.append(f"<CommonPrefixes><Prefix>{name}</Prefix></CommonPrefixes>")
                        taken += 1
                        last_kind, last_value = "P", common
                        i = bisect.bisect_left(keys, _after_prefix(common), i + 1)
                        continue
                name = urllib.parse.quote(key) if url else _esc(key)
                contents.append(
                    f"<Contents><Key>{name}</Key><LastModified>{_iso(obj.mtime)}</LastModified>"
                    f"<ETag>{_esc(obj.etag_of(key))}</ETag><Size>{obj.size}</Size>"
                    "<StorageClass>STANDARD</StorageClass></Contents>"
                )
                taken += 1
                last_kind, last_value = "K", key
                i += 1

        def enc(text: str) -> str:
            return urllib.parse.quote(text) if url else _esc(text)

        head = [
            f"<Name>{_esc(bucket)}</Name><Prefix>{enc(prefix)}</Prefix>",
            f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{str(truncated).lower()}</IsTruncated>",
        ]
        if delimiter:
            head.append(f"<Delimiter>{enc(delimiter)}</Delimiter>")
        if url:
            head.append("<EncodingType>url</EncodingType>")
        if v2:
            head.append(f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>")
            if query.get("continuation-token"):
                head.append(
                    f"<ContinuationToken>{_esc(query['continuation-token'])}</ContinuationToken>"
                )
            if query.get("start-after"):
                head.append(f"<StartAfter>{enc(query['start-after'])}</StartAfter>")
            if truncated:
                token = _token(last_kind, last_value)
                head.append(f"<NextContinuationToken>{token}</NextContinuationToken>")
        else:
            head.append(f"<Marker>{enc(query.get('marker', ''))}</Marker>")
            if truncated:
                head.append(f"<NextMarker>{enc(last_value)}</NextMarker>")
        return 200, [], _xml("ListBucketResult", head + contents + prefixes)

    # multipart uploads

    def create_upload(self, bucket: str, key: str, headers: dict[str, str]) -> Response:
        self.state.bucket(bucket)
        upload_id = self.state.new_upload_id()
        upload = _Upload(bucket, key, upload_id, _meta_of(headers), headers.get("content-type"))
        with self.state.lock:
            self.state.uploads[upload_id] = upload
        body = _xml(
            "InitiateMultipartUploadResult",
            [
                f"<Bucket>{_esc(bucket)}</Bucket><Key>{_esc(key)}</Key>",
                f"<UploadId>{upload_id}</UploadId>",
            ],
        )
        return 200, [], body

    def _upload(self, bucket: str, key: str, upload_id: str) -> _Upload:
        upload = self.state.uploads.get(upload_id)
        if upload is None or upload.bucket != bucket or upload.key != key:
            raise S3Error(
                404,
                "NoSuchUpload",
                "The specified upload does not exist. The upload "
                "ID may be invalid, or the upload may have been aborted or completed.",
                upload_id,
            )
        return upload

    def _synthetic_pending(self, upload_id: str) -> None:
        if upload_id in self.state.synthetic_done:
            raise S3Error(
                404,
                "NoSuchUpload",
                "The specified upload does not exist (synthetic "
                "upload already completed or aborted)",
                upload_id,
            )

    def upload_part(self, bucket: str, key: str, query: dict[str, str], body: bytes) -> Response:
        upload_id = query.get("uploadId", "")
        try:
            number = int(query.get("partNumber", ""))
        except ValueError:
            raise S3Error(400, "InvalidArgument", "partNumber must be an integer") from None
        if not 1 <= number <= 10_000:
            raise S3Error(400, "InvalidArgument", "Part number must be between 1 and 10000")
        etag = _md5_etag(body)
        with self.state.lock:
            self.state.bucket(bucket)
            if upload_id.startswith(SYNTHETIC_PREFIX):
                self._synthetic_pending(upload_id)
            else:
                self._upload(bucket, key, upload_id).parts[number] = (body, etag, time.time())
        return 200, [("ETag", etag)], b""

    def complete_upload(
        self, bucket: str, key: str, upload_id: str, headers: dict[str, str], body: bytes
    ) -> Response:
        declared = headers.get("x-amz-mp-object-size")
        try:
            size = int(declared) if declared is not None else None
        except ValueError:
            raise S3Error(
                400, "InvalidArgument", "x-amz-mp-object-size must be an integer"
            ) from None
        exclusive = headers.get("if-none-match") == "*"
        synthetic = upload_id.startswith(SYNTHETIC_PREFIX)
        wanted: list[tuple[int, str]] = []
        if not synthetic:
            for part in _parse_xml(body):
                if _local(part.tag) != "Part":
                    continue
                number, etag = 0, ""
                for child in part:
                    name = _local(child.tag)
                    if name == "PartNumber":
                        number = int((child.text or "0").strip())
                    elif name == "ETag":
                        etag = (child.text or "").strip().strip('"')
                wanted.append((number, etag))
            if not wanted:
                raise S3Error(400, "MalformedXML", "The XML you provided did not list any part")
        with self.state.lock:
            found = self.state.bucket(bucket)
            if synthetic:
                self._synthetic_pending(upload_id)
                meta, ctype, data = None, None, None
                total = size or 0
            else:
                upload = self._upload(bucket, key, upload_id)
                data = self._assemble(upload, wanted)
                total = len(data)
                if size is not None and size != total:
                    raise S3Error(
                        400,
                        "InvalidRequest",
                        f"x-amz-mp-object-size ({size}) does "
                        f"not match the size of the parts ({total})",
                    )
                meta, ctype = upload.meta, upload.ctype
            if exclusive and key in found.objects:
                raise S3Error(
                    412,
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                    key,
                )
            if synthetic:
                self.state.synthetic_done.add(upload_id)
                etag = None
            else:
                del self.state.uploads[upload_id]
                digest = hashlib.md5(
                    b"".join(bytes.fromhex(upload.parts[n][1].strip('"')) for n, _ in wanted)
                )
                etag = f'"{digest.hexdigest()}-{len(wanted)}"'
            obj = _Object(data, total, etag, meta, ctype)
            found.put(key, obj)
        body_out = _xml(
            "CompleteMultipartUploadResult",
            [
                f"<Location>http://127.0.0.1/{_esc(bucket)}/{_esc(key)}</Location>",
                f"<Bucket>{_esc(bucket)}</Bucket><Key>{_esc(key)}</Key>",
                f"<ETag>{_esc(obj.etag_of(key))}</ETag>",
            ],
        )
        return 200, [], body_out

    @staticmethod
    def _assemble(upload: _Upload, wanted: list[tuple[int, str]]) -> bytes:
        previous = 0
        chunks = []
        for index, (number, etag) in enumerate(wanted):
            if number <= previous:
                raise S3Error(
                    400,
                    "InvalidPartOrder",
                    "The list of parts was not in ascending "
                    "order. Parts must be ordered by part number.",
                )
            previous = number
            part = upload.parts.get(number)
            if part is None or part[1].strip('"') != etag:
                raise S3Error(
                    400,
                    "InvalidPart",
                    "One or more of the specified parts could not "
                    f"be found, or its entity tag did not match (part {number})",
                )
            if index < len(wanted) - 1 and len(part[0]) < MIN_PART:
                raise S3Error(
                    400,
                    "EntityTooSmall",
                    "Your proposed upload is smaller than the minimum allowed object size.",
                )
            chunks.append(part[0])
        return b"".join(chunks)

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> Response:
        with self.state.lock:
            self.state.bucket(bucket)
            if upload_id.startswith(SYNTHETIC_PREFIX):
                self._synthetic_pending(upload_id)
                self.state.synthetic_done.add(upload_id)
            else:
                self._upload(bucket, key, upload_id)
                del self.state.uploads[upload_id]
        return 204, [], b""

    def list_uploads(self, bucket: str, query: dict[str, str]) -> Response:
        prefix = query.get("prefix", "")
        key_marker = query.get("key-marker", "")
        id_marker = query.get("upload-id-marker", "")
        limit = _max_items(query, "max-uploads")
        url = query.get("encoding-type") == "url"
        with self.state.lock:
            self.state.bucket(bucket)
            candidates = sorted(
                (u.key, u.upload_id, u.initiated)
                for u in self.state.uploads.values()
                if u.bucket == bucket and u.key.startswith(prefix)
            )
        if key_marker:
            candidates = [
                c
                for c in candidates
                if c[0] > key_marker or (id_marker and c[0] == key_marker and c[1] > id_marker)
            ]
        page, truncated = candidates[:limit], len(candidates) > limit

        def enc(text: str) -> str:
            return urllib.parse.quote(text) if url else _esc(text)

        parts = [
            f"<Bucket>{_esc(bucket)}</Bucket><KeyMarker>{enc(key_marker)}</KeyMarker>",
            f"<UploadIdMarker>{_esc(id_marker)}</UploadIdMarker><Prefix>{enc(prefix)}</Prefix>",
            f"<MaxUploads>{limit}</MaxUploads><IsTruncated>{str(truncated).lower()}</IsTruncated>",
        ]
        if url:
            parts.append("<EncodingType>url</EncodingType>")
        if truncated:
            parts.append(
                f"<NextKeyMarker>{enc(page[-1][0])}</NextKeyMarker>"
                f"<NextUploadIdMarker>{page[-1][1]}</NextUploadIdMarker>"
            )
        owner = "<ID>stub</ID><DisplayName>stub</DisplayName>"
        for key, upload_id, initiated in page:
            parts.append(
                f"<Upload><Key>{enc(key)}</Key><UploadId>{upload_id}</UploadId>"
                f"<Initiator>{owner}</Initiator><Owner>{owner}</Owner>"
                f"<StorageClass>STANDARD</StorageClass><Initiated>{_iso(initiated)}</Initiated>"
                "</Upload>"
            )
        return 200, [], _xml("ListMultipartUploadsResult", parts)

    def list_parts(self, bucket: str, key: str, query: dict[str, str]) -> Response:
        upload_id = query.get("uploadId", "")
        limit = _max_items(query, "max-parts")
        try:
            marker = int(query.get("part-number-marker", "0") or 0)
        except ValueError:
            raise S3Error(400, "InvalidArgument", "part-number-marker must be an integer") from None
        with self.state.lock:
            self.state.bucket(bucket)
            if upload_id.startswith(SYNTHETIC_PREFIX):
                self._synthetic_pending(upload_id)
                listed: list[tuple[int, int, str, float]] = []
            else:
                upload = self._upload(bucket, key, upload_id)
                listed = sorted(
                    (n, len(data), etag, when)
                    for n, (data, etag, when) in upload.parts.items()
                    if n > marker
                )
        page, truncated = listed[:limit], len(listed) > limit
        parts = [
            f"<Bucket>{_esc(bucket)}</Bucket><Key>{_esc(key)}</Key>",
            f"<UploadId>{_esc(upload_id)}</UploadId><PartNumberMarker>{marker}</PartNumberMarker>",
            f"<MaxParts>{limit}</MaxParts><IsTruncated>{str(truncated).lower()}</IsTruncated>",
            "<StorageClass>STANDARD</StorageClass>",
        ]
        if page:
            parts.append(f"<NextPartNumberMarker>{page[-1][0]}</NextPartNumberMarker>")
        for number, size, etag, when in page:
            parts.append(
                f"<Part><PartNumber>{number}</PartNumber><LastModified>{_iso(when)}</LastModified>"
                f"<ETag>{_esc(etag)}</ETag><Size>{size}</Size></Part>"
            )
        return 200, [], _xml("ListPartsResult", parts)


# --- HTTP ---------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection: requests parsed here (lower-cased header dict, no email parser)."""

    protocol_version = "HTTP/1.1"
    server: _StubServer
    headers: dict[str, str]  # type: ignore[assignment]

    def handle_one_request(self) -> None:
        rfile = self.rfile
        line = rfile.readline(65537)
        if not line:
            self.close_connection = True
            return
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self.close_connection = True
            return
        self.command, self.path, self.request_version = parts
        headers: dict[str, str] = {}
        while True:
            raw = rfile.readline(65537)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        self.headers = headers
        connection = headers.get("connection", "").lower()
        self.close_connection = connection == "close" or (
            self.request_version == "HTTP/1.0" and connection != "keep-alive"
        )
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self.command not in ("GET", "PUT", "POST", "DELETE", "HEAD"):
            self.close_connection = True
            self._respond(501, [], b"")
            return
        self._handle()

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # no line per request
        pass

    def _read_body(self) -> bytes:
        encoding = self.headers.get("transfer-encoding", "").lower()
        if "chunked" in encoding:
            body = self._read_chunked()
        else:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            if len(body) != length:
                raise ConnectionError("the client went away mid-body")
        if "aws-chunked" in self.headers.get("content-encoding", "").lower():
            body = _decode_aws_chunked(body)
        return body

    def _read_chunked(self) -> bytes:
        chunks = []
        while True:
            line = self.rfile.readline(65537)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline(65537)

    def _respond(
        self, status: int, headers: list[tuple[str, str]], body: bytes, head: bool = False
    ) -> None:
        lines = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}"]
        lines.append(f"Date: {self.server.date()}")
        lines.append("Server: magicfs-stub-s3")
        lines.append(f"x-amz-request-id: {self.server.request_id()}")
        has_length = False
        for name, value in headers:
            if name == "Content-Length":
                has_length = True
            lines.append(f"{name}: {value}")
        if not has_length:
            lines.append(f"Content-Length: {len(body)}")
        if body and not any(n == "Content-Type" for n, _ in headers):
            lines.append("Content-Type: application/xml")
        if self.close_connection:
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        self.wfile.write(data if head or not body else data + body)

    def _error(self, error: S3Error, request_id: str = "") -> Response:
        body = (
            _XML_HEAD
            + (
                f"<Error><Code>{error.code}</Code><Message>{_esc(error.message)}</Message>"
                f"<Resource>{_esc(error.resource)}</Resource><RequestId>{request_id}</RequestId>"
                "</Error>"
            ).encode()
        )
        headers = [("Content-Type", "application/xml")]
        if error.status == 416:
            headers.append(("Content-Range", "bytes */0"))
        return error.status, headers, body

    def _handle(self) -> None:
        method = self.command
        state = self.server.state
        try:
            body = self._read_body()
        except (ValueError, ConnectionError):
            self.close_connection = True
            self._respond(400, [], b"")
            return
        raw_path, _, raw_query = self.path.partition("?")
        if raw_path.startswith("/_stub/"):
            self._control(raw_path, raw_query)
            return
        query = dict(urllib.parse.parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {}
        operation, found_bucket, found_key = s3_operation(method, self.path, self.headers)
        bucket, key = found_bucket or "", found_key or ""
        if state.delay:
            time.sleep(state.delay)
        head = method == "HEAD"
        limiter = state.limiter
        if limiter is not None and method in _MUTATING and not limiter.take():
            error = S3Error(503, "SlowDown", "Please reduce your request rate.", "/" + bucket)
            status, headers, out = self._error(error)
        else:
            try:
                status, headers, out = self._dispatch(operation, method, bucket, key, query, body)
            except S3Error as error:
                status, headers, out = self._error(error)
            except Exception as error:  # a bug here: answer a complete 500, keep serving
                traceback.print_exc()
                status, headers, out = self._error(
                    S3Error(500, "InternalError", f"{type(error).__name__}: {error}")
                )
        state.stats.count(operation, status, key, state.logging)
        self._respond(status, headers, out, head)

    def _dispatch(
        self, operation: str, method: str, bucket: str, key: str, query: dict[str, str], body: bytes
    ) -> Response:
        ops = self.server.operations
        headers = self.headers
        if not bucket:
            raise S3Error(400, "NotImplemented", "ListBuckets is not supported by the stub")
        if operation == "CompleteMultipartUpload":
            return ops.complete_upload(bucket, key, query["uploadId"], headers, body)
        if operation == "PutObject":
            return ops.put_object(bucket, key, headers, body)
        if operation in ("GetObject", "HeadObject"):
            return ops.get_object(bucket, key, headers, method == "HEAD")
        if operation == "UploadPart":
            return ops.upload_part(bucket, key, query, body)
        if operation in ("CopyObject", "UploadPartCopy"):
            raise S3Error(501, "NotImplemented", f"the stub does not copy ({operation})")
        if operation == "CreateMultipartUpload":
            return ops.create_upload(bucket, key, headers)
        if operation == "AbortMultipartUpload":
            return ops.abort_upload(bucket, key, query["uploadId"])
        if operation == "DeleteObject":
            return ops.delete_object(bucket, key)
        if operation == "DeleteObjects":
            return ops.delete_objects(bucket, body)
        if operation in ("ListObjectsV2", "ListObjects"):
            return ops.list_objects(bucket, query, operation == "ListObjectsV2")
        if operation == "ListMultipartUploads":
            return ops.list_uploads(bucket, query)
        if operation == "ListParts":
            return ops.list_parts(bucket, key, query)
        if operation == "CreateBucket":
            return ops.create_bucket(bucket)
        if operation == "HeadBucket":
            return ops.head_bucket(bucket)
        if operation == "DeleteBucket":
            return ops.delete_bucket(bucket)
        if operation == "GetBucketLocation":
            return ops.bucket_location(bucket)
        raise S3Error(501, "NotImplemented", f"the stub does not answer {method} {self.path}")

    def _control(self, path: str, raw_query: str) -> None:
        state = self.server.state
        query = dict(urllib.parse.parse_qsl(raw_query))
        if path == "/_stub/stats" and self.command == "GET":
            body = json.dumps(state.stats_document()).encode()
            self._respond(200, [("Content-Type", "application/json")], body)
        elif path == "/_stub/log" and self.command == "GET":
            with state.stats.lock:
                log = [list(entry) for entry in state.stats.log]
            self._respond(200, [("Content-Type", "application/json")], json.dumps(log).encode())
        elif path == "/_stub/reset-stats" and self.command == "POST":
            with state.stats.lock:
                state.stats.reset()
            self._respond(204, [], b"")
        elif path == "/_stub/config" and self.command == "POST":
            state.configure(
                float(query["rate"]) if "rate" in query else None,
                float(query["latency_ms"]) if "latency_ms" in query else None,
                query["log"] == "1" if "log" in query else None,
            )
            self._respond(204, [], b"")
        else:
            self._respond(404, [], b"")


def _decode_aws_chunked(body: bytes) -> bytes:
    """The payload of an ``aws-chunked`` body (signed chunks and trailers dropped)."""
    out = []
    position = 0
    while True:
        end = body.index(b"\r\n", position)
        size = int(body[position:end].split(b";", 1)[0], 16)
        position = end + 2
        if size == 0:
            return b"".join(out)
        out.append(body[position : position + size])
        position += size + 2


class _StubServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, state: StubState) -> None:
        super().__init__((LOOPBACK, port), _Handler)
        self.state = state
        self.operations = _Operations(state)
        self._date_second = -1
        self._date = ""
        self._ids = 0

    def date(self) -> str:
        now = int(time.time())
        if now != self._date_second:
            self._date_second, self._date = now, _http_date(now)
        return self._date

    def request_id(self) -> str:
        self._ids += 1  # unique enough for logs; races only repeat an id
        return f"{self._ids:016X}"


def serve(port: int, rate: float, latency_ms: float, exit_with_parent: bool) -> None:
    """Serve in this process until SIGTERM/SIGINT (or, ``exit_with_parent``, its parent
    going away: :func:`magicfs.integrations.local_server.watch_parent`)."""
    server = _StubServer(port, StubState(rate, latency_ms))
    stopping = threading.Event()

    def stop(*_: Any) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if exit_with_parent:
        watch_parent(stop)
    announce_ready(READY, f"http://{LOOPBACK}:{server.server_address[1]}")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


# --- the helper ---------------------------------------------------------------------------


class StubS3Process(S3Endpoint):
    """The stub in a child process on a free 127.0.0.1 port. Use as a context manager.

    It stops when :meth:`stop` runs, when the block ends, and when this process goes
    away (the child watches its stdin: :mod:`magicfs.integrations.local_server`). Its
    ``storage_options`` name the region (the stub, unlike moto, takes any
    ``LocationConstraint``).
    """

    region_name = REGION

    def __init__(self, rate: float = 0.0, latency_ms: float = 0.0, startup_timeout: float = 30.0):
        self.rate = rate
        self.latency_ms = latency_ms
        self.startup_timeout = startup_timeout
        self._endpoint = ""
        self._child: ChildServer | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` once started (``""`` before)."""
        return self._endpoint

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    def start(self) -> StubS3Process:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--port",
            "0",
            "--rate",
            str(self.rate),
            "--latency-ms",
            str(self.latency_ms),
            "--exit-with-parent",
        ]
        self._child = ChildServer("stub S3", command, READY, startup_timeout=self.startup_timeout)
        self._endpoint = self._child.start()
        return self

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop()

    def __enter__(self) -> StubS3Process:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control ---------------------------------------------------------------------------

    def _request(self, method: str, path: str) -> bytes:
        request = urllib.request.Request(self.endpoint_url + path, method=method)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=60) as response:
            return response.read()

    def stats(self) -> dict[str, Any]:
        return json.loads(self._request("GET", "/_stub/stats"))

    def reset_stats(self) -> None:
        """Zero the counters and empty the request log."""
        self._request("POST", "/_stub/reset-stats")

    def request_log(self) -> list[tuple[str, str, int]]:
        """(operation, key, status) of each request since the last reset, while logging."""
        return [
            (op, key, status) for op, key, status in json.loads(self._request("GET", "/_stub/log"))
        ]

    def configure(
        self, rate: float | None = None, latency_ms: float | None = None, log: bool | None = None
    ) -> None:
        """Change the throttling rate, the latency, or whether requests are logged by key."""
        params: dict[str, Any] = {}
        if rate is not None:
            params["rate"] = rate
        if latency_ms is not None:
            params["latency_ms"] = latency_ms
        if log is not None:
            params["log"] = int(log)
        self._request("POST", "/_stub/config?" + urllib.parse.urlencode(params))


# --- how fast is it -----------------------------------------------------------------------


def _load_worker(endpoint: str, seconds: float, connections: int, kind: str) -> tuple[int, int]:
    """Plain keep-alive HTTP requests on ``connections`` threads for ``seconds``."""
    import http.client

    host, port = urllib.parse.urlsplit(endpoint).netloc.split(":")
    deadline = time.monotonic() + seconds
    done = [0] * connections
    failed = [0] * connections
    worker_tag = os.urandom(4).hex()

    def run(slot: int) -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        n = 0
        while time.monotonic() < deadline:
            n += 1
            if kind == "complete":
                upload = f"{SYNTHETIC_PREFIX}{worker_tag}-{slot}-{n}"
                body = (
                    b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>"
                    b'<ETag>"0"</ETag></Part></CompleteMultipartUpload>'
                )
                path = f"/load/k/{worker_tag}/{slot}/{n}?uploadId={upload}"
                headers = {"x-amz-mp-object-size": "100"}
                connection.request("POST", path, body=body, headers=headers)
            else:
                connection.request("HEAD", "/load/missing")
            response = connection.getresponse()
            response.read()
            if response.status >= 300 and kind == "complete":
                failed[slot] += 1
            done[slot] += 1
        connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done), sum(failed)


def measure(seconds: float = 5.0, connections: int = 8, clients: int = 2) -> None:
    """Print how many requests per second the stub answers (plain HTTP clients)."""
    import concurrent.futures

    with StubS3Process() as stub:
        client = stub.boto3_client()
        client.create_bucket(Bucket="load")
        print(
            f"stub S3: {clients} client processes x {connections} keep-alive connections, "
            f"{seconds:g} s per kind (os.cpu_count() = {os.cpu_count()})"
        )
        for kind in ("head", "complete"):
            stub.reset_stats()
            before = stub.stats()["cpu_seconds"]
            start = time.monotonic()
            with concurrent.futures.ProcessPoolExecutor(clients) as pool:
                results = list(
                    pool.map(
                        _load_worker,
                        [stub.endpoint_url] * clients,
                        [seconds] * clients,
                        [connections] * clients,
                        [kind] * clients,
                    )
                )
            wall = time.monotonic() - start
            stats = stub.stats()
            total = sum(r[0] for r in results)
            failed = sum(r[1] for r in results)
            cpu = stats["cpu_seconds"] - before
            label = "HeadObject (404)" if kind == "head" else "CompleteMultipartUpload (synthetic)"
            print(
                f"  {label}: {total / wall:,.0f} requests/s, {cpu / max(total, 1) * 1e6:,.0f} "
                f"us of stub CPU per request, {failed} failed"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--rate", type=float, default=0.0, help="mutating requests/s (0: no limit)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="sleep in every request")
    parser.add_argument(
        "--exit-with-parent", action="store_true", help="also stop when stdin closes"
    )
    parser.add_argument(
        "--measure", action="store_true", help="start a stub, measure its requests/s, stop"
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="--measure: per kind")
    args = parser.parse_args(argv)
    if args.measure:
        measure(args.seconds)
        return
    serve(args.port, args.rate, args.latency_ms, args.exit_with_parent)


if __name__ == "__main__":
    main()
