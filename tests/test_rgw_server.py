"""The Ceph RGW test server (``tests/helpers/rgw.py``) and its fixtures (``conftest.py``).

The server is a real S3 implementation: these tests check that it answers S3 over HTTP
and HTTPS with the fixtures' settings, that its daemons never outlive a SIGKILLed test
session, and what a run does where Ceph is not installed (one summary line locally, a
failure with the install command under ``CI=true``).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest
import s3fs

from magicfs.integrations.local_server import accepts_connections

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_rgw_bucket_serves_s3_over_http_and_https(rgw_server, rgw_s3, rgw_client, rgw_bucket):
    rgw_s3.pipe(f"{rgw_bucket}/plain.txt", b"over http")
    tls = s3fs.S3FileSystem(skip_instance_cache=True, **rgw_server.tls_storage_options)
    tls.pipe(f"{rgw_bucket}/big.bin", b"x" * (6 * 2**20))  # a multipart upload over TLS

    listed = rgw_client.list_objects_v2(Bucket=rgw_bucket)["Contents"]
    assert sorted((item["Key"], item["Size"]) for item in listed) == [
        ("big.bin", 6 * 2**20),
        ("plain.txt", 9),
    ]
    assert tls.cat(f"{rgw_bucket}/plain.txt") == b"over http"
    assert rgw_server.tls_endpoint_url.startswith("https://127.0.0.1:")


def test_rgw_bucket_fails_a_test_that_parks_an_upload(rgw_client, rgw_bucket, request):
    """The fixture's own check, run by hand: it must name the parked key."""
    from conftest import _checked_bucket

    checked = _checked_bucket(request, rgw_client)
    name = next(checked)
    rgw_client.create_multipart_upload(Bucket=name, Key="left/behind")
    with pytest.raises(
        pytest.fail.Exception, match=r"1 multipart uploads parked: \['left/behind'\]"
    ):
        next(checked)
    assert name not in [b["Name"] for b in rgw_client.list_buckets()["Buckets"]]


def test_daemons_die_with_a_sigkilled_session(rgw_installed, tmp_path):
    """A session killed by SIGKILL leaves no Ceph daemon behind: the watchdogs see their
    stdin close and stop the daemons by their PIDs."""
    script = textwrap.dedent(
        f"""
        import pathlib, sys, time
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from helpers.rgw import RgwServer
        server = RgwServer(pathlib.Path({str(tmp_path)!r}), tls=False).start()
        print(server.port, *server.mon_ports, flush=True)
        time.sleep(600)
        """
    )
    session = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        ports = [int(port) for port in session.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(ports) == 3, "the RGW server did not start"
        pids = _ceph_pids(tmp_path)
        assert len(pids) == 3 and all(accepts_connections(port) for port in ports)
    finally:
        session.send_signal(signal.SIGKILL)
        session.wait()
    _wait_gone(pids, timeout=30)
    assert not any(accepts_connections(port) for port in ports)


def test_a_failed_start_raises_with_the_daemons_logs_and_stops_the_others(
    rgw_installed, tmp_path, monkeypatch
):
    """radosgw replaced by a wrapper that fails at once: the error names the daemon and
    carries its output, and the monitor and OSD already started are stopped."""
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    fake = wrappers / "radosgw"
    fake.write_text("#!/bin/sh\necho 'radosgw: injected start-up failure' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}{os.pathsep}{os.environ['PATH']}")
    workdir = tmp_path / "cluster"
    from helpers.rgw import RgwServer

    from magicfs.integrations.local_server import ServerStartError

    with pytest.raises(ServerStartError) as failed:
        RgwServer(workdir, tls=False).start()
    message = str(failed.value)
    assert "client.rgw.a exited at startup" in message
    assert "radosgw: injected start-up failure" in message
    assert "--- mon.a.log" in message  # the other daemons' logs too
    _wait_gone(_ceph_pids(workdir), timeout=15)
    assert _ceph_pids(workdir) == []


def _ceph_pids(workdir: pathlib.Path) -> list[int]:
    """The PIDs of the daemons whose command line names ``workdir``'s cluster (from /proc)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        daemon = pathlib.Path(command[0].decode(errors="replace")).name
        if daemon in ("ceph-mon", "ceph-osd", "radosgw") and str(workdir).encode() in environ:
            found.append(int(entry.name))
    return found


def _wait_gone(pids: list[int], timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive:
            return
        time.sleep(0.2)
    pytest.fail(f"Ceph daemons still running {timeout:.0f}s after the session died: {alive}")


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("ci", "outcome", "line"),
    [
        ("", "1 skipped", "1 RGW tests did not run: radosgw is not installed; install with: "),
        ("true", "1 error", "radosgw is not installed (ceph-authtool"),
    ],
)
def test_missing_ceph_is_reported(tmp_path, ci, outcome, line):
    """Without Ceph on PATH: skipped and counted in one line locally, an error in CI."""
    test = tmp_path / "test_uses_rgw.py"
    test.write_text("def test_one(rgw_bucket):\n    assert rgw_bucket\n")
    env = {**os.environ, "PATH": str(pathlib.Path(sys.executable).parent), "CI": ci}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", ROOT,
         "-c", ROOT / "pyproject.toml", "-p", "conftest", str(test)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert outcome in run.stdout, run.stdout[-3000:]
    assert line in run.stdout
    assert "sudo apt-get install -y --no-install-recommends radosgw" in run.stdout
    assert run.returncode == (0 if not ci else 1)
