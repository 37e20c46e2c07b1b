"""A local Azurite (Azure Blob emulator) for the Azure example and benchmark.

Azurite is an npm package (``npm install --prefix .ci/node azurite@3``, as
``tests/install_servers.sh`` does for the tests); this module starts its Blob service the
way the examples need it: data in memory, on 127.0.0.1, a free port, telemetry off, and
every request it serves logged, so a run can count its requests
(:meth:`LocalAzurite.operations`: a job commit on the block-list committer copies nothing).
The test suite starts its own, supervised server (``tests/helpers/servers.py``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

LOOPBACK = "127.0.0.1"
# Azurite's well-known development account (public, documented by Microsoft; not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
OPERATION = re.compile(rb"^\S+ (\S+) info: DispatchMiddleware: Operation=(\w+)", re.M)
BLOB = re.compile(
    rb"^\S+ (\S+) info: BlobStorageContextMiddleware: Account=\S+ Container=\S* Blob=(\S*)$", re.M
)
INSTALL = "npm install --prefix .ci/node --no-save --silent azurite@3"


def azurite_binary() -> pathlib.Path:
    """``azurite-blob`` from ``$MAGICFS_AZURITE``, the repository's ``.ci/node`` or ``$PATH``."""
    named = os.environ.get("MAGICFS_AZURITE")
    if named:
        return pathlib.Path(named)
    repository = pathlib.Path(__file__).resolve().parents[2]
    local = repository / ".ci/node/node_modules/.bin/azurite-blob"
    if os.access(local, os.X_OK):
        return local
    found = shutil.which("azurite-blob")
    if found is None:
        raise FileNotFoundError(f"Azurite is not installed: from the repository root run {INSTALL}")
    return pathlib.Path(found)


class LocalAzurite:
    """A fresh Azurite Blob service: in memory, on loopback, a free port, every request
    logged (``--debug``) to ``debug_log``. Stopped on exit, process group and all.

    ``binary``: Azurite's ``azurite-blob`` (default: :func:`azurite_binary`).
    """

    def __init__(self, workdir: pathlib.Path, binary: pathlib.Path | None = None) -> None:
        self.binary = binary or azurite_binary()
        self.workdir = workdir
        self.debug_log = workdir / "debug.log"
        self.output = workdir / "azurite.out"
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalAzurite:
        with self.output.open("wb") as out:
            self._process = subprocess.Popen(
                [
                    str(self.binary),
                    "--blobHost",
                    LOOPBACK,
                    "--blobPort",
                    "0",  # Azurite binds a free port itself and logs it
                    "--inMemoryPersistence",
                    "--disableTelemetry",  # otherwise it reports to an Azure endpoint
                    "--skipApiVersionCheck",
                    "--loose",
                    "--silent",
                    "--debug",
                    str(self.debug_log),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # its own process group: stopped whole
            )
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listening(self, timeout: float = 60.0) -> None:
        listening = re.compile(rb"successfully listens on http://127\.0\.0\.1:(\d+)")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"Azurite exited at startup:\n{self.output.read_text()}")
            match = listening.search(self.output.read_bytes())
            if match:
                self.port = int(match.group(1))
                return
            time.sleep(0.05)
        raise RuntimeError(f"Azurite did not start in {timeout:.0f}s:\n{self.output.read_text()}")

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    @property
    def storage_options(self) -> dict[str, str]:
        endpoint = f"http://{LOOPBACK}:{self.port}/{ACCOUNT}"
        return {
            "connection_string": (
                f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
                f"AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};"
            )
        }

    def operations(self) -> list[tuple[str, str]]:
        """Every request logged so far, in order, as (operation, blob name), once the
        log has stopped growing (Azurite writes it asynchronously)."""
        size, stable_since = -1, time.monotonic()
        while True:
            now = self.debug_log.stat().st_size if self.debug_log.exists() else 0
            if now != size:
                size, stable_since = now, time.monotonic()
            elif time.monotonic() - stable_since >= 0.5:
                break
            time.sleep(0.05)
        log = self.debug_log.read_bytes()
        blobs = {m.group(1): m.group(2).decode() for m in BLOB.finditer(log)}
        return [(m.group(2).decode(), blobs.get(m.group(1), "")) for m in OPERATION.finditer(log)]
