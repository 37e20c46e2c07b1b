"""Ceph's RADOS Gateway (RGW), a production S3 implementation, as a test server on 127.0.0.1.

:class:`RgwServer` brings up the smallest Ceph cluster RGW runs on (one monitor, one
OSD keeping its objects in memory (``memstore``), pools of size 1, no cephx) and one
``radosgw`` serving S3 over HTTP and, optionally, HTTPS with a self-signed certificate
made at start. Everything lives under one temporary directory (configuration, keyring,
monmap, mon/osd/rgw data, run dir, admin sockets, logs): nothing touches /var/lib/ceph
or /etc/ceph, and every port is a free loopback port picked at start (the monitor's v2
and v1 addresses are written into the monmap). Startup takes about 12 s.

Each daemon runs in the foreground under the watchdog of ``servers.py``, which stops it
by its PID when the server is stopped or the test session ends or dies (even SIGKILLed).

The facts behind the configuration (the packages, the one trap: msgr2's secure-only
default with auth ``none`` makes radosgw hang for 300 s, hence ``crc secure``) are in
the project's environment notes (reference/environment.md, section 6).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import pathlib
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from magicfs.integrations.local_server import (
    LOOPBACK,
    S3Endpoint,
    ServerStartError,
    free_port,
    s3_storage_options,
    stop_supervised,
    supervise,
)

#: The Debian packages RGW needs (Debian 12 ships Ceph 16.2, "pacific").
RGW_PACKAGES = ("radosgw", "ceph-mon", "ceph-osd", "ceph-common")
#: How to install them (tests/install_servers.sh does it, with sudo where needed).
RGW_INSTALL = "sudo apt-get install -y --no-install-recommends " + " ".join(RGW_PACKAGES)
#: The programs the cluster is made with.
RGW_PROGRAMS = (
    "ceph-authtool",
    "monmaptool",
    "ceph-mon",
    "ceph-osd",
    "ceph",
    "radosgw",
    "radosgw-admin",
)

#: The S3 user's fixed test keys (a throwaway cluster on loopback: not secrets).
RGW_ACCESS_KEY = "magicfs-test-access"
RGW_SECRET_KEY = "magicfs-test-secret"
RGW_REGION = "us-east-1"
#: botocore's default checksums (aws-chunked bodies with a trailing CRC32) are refused by
#: RGW 16.2 over TLS (``MissingContentLength``); these settings make botocore send plain
#: bodies with Content-MD5 where required, as before botocore 1.36.
RGW_TLS_CONFIG = {
    "request_checksum_calculation": "when_required",
    "response_checksum_validation": "when_required",
}


def missing_programs() -> list[str]:
    """The Ceph programs RGW needs that are not on ``PATH`` (empty: installed)."""
    return [program for program in RGW_PROGRAMS if shutil.which(program) is None]


class RgwServer(S3Endpoint):
    """A single-node Ceph cluster with RGW on free loopback ports, under ``workdir``.

    ``with RgwServer(workdir) as rgw:`` (or ``start()`` then ``stop()``) gives
    ``rgw.endpoint_url``, ``rgw.storage_options`` (s3fs) and ``rgw.boto3_client()``;
    with ``tls=True`` also ``tls_endpoint_url``, ``tls_storage_options``, ``ca_file``.
    """

    startup_timeout = 90.0
    #: RGW's memstore OSD keeps every object in memory, up to this many bytes.
    memstore_bytes = 4 * 1024**3

    #: ``storage_options`` and ``boto3_client()`` (over HTTP) use these (S3Endpoint).
    credentials = (RGW_ACCESS_KEY, RGW_SECRET_KEY)
    region_name = RGW_REGION

    def __init__(self, workdir: pathlib.Path, tls: bool = True, tcp_nodelay: bool = True) -> None:
        self.workdir = workdir
        self.tls = tls
        #: False: beast's default (``benchmarks/rgw_nodelay.py`` measures the difference).
        self.tcp_nodelay = tcp_nodelay
        self.fsid = str(uuid.uuid4())
        self._root = workdir
        self.mon_ports: tuple[int, int] | None = None
        self.port: int | None = None
        self.tls_port: int | None = None
        self._watchdogs: list[tuple[str, subprocess.Popen[bytes]]] = []

    # --- addresses and clients ---------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("RGW not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def tls_endpoint_url(self) -> str:
        if self.tls_port is None:
            raise RuntimeError("RGW not started with tls=True")
        return f"https://{LOOPBACK}:{self.tls_port}"

    @property
    def ca_file(self) -> str:
        """The self-signed certificate clients verify the HTTPS endpoint with."""
        return str(self.workdir / "rgw-cert.pem")

    @property
    def _key_file(self) -> pathlib.Path:
        return self.workdir / "rgw-key.pem"

    @property
    def tls_storage_options(self) -> dict[str, Any]:
        """Options for ``s3fs.S3FileSystem`` over HTTPS, as a user must set them for RGW
        16.2 with a private certificate: ``verify`` names the CA file, and botocore's
        default checksums are off (:data:`RGW_TLS_CONFIG`)."""
        options = s3_storage_options(self.tls_endpoint_url, self.credentials, self.region_name)
        options["client_kwargs"]["verify"] = self.ca_file
        options["config_kwargs"] = dict(RGW_TLS_CONFIG)
        return options

    # --- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> RgwServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> RgwServer:
        """Bring the cluster up; retried once should another process take a port meanwhile."""
        missing = missing_programs()
        if missing:
            raise ServerStartError(
                f"Ceph RGW is not installed ({', '.join(missing)} not found); "
                f"install with: {RGW_INSTALL}"
            )
        for attempt in range(2):
            try:
                return self._start_once()
            except ServerStartError as error:
                self.stop()
                if attempt == 1 or "Address already in use" not in str(error):
                    raise
        raise AssertionError("unreachable")

    def create_user(self, uid: str, access_key: str, secret_key: str) -> dict[str, Any]:
        """Another S3 user of the cluster (no buckets, no rights to others' until a bucket
        policy grants some); returns s3fs options that act as it over HTTP."""
        self._run("radosgw-admin", "user", "create", f"--uid={uid}", f"--display-name={uid}",
                  f"--access-key={access_key}", f"--secret-key={secret_key}")  # fmt: skip
        return s3_storage_options(self.endpoint_url, (access_key, secret_key), self.region_name)

    def collect_garbage(self) -> None:
        """Free deleted objects' data now: RGW's garbage collection waits hours by default,
        and the memstore OSD (:attr:`memstore_bytes`) fills up and stalls a benchmark
        that writes and deletes more than that."""
        self._run("radosgw-admin", "gc", "process", "--include-all", timeout=120)

    def stop(self) -> None:
        """Stop the daemons by their PIDs: radosgw, the OSD, then the monitor (about 1 s;
        radosgw stopped after the monitor would wait for it in vain)."""
        watchdogs, self._watchdogs = self._watchdogs, []
        for _, watchdog in reversed(watchdogs):
            stop_supervised(watchdog)

    def _start_once(self) -> RgwServer:
        root = self.workdir / f"cluster-{uuid.uuid4().hex[:8]}"
        for folder in ("run", "log", "mon/mon.a", "osd/osd.0", "rgw/client.rgw.a"):
            (root / folder).mkdir(parents=True)
        self._root = root
        self.mon_ports = (free_port(), free_port())
        self.port = free_port()
        self.tls_port = free_port() if self.tls else None
        if self.tls:
            _write_self_signed_certificate(pathlib.Path(self.ca_file), self._key_file)
        self._write_config(root)
        deadline = time.monotonic() + self.startup_timeout

        keyring, monmap = root / "keyring", root / "monmap"
        self._run("ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", "mon.",
                  "--cap", "mon", "allow *")  # fmt: skip
        self._run("monmaptool", "--create", "--fsid", self.fsid,
                  "--addv", "a", self._mon_addresses(), monmap)  # fmt: skip
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", keyring)
        self._daemon("mon.a", ["ceph-mon", "-f", "-i", "a"])
        self._wait_until(deadline, "the monitor answering", self._mon_answers)

        osd_uuid = str(uuid.uuid4())
        self._run("ceph", "osd", "new", osd_uuid)
        self._run("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        self._daemon("osd.0", ["ceph-osd", "-f", "-i", "0"])
        self._daemon("client.rgw.a", ["radosgw", "-f", "-n", "client.rgw.a"])
        self._wait_until(deadline, "radosgw answering S3", self._rgw_answers)
        self._run("radosgw-admin", "user", "create", "--uid=magicfs-test",
                  "--display-name=magicfs-test", f"--access-key={RGW_ACCESS_KEY}",
                  f"--secret-key={RGW_SECRET_KEY}")  # fmt: skip
        return self

    def _mon_addresses(self) -> str:
        assert self.mon_ports is not None
        v2, v1 = self.mon_ports
        return f"[v2:{LOOPBACK}:{v2},v1:{LOOPBACK}:{v1}]"

    def _write_config(self, root: pathlib.Path) -> None:
        # tcp_nodelay: without it RGW's replies sent in two writes wait for the client's
        # delayed ACK, about 40 ms on many small requests (measured: benchmarks/rgw_nodelay.py).
        nodelay = "tcp_nodelay=1 " if self.tcp_nodelay else ""
        frontends = f"beast {nodelay}endpoint={LOOPBACK}:{self.port}"
        if self.tls:
            frontends += (
                f" ssl_endpoint={LOOPBACK}:{self.tls_port} ssl_certificate={self.ca_file}"
                f" ssl_private_key={self._key_file}"
            )
        settings = {
            "fsid": self.fsid,
            "mon host": self._mon_addresses(),
            # No cephx on a throwaway loopback cluster; with auth "none", msgr2 must
            # also allow crc mode, or radosgw waits 300 s for the monitor's config.
            "auth cluster required": "none",
            "auth service required": "none",
            "auth client required": "none",
            "ms mon client mode": "crc secure",
            "ms client mode": "crc secure",
            "run dir": root / "run",
            "admin socket": root / "run/$name.asok",
            "log file": root / "log/$name.log",
            "pid file": root / "run/$name.pid",
            "keyring": root / "keyring",
            "mon data": root / "mon/$name",
            "osd data": root / "osd/$name",
            "rgw data": root / "rgw/$name",
            "osd objectstore": "memstore",
            "memstore device bytes": self.memstore_bytes,
            "osd pool default size": 1,
            "osd pool default min size": 1,
            "osd pool default pg num": 8,
            "osd pool default pgp num": 8,
            "osd pool default pg autoscale mode": "off",
            "osd crush chooseleaf type": 0,
            "mon allow pool size one": "true",
        }
        lines = ["[global]", *(f"{key} = {value}" for key, value in settings.items())]
        lines += [
            "[client.rgw.a]",
            f"rgw frontends = {frontends}",
            # On SIGTERM radosgw waits for requests in flight (5 s here, 120 s at most by
            # default); a test server has none worth waiting for.
            "rgw exit timeout secs = 1",
        ]
        (root / "ceph.conf").write_text("\n".join(lines) + "\n")

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "CEPH_CONF": str(self._root / "ceph.conf")}

    def _run(self, *command: object, timeout: float = 30) -> None:
        """One set-up step; a failure raises with its output and the daemons' logs."""
        argv = [str(part) for part in command]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                env=self._environment(),
                cwd=self._root,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise ServerStartError(
                f"RGW set-up step timed out after {timeout:.0f}s: {' '.join(argv)}\n"
                f"{self.log_tail()}"
            ) from None
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise ServerStartError(
                f"RGW set-up step failed (exit {done.returncode}): {' '.join(argv)}\n"
                f"{output}\n{self.log_tail()}"
            )

    def _daemon(self, name: str, command: list[str]) -> None:
        log = self._root / "log" / f"{name}.stdout"
        watchdog = supervise(command, log, cwd=self._root, env=self._environment())
        self._watchdogs.append((name, watchdog))

    def _wait_until(self, deadline: float, what: str, ready: Any) -> None:
        while time.monotonic() < deadline:
            for name, watchdog in self._watchdogs:
                if watchdog.poll() is not None:
                    raise ServerStartError(f"{name} exited at startup:\n{self.log_tail()}")
            if ready():
                return
            time.sleep(0.1)
        raise ServerStartError(
            f"Ceph RGW did not start within {self.startup_timeout:.0f}s (waiting for "
            f"{what}):\n{self.log_tail()}"
        )

    def _mon_answers(self) -> bool:
        probe = subprocess.run(
            ["ceph", "--connect-timeout", "5", "mon", "stat"],
            capture_output=True,
            env=self._environment(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
        return probe.returncode == 0

    def _rgw_answers(self) -> bool:
        """An anonymous bucket listing answers: radosgw, not another process, listens."""
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with no_proxy.open(self.endpoint_url, timeout=2) as response:
                return b"ListAllMyBucketsResult" in response.read()
        except (OSError, urllib.error.URLError):
            return False

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of each daemon's log and output (for a failed start)."""
        parts = []
        for path in sorted((self._root / "log").glob("*")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            if text:
                parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)


def _write_self_signed_certificate(path: pathlib.Path, key_path: pathlib.Path) -> None:
    """A self-signed certificate for 127.0.0.1 at ``path``, its key at ``key_path``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
