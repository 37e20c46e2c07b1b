"""The three S3 servers ``job_cost.py`` runs the same job against, behind one small seam.

* ``moto``: :class:`magicfs.integrations.embedded_s3.EmbeddedS3Server`, moto in its own
  process, with latency and copy bandwidth added: about 6 ms of server CPU per request,
  a costly server on a small machine.
* ``stub``: ``benchmarks/stub_s3.py``, which holds real bytes through real multipart
  uploads for a small fraction of moto's CPU: what remains is the client's cost
  (magicfs's and botocore's) and the latency. It does not copy, so variants that copy
  are skipped on it. It logs (operation, key) of every request on request: the
  ``--phases`` tables are then counted on the server's side.
* ``rgw``: Ceph RGW (``tests/helpers/rgw.py``, about 15 s to start) behind the fault
  front (``tests/helpers/fault_front.py``), which adds the latency and counts requests by
  operation on the way in. Optional: without Ceph, a clear message and the run goes on
  without it.

Every target answers the same questions: ``storage_options`` and ``boto3_client()`` (from
:class:`~magicfs.integrations.local_server.S3Endpoint`), ``cpu_seconds()`` of the server
(``None`` when unknown), ``server_counts()`` (requests by operation since ``reset_counts()``,
``None`` when the server cannot tell) and ``request_log()`` ((operation, key) pairs, or
``None``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for folder in (ROOT, HERE):
    if folder not in sys.path:
        sys.path.insert(0, folder)

from stub_s3 import StubS3Process  # noqa: E402

from magicfs.integrations.embedded_s3 import EmbeddedS3Server  # noqa: E402
from magicfs.integrations.local_server import (  # noqa: E402
    S3Endpoint,
    s3_boto3_client,
    s3_storage_options,
)

SERVERS = ("moto", "stub", "rgw")
#: What each server cannot run: the stub has no server-side copy.
UNSUPPORTED = {"stub": frozenset({"put-then-copy-floor", "file-v1"})}


class RequestCounter:
    """S3 operations sent by the clients it is attached to, counted by botocore hooks
    (every server: what the client sends, whatever the server counts)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def attach(self, fs: Any) -> None:
        """Count the requests of an s3fs filesystem's client."""
        fs.s3.meta.events.register("before-call.s3", self._record)

    def _record(self, model: Any, **kwargs: Any) -> None:
        self.counts[model.name] += 1

    def take(self) -> int:
        """How many since the last take; starts again from zero."""
        total, self.counts = sum(self.counts.values()), Counter()
        return total


class Target:
    """One running server as the benchmark sees it."""

    name = ""
    endpoint: S3Endpoint
    describe = ""

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.endpoint.storage_options

    def boto3_client(self) -> Any:
        return self.endpoint.boto3_client()

    def cpu_seconds(self) -> float | None:
        return None

    def warm_up(self) -> None:
        """One PUT and one multipart upload in a scratch bucket, before anything is timed.

        A fresh RGW creates its data pools on the first write and the first multipart
        upload (about 2 s each): without this, the first variant measured pays it."""
        client = self.boto3_client()
        bucket = "bench-warm-up"
        client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key="put", Body=b"x")
        upload = client.create_multipart_upload(Bucket=bucket, Key="multipart")["UploadId"]
        etag = client.upload_part(
            Bucket=bucket, Key="multipart", UploadId=upload, PartNumber=1, Body=b"x"
        )["ETag"]
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="multipart",
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
        )
        client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": "put"}, {"Key": "multipart"}]}
        )
        client.delete_bucket(Bucket=bucket)

    def reset_counts(self) -> None:
        """Zero the server-side counters (and log) before a run."""

    def free_deleted(self) -> None:
        """Give back the memory of deleted objects (after a run has emptied its bucket)."""

    def server_counts(self) -> Counter[str] | None:
        return None

    def log_requests(self, on: bool) -> None:
        """Log (operation, key) of each request from now on (where the server can)."""

    def request_log(self) -> list[tuple[str, str]] | None:
        return None


