"""Where the client's CPU goes, per S3 request type: magicfs against a bare boto3 client.

    python benchmarks/cpu_profile.py                  # the stub S3, 300 requests per type
    python benchmarks/cpu_profile.py --requests 100 --servers moto

The requests a magic job sends, one type at a time, each sent ``--requests`` times one
after another (8 MiB parts: a tenth as many), on the same server in the same run:

* ``magicfs``: through :class:`magicfs.stores.s3.store.S3Store`, as the committers and
  the writer send them (the retry policy and rate control of ``acall``, the small
  requests' direct way of :mod:`magicfs.stores.s3.direct`, aiobotocore on s3fs's IO
  loop), each awaited from a blocking caller as a task's thread does;
* ``magicfs, client's way`` (the request types the direct way serves): the same through a
  store whose client has a handler of the benchmark's on ``request-created``, which
  sends every request the client's way (s3fs's ``_call_s3``), as before that way existed;
* ``boto3``: the same request through a bare boto3 client in the calling thread;
* ``signed, no client`` (``PutObject``, ``HeadObject``, ``GetObject`` only): the same
  request signed with botocore's SigV4 signer and sent with urllib3 in the calling
  thread, no client at all (:class:`SignedRequests`): the floor a cheaper request path
  could approach, not something magicfs sends. Its CPU is all in ``total``.

Bodies and checksums as a job sends them: a ``PutObject`` of a ``.pending`` record (its
JSON, with a CRC32 header), an ``UploadPart`` of 8 MiB with its CRC32 computed by the
caller (magicfs: as the writer sends it, a :class:`~magicfs.stores.s3.body.PartBody` of
eight 1 MiB pieces, sent as they were written: no join, no copy), a
``CompleteMultipartUpload`` of one part with its checksum, ``HeadObject``,
``ListObjectsV2`` of 10 keys, ``GetObject`` of a record read whole. One more row sends
the part as the writer did before it sent views of its pieces: joined into one ``bytes``.

Each request's CPU is split at botocore's events, timed with the CPU clock of the thread
botocore runs on (``time.thread_time``: s3fs's IO loop for magicfs, the caller for boto3):

* ``serialise``: ``before-parameter-build`` to ``before-call`` (parameters checked,
  endpoint resolved, the request built);
* ``sign``: ``before-call`` to ``before-send`` (the request's checksum, SigV4 with the
  payload's SHA-256 over plain HTTP as here: 8 MiB for a part; the client's way also
  its retry bookkeeping and ``request-created``'s handlers);
* ``HTTP``: ``before-send`` to ``before-parse`` (the request written to the socket, the
  reply read);
* ``parse``: ``before-parse`` to ``after-call``;
* ``other``: the rest of the request's CPU in the whole process (every thread, from
  ``time.process_time`` over the run): for magicfs its own bookkeeping (``acall``, the
  rate control, s3fs's wrapper, the hand-off to the IO loop and back, the CRC32 of a
  record), for boto3 botocore's and boto3's own.

Two more rows: ``records (JSON)``, the CPU to write and read back a ``.pending`` record
(``SinglePendingCommit.to_bytes`` and ``from_json``); and ``client set-up``, the CPU of
a new filesystem and its client up to its first request answered, as each job (and each
task process) pays once: magicfs's ``committer_for`` (s3fs, aiobotocore) against
``boto3.session.Session().client("s3")``. Figures are microseconds of CPU per request,
the median of ``--runs`` runs; the server runs in its own process.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

MiB = 1 << 20
STAGES = ("serialise", "sign", "HTTP", "parse")
BUCKET = "cpu-profile"
#: The row of :class:`SignedRequests`.
SIGNED = "signed, no client"
#: The row of magicfs sent the client's way (:func:`client_way`).
CLIENT_WAY = "magicfs, client's way"
#: The request types magicfs's direct way serves (the others: the same in both rows).
SMALL = (
    "PutObject (record)",
    "CompleteMultipartUpload",
    "HeadObject",
    "ListObjectsV2 (10 keys)",
    "GetObject (record)",
)


def client_way(**_: Any) -> None:
    """A ``request-created`` handler of nobody's: its client's requests all go the
    client's way (:mod:`magicfs.stores.s3.direct`)."""


