"""The SeaweedFS test server (``tests/helpers/seaweed.py``) and its fixtures (``conftest.py``).

``weed mini`` opens many ports (master, volume, filer, S3 gateway, each with a gRPC port,
and an admin server); the server must listen only on ports it chose free, on 127.0.0.1,
and never outlive a test session, even one killed by SIGKILL.
"""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers.polling import wait_until
from helpers.seaweed import SeaweedServer

from magicfs.integrations.local_server import ServerStartError, accepts_connections

pytestmark = pytest.mark.seaweed  # pytest -m seaweed runs these too

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _weed_pids(workdir: pathlib.Path) -> list[int]:
    """The PIDs of running ``weed`` processes whose command line names ``workdir``."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        named = any(str(workdir).encode() in part for part in command)
        weed = pathlib.Path(command[0].decode(errors="replace")).name == "weed"
        if weed and named and state != "Z":
            found.append(int(entry.name))
    return found


def _reaped(pids: list[int]) -> bool:
    """Every one of ``pids`` is gone from /proc: all its threads ended and it was reaped
    (a Go program's main thread can be a zombie while its other threads, holding its
    sockets, still shut down)."""
    return not any(pathlib.Path(f"/proc/{pid}").exists() for pid in pids)


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on over TCP (IPv4 and IPv6)."""
    inodes = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in pathlib.Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                address, port = local.split(":")
                found.add((_address(address), int(port, 16)))
    return found


def _address(hexadecimal: str) -> str:
    if len(hexadecimal) == 8:  # IPv4, little-endian
        return ".".join(str(int(hexadecimal[i : i + 2], 16)) for i in (6, 4, 2, 0))
    return hexadecimal  # IPv6: never expected here, shown as is


def test_it_listens_only_on_the_loopback_ports_it_chose(seaweed_server, seaweed_client):
    assert seaweed_client.list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
    (pid,) = _weed_pids(seaweed_server.workdir)
    chosen = {seaweed_server.port, *seaweed_server.ports.values()}
    listening = _listening(pid)
    assert {address for address, _ in listening} == {"127.0.0.1"}
    assert {port for _, port in listening} <= chosen  # none of weed mini's fixed defaults


def test_it_dies_with_a_sigkilled_session(tmp_path):
    """A session killed by SIGKILL leaves no ``weed`` behind: its watchdog sees its stdin
    close and stops the process group."""
    script = textwrap.dedent(
        f"""
        import pathlib, sys, time
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from helpers.seaweed import SeaweedServer
        server = SeaweedServer(pathlib.Path({str(tmp_path)!r})).start()
        print(server.port, *server.ports.values(), flush=True)
        time.sleep(600)
        """
    )
    session = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        ports = [int(port) for port in session.stdout.readline().split()]  # type: ignore[union-attr]
        assert ports, "SeaweedFS did not start"
        pids = _weed_pids(tmp_path)
        assert len(pids) == 1 and accepts_connections(ports[0])
    finally:
        session.send_signal(signal.SIGKILL)
        session.wait()
    wait_until(lambda: _reaped(pids), timeout=30, what="weed to stop")
    assert not any(accepts_connections(port) for port in ports)


def test_a_server_that_cannot_start_says_why(tmp_path, monkeypatch):
    """A ``weed`` that exits at once: the error carries its output."""
    fake = tmp_path / "weed"
    fake.write_text("#!/bin/sh\necho 'weed: injected start-up failure' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr("helpers.seaweed.weed_binary", lambda: fake)
    with pytest.raises(ServerStartError) as failed:
        SeaweedServer(tmp_path / "work").start()
    message = str(failed.value)
    assert "seaweedfs exited at startup" in message
    assert "weed: injected start-up failure" in message