class MotoTarget(Target):
    name = "moto"

    def __init__(self, server: EmbeddedS3Server) -> None:
        self.endpoint = self.server = server
        self.describe = (
            f"moto on 127.0.0.1 (own process), {server.latency_ms:g} ms per request, "
            f"server-side copies at {server.copy_mb_per_s:g} MB/s"
        )

    def cpu_seconds(self) -> float | None:
        return self.server.cpu_seconds()


class StubTarget(Target):
    name = "stub"

    def __init__(self, stub: StubS3Process) -> None:
        self.endpoint = self.stub = stub
        self.describe = f"stub S3 (real bytes, no copies), {stub.latency_ms:g} ms per request"

    def cpu_seconds(self) -> float | None:
        return float(self.stub.stats()["cpu_seconds"])

    def reset_counts(self) -> None:
        self.stub.reset_stats()

    def server_counts(self) -> Counter[str]:
        requests = self.stub.stats()["requests"]
        return Counter({op: sum(by_status.values()) for op, by_status in requests.items()})

    def log_requests(self, on: bool) -> None:
        self.stub.configure(log=on)

    def request_log(self) -> list[tuple[str, str]]:
        return [(op, key) for op, key, _ in self.stub.request_log()]


class RgwTarget(Target):
    """RGW behind the fault front: the front adds the latency and counts by operation."""

    name = "rgw"

    def __init__(self, rgw: Any, front: Any) -> None:
        self.rgw, self.front = rgw, front
        self.endpoint = front
        self.describe = f"Ceph RGW (memstore) behind a latency front, {front.latency_ms:g} ms"

    @property
    def storage_options(self) -> dict[str, Any]:
        return s3_storage_options(
            self.front.endpoint_url, self.rgw.credentials, self.rgw.region_name
        )

    def boto3_client(self) -> Any:
        return s3_boto3_client(self.front.endpoint_url, self.rgw.credentials, self.rgw.region_name)

    def cpu_seconds(self) -> float | None:
        return ceph_cpu_seconds()

    def reset_counts(self) -> None:
        self.front.reset_stats()

    def free_deleted(self) -> None:
        self.rgw.collect_garbage()  # else the 4 GiB memstore fills up and RGW stalls

    def server_counts(self) -> Counter[str]:
        return Counter({op: entry["requests"] for op, entry in self.front.stats().items()})


CEPH_DAEMONS = frozenset({"radosgw", "ceph-osd", "ceph-mon"})


def ceph_cpu_seconds() -> float | None:
    """CPU seconds of the Ceph daemons this process started (from ``/proc``; ``None``
    where there is none): RGW's cost is spread over radosgw, the OSD and the monitor."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    ticks: dict[int, int] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry)
        parents[pid], names[pid] = int(fields[1]), name
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    daemons = [pid for pid, name in names.items() if name in CEPH_DAEMONS and ours(pid)]
    if not daemons:
        return None
    return sum(ticks[pid] for pid in daemons) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def started(name: str, latency_ms: float, copy_mb_per_s: float) -> Iterator[Target | None]:
    """The server ``name``, running; ``None`` (with a message) when RGW is not installed."""
    if name == "moto":
        with EmbeddedS3Server(latency_ms=latency_ms, copy_mb_per_s=copy_mb_per_s) as server:
            yield MotoTarget(server)
    elif name == "stub":
        with StubS3Process(latency_ms=latency_ms) as stub:
            yield StubTarget(stub)
    elif name == "rgw":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from helpers.fault_front import FaultFront
        from helpers.rgw import RgwServer, missing_programs

        missing = missing_programs()
        if missing:
            print(
                f"rgw: skipped, Ceph is not installed ({', '.join(missing)} not found; "
                "see tests/install_servers.sh)",
                file=sys.stderr,
            )
            yield None
            return
        with (
            tempfile.TemporaryDirectory(prefix="magicfs-bench-rgw-") as workdir,
            RgwServer(pathlib.Path(workdir), tls=False) as rgw,
            FaultFront(rgw.endpoint_url, latency_ms=latency_ms, credentials=rgw.credentials) as fr,
        ):
            yield RgwTarget(rgw, fr)
    else:
        raise SystemExit(f"--servers: unknown server {name!r}; choose from {', '.join(SERVERS)}")