class StageClock:
    """Per-thread CPU between botocore's events of each request, summed by stage."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(STAGES, 0.0)
        self._local = threading.local()

    def attach(self, client: Any) -> None:
        events = client.meta.events
        events.register("before-parameter-build.s3", self._mark("start"))
        # Events both of magicfs's ways emit (a handler on another would send every
        # request the client's way: magicfs.stores.s3.direct).
        events.register("before-call.s3", self._lap("start", "serialise", "called"))
        events.register("before-send.s3", self._lap("called", "sign", "sent"))
        events.register("before-parse.s3", self._lap("sent", "HTTP", "parsing"))
        events.register("after-call.s3", self._lap("parsing", "parse", "done"))

    def _mark(self, name: str) -> Callable[..., None]:
        def mark(**_: Any) -> None:
            setattr(self._local, name, time.thread_time())

        return mark

    def _lap(self, since: str, stage: str, name: str) -> Callable[..., None]:
        def lap(**_: Any) -> None:
            now = time.thread_time()
            started = getattr(self._local, since, None)
            if started is not None:
                self.spent[stage] += now - started
                setattr(self._local, since, None)
            setattr(self._local, name, now)

        return lap

    def reset(self) -> None:
        self.spent = dict.fromkeys(STAGES, 0.0)


def _record() -> Any:
    from magicfs.records import SinglePendingCommit, path_to_uri
    from magicfs.stores.s3 import checksums

    sums = [checksums.compute("CRC32", b"x" * n) for n in range(1, 4)]
    return SinglePendingCommit(
        uri=path_to_uri(f"s3://{BUCKET}/out/__magic_job-1/a/__base/part-00000.parquet"),
        upload_id="2~" + "u" * 62,
        bucket=BUCKET,
        destination_key="out/year=2024/part-00000.parquet",
        etags=[f'"{n:032x}"' for n in range(3)],
        length=24 << 20,
        extra_data=checksums.record_fields("CRC32", sums),
    )


class Requests:
    """The request types, through magicfs's store (``m_*``) and a bare client (``b_*``)."""

    def __init__(self, store: Any, client: Any) -> None:
        from magicfs.stores.s3 import checksums

        self.store, self.client = store, client
        self.record = _record().to_bytes()
        self.record_crc = checksums.compute("CRC32", self.record)
        self.pieces = [os.urandom(MiB) for _ in range(8)]
        self.part = b"".join(self.pieces)
        self.upload = client.create_multipart_upload(
            Bucket=BUCKET, Key="out/part.bin", ChecksumAlgorithm="CRC32"
        )["UploadId"]
        for n in range(10):
            client.put_object(Bucket=BUCKET, Key=f"out/list/{n}", Body=self.record)
        client.put_object(Bucket=BUCKET, Key="out/record.pending", Body=self.record)

    def types(self) -> dict[str, tuple[Callable[[], Any], Callable[[], Any], int]]:
        """name -> (magicfs call, boto3 call, share of --requests: 8 MiB parts, fewer)."""
        return {
            "PutObject (record)": (self.m_put, self.b_put, 1),
            "UploadPart (8 MiB)": (self.m_part, self.b_part, 10),
            "UploadPart (8 MiB), as before: joined bytes": (self.m_part_joined, self.b_part, 10),
            "CompleteMultipartUpload": (self.m_complete, self.b_complete, 1),
            "HeadObject": (self.m_head, self.b_head, 1),
            "ListObjectsV2 (10 keys)": (self.m_list, self.b_list, 1),
            "GetObject (record)": (self.m_get, self.b_get, 1),
        }

    def m_put(self) -> Any:
        return self.store.run(self.store.aput_object(BUCKET, "out/r.pending", self.record))

    def b_put(self) -> Any:
        return self.client.put_object(
            Bucket=BUCKET, Key="out/r.pending", Body=self.record, ChecksumCRC32=self.record_crc
        )

    def m_part(self) -> Any:
        """As the writer sends a part: its pieces as they were written (no join), its
        CRC32 computed first, on a thread of its own (here the caller's)."""
        from magicfs.stores.s3.body import PartBody

        body = PartBody(self.pieces)
        crc = ("CRC32", _crc(body))
        return self.store.run(
            self.store.aupload_part(BUCKET, "out/part.bin", self.upload, 1, body, crc)
        )

    def m_part_joined(self) -> Any:
        """As the writer sent a part before :mod:`magicfs.stores.s3.body`: its pieces
        joined into one ``bytes`` (in the writing thread), which botocore wraps in a
        ``BytesIO`` and hashes on the IO loop, and aiohttp copies again to send."""
        body = b"".join(self.pieces)
        crc = ("CRC32", _crc(body))
        return self.store.run(
            self.store.aupload_part(BUCKET, "out/part.bin", self.upload, 1, body, crc)
        )

    def b_part(self) -> Any:
        return self.client.upload_part(
            Bucket=BUCKET,
            Key="out/part.bin",
            UploadId=self.upload,
            PartNumber=1,
            Body=self.part,
            ChecksumCRC32=_crc(self.part),
        )

    def _fresh_upload(self) -> tuple[str, str]:
        upload = self.client.create_multipart_upload(
            Bucket=BUCKET, Key="out/done.bin", ChecksumAlgorithm="CRC32"
        )["UploadId"]
        etag = self.client.upload_part(
            Bucket=BUCKET,
            Key="out/done.bin",
            UploadId=upload,
            PartNumber=1,
            Body=b"x",
            ChecksumCRC32=_crc(b"x"),
        )["ETag"]
        return upload, etag

    def m_complete(self, prepared: tuple[str, str]) -> Any:
        upload, etag = prepared
        sums = ("CRC32", [_crc(b"x")])
        return self.store.run(
            self.store.acomplete_upload(
                BUCKET, "out/done.bin", upload, [etag], length=1, part_checksums=sums
            )
        )

    def b_complete(self, prepared: tuple[str, str]) -> Any:
        upload, etag = prepared
        part = {"PartNumber": 1, "ETag": etag, "ChecksumCRC32": _crc(b"x")}
        return self.client.complete_multipart_upload(
            Bucket=BUCKET,
            Key="out/done.bin",
            UploadId=upload,
            MultipartUpload={"Parts": [part]},
            MpuObjectSize=1,
        )

    def m_head(self) -> Any:
        return self.store.run(self.store.ahead_object(BUCKET, "out/record.pending"))

    def b_head(self) -> Any:
        return self.client.head_object(Bucket=BUCKET, Key="out/record.pending")

    def m_list(self) -> Any:
        from magicfs.stores.s3.store import iterate

        return list(iterate(self.store, self.store.alist_keys(BUCKET, "out/list/")))

    def b_list(self) -> Any:
        return self.client.list_objects_v2(Bucket=BUCKET, Prefix="out/list/")["Contents"]

    def m_get(self) -> Any:
        return self.store.run(self.store.aread(BUCKET, "out/record.pending", 1 << 20))

    def b_get(self) -> Any:
        reply = self.client.get_object(Bucket=BUCKET, Key="out/record.pending")
        return reply["Body"].read()


