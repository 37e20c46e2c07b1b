"""Trying magicfs without a store: ``magicfs.local_s3()`` and ``magicfs server``.

Both run the embedded S3 server on 127.0.0.1 with the bucket the examples use. Each test
runs them in a process of its own, to see what a user sees: the options printed or
returned, a bucket that exists, and no process left once they stop.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import s3fs

import magicfs
from magicfs.integrations.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parent.parent


def gone(pid: int, timeout: float = 20.0) -> bool:
    """Whether process ``pid`` has exited (or is a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux)."""
    found = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def s3(options: dict) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(skip_instance_cache=True, **options)


#: A script that uses ``local_s3`` as the README does, then says what it started.
LOCAL_S3_SCRIPT = """
import json, os, pathlib, sys
import magicfs

opts = magicfs.local_s3(bucket="bkt")
again = magicfs.local_s3(bucket="bkt")
other = magicfs.local_s3(bucket="other")
children = [
    int(child)
    for task in pathlib.Path(f"/proc/{os.getpid()}/task").iterdir()
    for child in (task / "children").read_text().split()
]
print(json.dumps({"opts": opts, "same": opts == again == other, "children": children}))
sys.stdout.flush()
if sys.argv[1] == "wait":
    sys.stdin.read()  # until the test kills it
"""


def run_local_s3_script(mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", LOCAL_S3_SCRIPT, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_local_s3_starts_one_loopback_server_with_the_buckets_and_stops_it_at_exit():
    process = run_local_s3_script("wait")
    try:
        started = json.loads(process.stdout.readline())
        endpoint = started["opts"]["client_kwargs"]["endpoint_url"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", endpoint)
        assert started["same"]  # later calls reuse the one server
        [server] = started["children"]
        fs = s3(started["opts"])
        assert sorted(fs.ls("")) == ["bkt", "other"]
        fs.pipe_file("bkt/hello.txt", b"hello")
        assert fs.cat_file("bkt/hello.txt") == b"hello"
    finally:
        process.stdin.close()  # the script ends: atexit stops the server
        process.wait(timeout=60)
    assert process.returncode == 0
    assert gone(server)


def test_the_local_s3_server_stops_when_its_process_is_killed():
    process = run_local_s3_script("wait")
    try:
        [server] = json.loads(process.stdout.readline())["children"]
    finally:
        process.kill()  # no atexit: the server sees its stdin close
        process.wait(timeout=60)
    assert gone(server)


def test_local_s3_refuses_a_bucket_name_s3_would_refuse():
    with pytest.raises(ValueError, match=r"invalid bucket name 'My_Bucket': use 3-63 lower-case"):
        magicfs.local_s3(bucket="My_Bucket")


def test_the_local_s3_docstring_example_runs():
    # In a process of its own: the server it starts stops when that process exits.
    check = (
        "import doctest, magicfs.integrations.local_s3 as module; "
        "print(doctest.testmod(module, optionflags=doctest.ELLIPSIS))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "TestResults(failed=0, attempted=3)", result.stdout


#: A process without moto (the ``demo`` extra not installed): the import fails as it would.
# (Without moto, local_s3() and `magicfs server` name the extra in one line:
# tests/test_missing_extras.py.)


# --- magicfs server ---------------------------------------------------------------------


def start_server(*arguments: str) -> tuple[subprocess.Popen, list[str]]:
    """``magicfs server ARGUMENTS`` and the lines it printed up to "stop with Ctrl-C"."""
    process = subprocess.Popen(
        [sys.executable, "-m", "magicfs", "server", *arguments],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if "stop with Ctrl-C" in line:
            break
    return process, lines


def printed_options(lines: list[str]) -> dict:
    """The ``opts = {...}`` the server printed, as Python would read it."""
    [line] = [line for line in lines if "opts = " in line]
    namespace: dict = {}
    exec(line.split("Python:", 1)[1].strip(), namespace)
    return namespace["opts"]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_magicfs_server_prints_the_options_to_use_and_stops_on_a_signal(stop):
    process, banner = start_server("--bucket", "bkt", "--bucket", "more")
    try:
        opts = printed_options(banner)
        endpoint = opts["client_kwargs"]["endpoint_url"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", endpoint)
        assert banner[0].endswith(f"on {endpoint}, buckets bkt, more")
        fs = s3(opts)
        assert sorted(fs.ls("")) == ["bkt", "more"]
        job = magicfs.write_job("s3://bkt/out", storage_options=opts)
        with job, job.task(0) as task:
            job.fs.pipe_file(task.path("part-0.txt"), b"committed")
        assert fs.cat_file("bkt/out/part-0.txt") == b"committed"
        assert children(process.pid) == []  # the server is this process: nothing to leave
    finally:
        process.send_signal(stop)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert out.strip() == "magicfs S3 server stopped"
    port = int(endpoint.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass


def test_magicfs_server_has_bucket_bkt_and_prints_what_the_cli_page_shows():
    process, banner = start_server()
    try:
        assert s3(printed_options(banner)).ls("") == ["bkt"]
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 0
    page = (ROOT / "docs" / "cli.md").read_text()
    shown = page.split("$ magicfs server --bucket bkt\n", 1)[1].split("\n^C", 1)[0]
    port = re.compile(r"127\.0\.0\.1:\d+")
    assert port.sub("PORT", "\n".join(banner)) == port.sub("PORT", shown)


def test_magicfs_server_on_a_port_in_use_says_so():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "magicfs", "server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"Port {port} is in use by another program" in result.stderr
    assert "start the server with a different port" in result.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--bucket", "Bad_Name"], "invalid bucket name 'Bad_Name'"),
        (["--port", "70000"], "invalid port '70000': a number from 0 to 65535"),
    ],
)
def test_magicfs_server_refuses_bad_arguments_as_usage_errors(arguments, message):
    result = subprocess.run(
        [sys.executable, "-m", "magicfs", "server", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr


# --- docs/cli.md documents every command ----------------------------------------------------


def help_text(*command: str) -> str:
    """What ``magicfs COMMAND --help`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    return out.getvalue()


def commands(*parent: str) -> dict[str, str]:
    """Every command and subcommand of ``magicfs`` (``uploads list``) and its help."""
    text = help_text(*parent)
    choices = re.search(r"^usage: .*? \{([\w,-]+)\} \.\.\.$", text, re.M | re.S)
    if choices is None:
        return {" ".join(parent): text}
    found = {}
    for choice in choices[1].split(","):
        found.update(commands(*parent, choice))
    return found


def test_the_cli_page_documents_every_command_and_option():
    page = (ROOT / "docs" / "cli.md").read_text().replace("\\|", "|")
    found = commands()
    assert {"demo", "server", "uploads list", "jobs recover", "inspect", "success"} <= set(found)
    for name, text in found.items():
        command, _, sub = name.partition(" ")
        rows = re.findall(rf"`magicfs {command}(?: ([\w|]+))?", page)
        assert rows, f"docs/cli.md does not name `magicfs {command}`"
        if sub:
            assert any(sub in row.split("|") for row in rows), f"`magicfs {name}` is missing"
        for option in set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text)) - {"--help"}:
            assert option in page, f"`magicfs {name} {option}` is undocumented in docs/cli.md"
    assert "`magicfs --version`" in page
