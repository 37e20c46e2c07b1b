"""A local Azurite (Azure Blob emulator) for the Azure example, the benchmarks and the tests.

Azurite is an npm package (``npm install --prefix .ci/node azurite@3``, as
``tests/install_servers.sh`` does for the tests); :class:`LocalAzurite` starts its Blob
service the way they need it: data in memory, on 127.0.0.1, a port Azurite picks itself
(no race with other runs), telemetry off, under the watchdog of
:mod:`magicfs.integrations.local_server` (stopped when the block ends or the process that
started it dies). With a request log (``--debug``) a run can count its requests
(:meth:`LocalAzurite.requests`: a job commit on the block-list committer copies nothing).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import time
import urllib.error
import urllib.request
import uuid

from .local_server import LOOPBACK, SupervisedServer, accepts_connections

# Azurite's well-known development account (public, documented by Microsoft; not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
INSTALL = "npm install --prefix .ci/node --no-save --silent azurite@3"
#: Where ``INSTALL``, run in the repository root, puts Azurite's Blob service.
LOCAL_BINARY = (
    pathlib.Path(__file__).resolve().parents[2] / ".ci/node/node_modules/.bin/azurite-blob"
)

#: The container name of :meth:`LocalAzurite.settled_requests`'s barrier requests.
BARRIER = "log-barrier-"
_LISTENING = re.compile(rb"successfully listens on http://127\.0\.0\.1:(\d+)")
#: One request in Azurite's ``--debug`` log: the operation its dispatcher picked.
_OPERATION = re.compile(r"DispatchMiddleware: Operation=(\w+)")
#: The account, container and blob a request of that log is for.
_TARGET = re.compile(r"BlobStorageContextMiddleware: Account=\S+ Container=(\S*?)(?: Blob=(.*))?$")


def azurite_binary() -> pathlib.Path:
    """``azurite-blob`` from ``$MAGICFS_AZURITE``, the repository's ``.ci/node`` or ``$PATH``."""
    named = os.environ.get("MAGICFS_AZURITE")
    if named:
        return pathlib.Path(named)
    if os.access(LOCAL_BINARY, os.X_OK):
        return LOCAL_BINARY
    found = shutil.which("azurite-blob")
    if found is None:
        raise FileNotFoundError(
            f"Azurite is not installed ({LOCAL_BINARY} is missing): from the repository root "
            f"run {INSTALL}   (tests/install_servers.sh does this)"
        )
    return pathlib.Path(found)


class LocalAzurite(SupervisedServer):
    """A fresh Azurite Blob service: in memory, on loopback, a free port. Use as a context
    manager (or ``start()`` then ``stop()``).

    ``binary``: Azurite's ``azurite-blob`` (default: :func:`azurite_binary`).
    ``log_requests``: log every request (``--debug``) to ``debug_log`` (default
    ``<workdir>/debug.log``; Azurite appends to it, so give each server a fresh path).
    """

    name = "azurite-blob"

    def __init__(
        self,
        workdir: pathlib.Path,
        binary: pathlib.Path | None = None,
        *,
        log_requests: bool = True,
        debug_log: pathlib.Path | None = None,
    ) -> None:
        super().__init__(workdir)
        self.binary = binary or azurite_binary()
        self.debug_log = (debug_log or workdir / "debug.log") if log_requests else None

    def requested_port(self) -> int:
        return 0  # Azurite binds a free port itself and logs it: no race with other runs

    def command(self, port: int) -> list[str]:
        return [
            str(self.binary),
            "--blobHost",
            LOOPBACK,
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--disableTelemetry",  # otherwise it reports to an Azure endpoint
            "--skipApiVersionCheck",
            "--loose",
            "--silent",
            *(["--debug", str(self.debug_log)] if self.debug_log is not None else []),
        ]

    def bound_port(self, requested: int) -> int | None:
        match = _LISTENING.search(self.log_path.read_bytes())
        if match and accepts_connections(int(match.group(1))):
            return int(match.group(1))
        return None

    # -- clients --

    @property
    def account_name(self) -> str:
        return ACCOUNT

    @property
    def account_key(self) -> str:
        return ACCOUNT_KEY

    @property
    def blob_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
            f"AccountKey={ACCOUNT_KEY};BlobEndpoint={self.blob_endpoint};"
        )

    @property
    def storage_options(self) -> dict[str, str]:
        """Options for ``adlfs.AzureBlobFileSystem`` / ``fsspec.filesystem("abfs", ...)``."""
        return {"connection_string": self.connection_string}

    # -- the request log --

    def requests(self) -> list[tuple[str, str, str]]:
        """``(operation, container, blob)`` of every request in the log so far, in the
        order Azurite dispatched them (container and blob ``""`` where none)."""
        if self.debug_log is None:
            raise ValueError("this Azurite server was started without a request log")
        try:
            text = self.debug_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        targets: dict[str, tuple[str, str]] = {}
        found: list[tuple[str, str]] = []
        for line in text.splitlines():
            parts = line.split(" ", 2)
            if len(parts) < 3:
                continue
            request_id = parts[1]
            target = _TARGET.search(line)
            if target:
                targets[request_id] = (target.group(1), target.group(2) or "")
                continue
            operation = _OPERATION.search(line)
            if operation:
                found.append((request_id, operation.group(1)))
        return [(op, *targets.get(request_id, ("", ""))) for request_id, op in found]

    def settled_requests(self, timeout: float = 30.0) -> list[tuple[str, str, str]]:
        """:meth:`requests`, once every request answered before this call is in the log.

        Azurite writes its log asynchronously, in the order it dispatched the requests.
        So this sends a *barrier*: one unauthenticated request for a container named
        ``log-barrier-<nonce>`` (refused, but logged with its container), and waits until
        the log shows it. Barrier requests are left out of the list, so counts taken
        with this method before and after some work differ by that work's requests.
        """
        barrier = f"{BARRIER}{uuid.uuid4().hex[:16]}"
        url = f"{self.blob_endpoint}/{barrier}?restype=container"
        with contextlib.suppress(urllib.error.HTTPError):  # 403, as meant: it is logged
            urllib.request.urlopen(url, timeout=10).close()
        deadline = time.monotonic() + timeout
        while True:
            logged = self.requests()
            if any(container == barrier for _, container, _ in logged):
                return [entry for entry in logged if not entry[1].startswith(BARRIER)]
            if time.monotonic() > deadline:
                raise TimeoutError(f"Azurite's log did not show request {barrier} in {timeout} s")
            time.sleep(0.01)

    def operations(self) -> list[tuple[str, str]]:
        """Every request answered so far, in order, as (operation, blob name)."""
        return [(operation, blob) for operation, _, blob in self.settled_requests()]