class SignedRequests:
    """The floor of a small request: signed with botocore's SigV4 signer and sent with
    urllib3 (botocore's own HTTP library) in the calling thread, with no client: no
    parameter checks, endpoint rules, event hooks, user agent, retries or XML parsing.
    Not something magicfs sends: what a request path for the small requests cheaper than
    a botocore client's could at best approach (path-style addressing, fixed credentials
    and region, a reply's status checked and its body read)."""

    def __init__(self, target: Any, record: bytes) -> None:
        import urllib3
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        # Bound here so that the timed requests pay no import statement.
        self.auth, self.request = S3SigV4Auth, AWSRequest
        options = target.storage_options
        self.endpoint = options["client_kwargs"]["endpoint_url"].rstrip("/")
        self.credentials = Credentials(options["key"], options["secret"])
        self.pool = urllib3.PoolManager()
        self.record = record
        self.record_crc = _crc(record)

    def _send(self, method: str, key: str, body: bytes = b"", **headers: str) -> bytes:
        url = f"{self.endpoint}/{BUCKET}/{key}"
        headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        request = self.request(method=method, url=url, data=body, headers=headers)
        # A signer per request, as botocore makes one.
        self.auth(self.credentials, "s3", "us-east-1").add_auth(request)
        reply = self.pool.request(
            method, url, body=body or None, headers=dict(request.headers.items())
        )
        if reply.status != 200:
            raise RuntimeError(f"{method} {url}: HTTP {reply.status}: {reply.data[:200]!r}")
        return bytes(reply.data)

    def types(self) -> dict[str, Callable[[], Any]]:
        return {
            "PutObject (record)": self.put,
            "HeadObject": self.head,
            "GetObject (record)": self.get,
        }

    def put(self) -> Any:
        return self._send(
            "PUT", "out/r.pending", self.record, **{"x-amz-checksum-crc32": self.record_crc}
        )

    def head(self) -> Any:
        return self._send("HEAD", "out/record.pending")

    def get(self) -> Any:
        return self._send("GET", "out/record.pending")


