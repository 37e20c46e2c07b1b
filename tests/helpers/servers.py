"""Emulators of the rename stores (Azure Blob, GCS) as real processes on 127.0.0.1.

Each runs under the watchdog of :mod:`magicfs.integrations.local_server`
(:class:`~magicfs.integrations.local_server.SupervisedServer`): it stops the emulator's
process group when the test session ends *or dies* (even by SIGKILL), so no run, however
it ends, leaves an emulator behind. Azurite's one launcher is
:class:`magicfs.integrations.azurite.LocalAzurite` (``conftest.py`` starts it directly).

Usage (``conftest.py``): ``with GcsEmulatorServer(workdir) as server:`` (or ``start()``
then ``stop()``).
"""

from __future__ import annotations

import json
import pathlib
import sys
import urllib.request

from magicfs.integrations.local_server import LOOPBACK, SupervisedServer, accepts_connections

__all__ = ["GcsEmulatorServer", "accepts_connections"]

GCS_PROJECT = "test"


class GcsEmulatorServer(SupervisedServer):
    """``gcp-storage-emulator`` (PyPI), objects in memory."""

    name = "gcp-storage-emulator"

    def command(self, port: int) -> list[str]:
        executable = pathlib.Path(sys.executable).with_name("gcp-storage-emulator")
        return [str(executable), "start", "--host", LOOPBACK, "--port", str(port), "--in-memory"]

    def bound_port(self, requested: int) -> int | None:
        """Ready when the bucket listing answers: proof that the emulator, not some
        other process that took the free port first, is listening."""
        url = f"http://{LOOPBACK}:{requested}/storage/v1/b?project={GCS_PROJECT}"
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with no_proxy.open(url, timeout=2) as response:
                answer = json.load(response)
        except (OSError, ValueError):
            return None
        return requested if answer.get("kind") == "storage#buckets" else None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def project(self) -> str:
        return GCS_PROJECT

    @property
    def storage_options(self) -> dict[str, str]:
        """Options for ``gcsfs.GCSFileSystem``: anonymous, so no credential lookup at all."""
        return {"token": "anon", "project": GCS_PROJECT, "endpoint_url": self.endpoint_url}
