"""An S3 server on 127.0.0.1 for the demo, the tests and the benchmarks (moto, over real HTTP).

The server runs in a child process so that it has its own interpreter lock: client
and server in one process would measure the GIL, not the protocol. The child binds a
free loopback port, reports it on stdout, and exits when its parent goes away (it
watches its stdin), so a crashed test run never leaves a server behind.

``latency_ms`` delays every request before moto sees it, so that benchmarks see a
store whose requests take tens of milliseconds, as S3's do, while the delays of
concurrent requests overlap as they would on a real network.

Run ``python -m magicfs.embedded_s3 --port 0`` to start one by hand.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
_READY = "MAGICFS-S3-READY"


class EmbeddedS3Server:
    """A moto S3 server in a child process, bound to 127.0.0.1. Use as a context manager."""

    def __init__(self, port: int = 0, latency_ms: float = 0.0, startup_timeout: float = 30.0):
        self.requested_port = port
        self.latency_ms = latency_ms
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._process: subprocess.Popen[str] | None = None

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``s3fs.S3FileSystem`` (and ``fsspec.filesystem("s3", ...)``).

        No ``region_name`` in ``client_kwargs``: with it s3fs sends a
        LocationConstraint that moto refuses when creating buckets.
        """
        return {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": self.endpoint_url},
        }

    def start(self) -> EmbeddedS3Server:
        env = dict(os.environ)
        env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
        command = [
            sys.executable,
            "-m",
            "magicfs.embedded_s3",
            "--port",
            str(self.requested_port),
            "--latency-ms",
            str(self.latency_ms),
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.port = self._wait_for_port()
        return self

    def _wait_for_port(self) -> int:
        assert self._process is not None and self._process.stdout is not None
        found: list[int] = []

        def read_ready_line() -> None:
            for line in self._process.stdout:  # type: ignore[union-attr]
                if line.startswith(_READY):
                    found.append(int(line.split()[1]))
                    return

        reader = threading.Thread(target=read_ready_line, daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        if not found:
            self.stop()
            raise RuntimeError(
                f"embedded S3 server did not start within {self.startup_timeout:.0f}s"
            )
        return found[0]

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin:
            process.stdin.close()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()

    def reset(self) -> None:
        """Forget every bucket and upload (moto's reset API)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def set_latency(self, latency_ms: float) -> None:
        """Change the delay added to every request from now on."""
        request = urllib.request.Request(
            f"{self.endpoint_url}{_LATENCY_PATH}?ms={latency_ms}", method="POST"
        )
        with urllib.request.urlopen(request, timeout=30):
            pass
        self.latency_ms = latency_ms

    def boto3_client(self, **config: Any) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(**config) if config else None,
        )

    def __enter__(self) -> EmbeddedS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_LATENCY_PATH = "/_magicfs/latency"


def _latency_middleware(app: Any, latency_ms: float) -> Any:
    """Delay each request; ``POST /_magicfs/latency?ms=N`` changes the delay at run time."""
    delay = [latency_ms / 1000.0]

    def delayed(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == _LATENCY_PATH:
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
            delay[0] = float(query.get("ms", ["0"])[0]) / 1000.0
            start_response("204 No Content", [])
            return [b""]
        if delay[0]:
            time.sleep(delay[0])
        return app(environ, start_response)

    return delayed


def serve(port: int, latency_ms: float) -> None:
    """Run the server in this process until stdin closes (the parent has gone)."""
    os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    app: Any = _latency_middleware(DomainDispatcherApplication(create_backend_app), latency_ms)
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"{_READY} {server.server_address[1]}", flush=True)

    def stop_when_parent_leaves() -> None:
        sys.stdin.read()
        server.shutdown()

    threading.Thread(target=stop_when_parent_leaves, daemon=True).start()
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="moto S3 server on 127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay per request")
    args = parser.parse_args(argv)
    serve(args.port, args.latency_ms)


if __name__ == "__main__":
    main()