def _crc(data: Any) -> str:
    from magicfs.stores.s3 import checksums

    return checksums.compute("CRC32", data)


def measure(call: Callable[..., Any], count: int, clock: StageClock, prepare: Any = None) -> dict:
    """CPU per request (µs): the whole process, and botocore's stages on its thread."""
    prepared = [prepare() for _ in range(count)] if prepare else [None] * count
    clock.reset()
    start = time.process_time()
    for argument in prepared:
        call(argument) if prepare else call()
    total = time.process_time() - start
    per = {stage: clock.spent[stage] / count * 1e6 for stage in STAGES}
    per["total"] = total / count * 1e6
    per["other"] = per["total"] - sum(per[s] for s in STAGES)
    return per


def profile_types(target: Any, count: int, runs: int) -> dict[str, dict[str, dict]]:
    import magicfs

    options = {**target.storage_options, "skip_instance_cache": True}
    committer = magicfs.committer_for(f"s3://{BUCKET}/out", storage_options=options)
    store = committer.flow.store_hooks.store
    client = target.boto3_client()
    client.create_bucket(Bucket=BUCKET)
    requests = Requests(store, client)
    store.run(store.ahead_object(BUCKET, "out/record.pending"))  # the client exists now
    other = magicfs.committer_for(f"s3://{BUCKET}/out", storage_options=options)
    other_store = other.flow.store_hooks.store
    other_store.run(other_store.ahead_object(BUCKET, "out/record.pending"))
    other_store.fs.s3.meta.events.register("request-created.s3", client_way)
    by_client = Requests(other_store, client).types()
    m_clock, c_clock, b_clock = StageClock(), StageClock(), StageClock()
    m_clock.attach(store.fs.s3)
    c_clock.attach(other_store.fs.s3)
    b_clock.attach(client)
    signed = SignedRequests(target, requests.record).types()
    results: dict[str, dict[str, list[dict]]] = {}
    for name, (m_call, b_call, share) in requests.types().items():
        n = max(3, count // share)
        prepare = requests._fresh_upload if "Complete" in name else None
        clients = [("magicfs", m_call, m_clock), ("boto3", b_call, b_clock)]
        if name in SMALL:
            clients.insert(1, (CLIENT_WAY, by_client[name][0], c_clock))
        if name in signed:
            clients.append((SIGNED, signed[name], StageClock()))  # no events: all "other"
        for _ in range(runs):
            for writer, call, clock in clients:
                row = measure(call, n, clock, prepare)
                results.setdefault(name, {}).setdefault(writer, []).append(row)
    return {
        name: {writer: _median_row(rows) for writer, rows in by_writer.items()}
        for name, by_writer in results.items()
    }


def _median_row(rows: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def records_cpu(count: int) -> float:
    """µs of CPU to write a ``.pending`` record's JSON and read it back."""
    from magicfs.records import SinglePendingCommit

    record = _record()
    start = time.process_time()
    for _ in range(count):
        SinglePendingCommit.from_json(record.to_bytes())
    return (time.process_time() - start) / count * 1e6


def setup_cpu(target: Any, count: int) -> tuple[float, float]:
    """µs of CPU for a new client up to its first answer: magicfs's, a bare boto3 one."""
    import boto3

    import magicfs

    options = {**target.storage_options, "skip_instance_cache": True}
    endpoint = target.storage_options["client_kwargs"]["endpoint_url"]
    key, secret = target.storage_options["key"], target.storage_options["secret"]
    m, b = [], []
    for _ in range(count):
        start = time.process_time()
        committer = magicfs.committer_for(f"s3://{BUCKET}/out", storage_options=options)
        committer.flow.store_hooks.store.run(
            committer.flow.store_hooks.store.ahead_object(BUCKET, "out/record.pending")
        )
        m.append(time.process_time() - start)
        start = time.process_time()
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        )
        client.head_object(Bucket=BUCKET, Key="out/record.pending")
        b.append(time.process_time() - start)
    return statistics.median(m) * 1e6, statistics.median(b) * 1e6


@contextlib.contextmanager
def server(name: str) -> Iterator[Any]:
    from bench_servers import started

    with started(name, 0.0, 0.0) as target:
        if target is None:
            raise SystemExit(f"{name}: not available")
        yield target


def print_table(results: dict[str, dict[str, dict]], records: float, setup: tuple) -> None:
    columns = [*STAGES, "other", "total"]
    print("| request | client | " + " | ".join(columns) + " | x boto3 |")
    print("|---|---|" + "---:|" * (len(columns) + 1))
    for name, by_writer in results.items():
        boto3_total = by_writer["boto3"]["total"]
        for writer in ("magicfs", CLIENT_WAY, "boto3", SIGNED):
            row = by_writer.get(writer)
            if row is None:
                continue
            shown = columns if writer != SIGNED else ["total"]  # no stages without a client
            cells = " | ".join(f"{row[c]:,.0f}" if c in shown else "-" for c in columns)
            print(f"| {name} | {writer} | {cells} | {row['total'] / boto3_total:.2f} |")
    print(f"| records (JSON): write and read a .pending | magicfs | {records:,.0f} µs |")
    m_setup, b_setup = setup
    print(
        f"| client set-up (new client, first answer) | magicfs {m_setup:,.0f} µs "
        f"| boto3 {b_setup:,.0f} µs | x boto3 {m_setup / b_setup:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--servers", default="stub", help="stub, moto or rgw (comma-separated)")
    parser.add_argument("--requests", type=int, default=300, help="requests per type and run")
    parser.add_argument("--runs", type=int, default=5, help="runs per type (median)")
    args = parser.parse_args()
    for name in args.servers.split(","):
        with server(name) as target:
            results = profile_types(target, args.requests, args.runs)
            records = records_cpu(2000)
            setup = setup_cpu(target, 5)
        print(f"\n### {name}: µs of client CPU per request, median of {args.runs} runs\n")
        print_table(results, records, setup)


if __name__ == "__main__":
    main()
