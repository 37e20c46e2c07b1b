"""The watchdog of the local servers stops its server however it is asked to
(:mod:`magicfs.integrations.local_server.watchdog`).

A server started for the tests, the demo or ``magicfs server`` runs under a watchdog
process. Asked to stop (its stdin closed, or SIGTERM, as a service manager or ``kill``
sends), the watchdog must stop the server's whole process group, reap it and exit:
a watchdog that hangs leaves a zombie server and a process nobody waits for.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest
from helpers.polling import wait_until

from magicfs.integrations.local_server.watchdog import SCRIPT


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_the_watchdog_stops_and_reaps_its_server(how):
    watchdog = subprocess.Popen(
        [sys.executable, "-I", "-S", SCRIPT, "sleep", "1000"], stdin=subprocess.PIPE
    )
    try:
        [server] = wait_until(lambda: children(watchdog.pid), "the server has started")
        if how == "SIGTERM":
            os.kill(watchdog.pid, signal.SIGTERM)
        else:
            watchdog.stdin.close()
        assert watchdog.wait(timeout=30) == 256 - signal.SIGTERM  # the server's status
        assert not pathlib.Path(f"/proc/{server}").exists()  # reaped: not even a zombie
    finally:
        if watchdog.poll() is None:
            watchdog.kill()
            watchdog.wait()
