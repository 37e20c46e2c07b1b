"""``magicfs uploads`` and ``magicfs jobs`` on the deferred stores besides S3: the
in-process store (``mem-deferred://``, the CLI's ``main`` called in the process that set
the job up) and Azure block lists (Azurite). Each store is served through its operator
view (:mod:`magicfs.stores.operator_view`); asserted is what the commands print and what
the store holds afterwards."""

from __future__ import annotations

import json
import shlex
import uuid

import fsspec
from helpers.polling import wait_until

import magicfs
from magicfs.committers.jobs import find_jobs
from magicfs.integrations.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def mem_job(dest: str):
    """A job with one committed task (a.csv, 3 bytes) and one open attempt (b.csv, 700
    bytes closed, never committed): two pending uploads, the job still active."""
    committer = magicfs.committer_for(dest)
    committer.setup_job()
    done, left = committer.task_attempt(0), committer.task_attempt(1)
    committer.setup_task(done)
    committer.fs.pipe_file(done.path("a.csv"), b"abc")
    message = committer.commit_task(done)
    committer.setup_task(left)
    committer.fs.pipe_file(left.path("sub/b.csv"), b"b" * 700)
    fs = fsspec.filesystem("mem-deferred")
    bucket = dest.removeprefix("mem-deferred://").split("/")[0]
    wait_until(
        lambda: len(fs.pending(f"{bucket}/")) == 2, "b.csv staged (closed in the background)"
    )
    return committer, message


def test_uploads_list_and_abort_on_the_in_process_store(capsys):
    bucket = f"cli-{uuid.uuid4().hex[:8]}"
    dest = f"mem-deferred://{bucket}/out"
    committer, _ = mem_job(dest)
    fs = fsspec.filesystem("mem-deferred")
    fs.pipe_file(f"{bucket}/out10/other.csv", b"not pending")
    staged = {path: upload for path, upload in fs.pending(f"{bucket}/")}
    assert set(staged) == {f"{bucket}/out/a.csv", f"{bucket}/out/sub/b.csv"}

    code, out, err = run(capsys, "uploads", "list", dest, "--json")
    assert code == 0, err
    document = json.loads(out)
    listed = {(u["uri"], u["upload_id"], u["parts"], u["bytes"]) for u in document["uploads"]}
    assert listed == {
        (f"mem-deferred://{bucket}/out/a.csv", staged[f"{bucket}/out/a.csv"], 1, 3),
        (f"mem-deferred://{bucket}/out/sub/b.csv", staged[f"{bucket}/out/sub/b.csv"], 1, 700),
    }
    assert (document["count"], document["bytes"], document["path"]) == (
        2,
        703,
        f"mem-deferred://{bucket}/out/",
    )

    code, out, _ = run(capsys, "uploads", "list", dest, "--fail-if-any")
    assert code == 1
    assert out.splitlines()[-1] == "Total: 2 uploads found, 703 bytes parked."
    code, _, err = run(capsys, "uploads", "list", dest, "--older-than", "1d")
    assert code == 2 and "--older-than selects by initiation time" in err

    code, out, _ = run(capsys, "uploads", "abort", dest)  # a dry run
    assert code == 0 and "Dry run: nothing was aborted" in out
    assert len(fs.pending(f"{bucket}/")) == 2

    # --job: the uploads its magic tree names (both); another job's are not touched.
    other = magicfs.committer_for(f"mem-deferred://{bucket}/out/sub")
    other.setup_job()
    task = other.task_attempt(0)
    other.setup_task(task)
    other.fs.pipe_file(task.path("c.csv"), b"cc")
    wait_until(lambda: len(fs.pending(f"{bucket}/")) == 3, "c.csv staged")
    code, out, err = run(capsys, "uploads", "abort", dest, "--force", "--job", committer.job_id)
    assert code == 0, err
    assert out.splitlines()[-1] == "Total: 2 uploads aborted, 703 bytes released."
    assert [path for path, _ in fs.pending(f"{bucket}/")] == [f"{bucket}/out/sub/c.csv"]
    other.abort_job()
    committer.abort_job()
    assert fs.pending(f"{bucket}/") == []


def test_jobs_list_and_rollback_on_the_in_process_store(capsys):
    bucket = f"cli-{uuid.uuid4().hex[:8]}"
    dest = f"mem-deferred://{bucket}/out"
    committer, _ = mem_job(dest)
    fs = fsspec.filesystem("mem-deferred")

    found = find_jobs(f"mem-deferred://{bucket}")
    assert [(j.job_id, j.committer, j.state, j.task_records) for j in found] == [
        (committer.job_id, "magic-layout", "active", 1)
    ]
    code, out, err = run(capsys, "jobs", "list", f"mem-deferred://{bucket}", "--json")
    assert code == 0, err
    (job,) = json.loads(out)["jobs"]
    assert (job["jobId"], job["destination"], job["state"]) == (committer.job_id, dest, "active")
    assert f"magicfs jobs rollback --job {committer.job_id} {dest}" in job["commands"]

    code, out, err = run(capsys, "jobs", "rollback", "--job", committer.job_id, dest, "--json")
    assert code == 0, err
    assert json.loads(out)["stateBefore"] == "active"
    assert find_jobs(dest) == []
    assert fs.pending(f"{bucket}/") == []  # its uploads were discarded
    code, out, _ = run(capsys, "uploads", "list", dest)
    assert code == 0 and out.splitlines()[-1] == "Total: 0 uploads found, 0 bytes parked."


def test_jobs_and_uploads_on_azure_block_lists(abfs, azure_container, azurite_server, capsys):
    dest = f"abfs://{azure_container}/out"
    committer = magicfs.committer_for(dest, fs=abfs)
    committer.setup_job()
    kept, dropped = committer.task_attempt(0), committer.task_attempt(1)
    for task, name, data in ((kept, "kept.bin", b"k" * 10), (dropped, "dropped.bin", b"d" * 70)):
        committer.setup_task(task)
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(data)
    committer.commit_task(kept)
    committer.abort_task(dropped)
    options = ["-o", f"connection_string={azurite_server.connection_string}"]

    found = find_jobs(f"abfs://{azure_container}", fs=abfs)
    assert [(j.job_id, j.committer, j.state, j.task_records) for j in found] == [
        (committer.job_id, "block-list", "active", 1)
    ]
    code, out, err = run(capsys, "jobs", "list", f"abfs://{azure_container}", "--json", *options)
    assert code == 0, err
    assert [(j["jobId"], j["state"]) for j in json.loads(out)["jobs"]] == [
        (committer.job_id, "active")
    ]

    code, out, err = run(capsys, "uploads", "list", dest, "--json", *options)
    assert code == 0, err
    document = json.loads(out)
    assert document["store"] == "azure-block-list"
    assert {(e["uri"], e["parts"], e["bytes"]) for e in document["uploads"]} == {
        (f"abfs://{azure_container}/out/kept.bin", 1, 10),
        (f"abfs://{azure_container}/out/dropped.bin", 1, 70),
    }
    code, _, err = run(capsys, "uploads", "list", dest, "--job", committer.job_id, *options)
    assert code == 2 and "--job and --older-than" in err

    code, out, err = run(capsys, "jobs", "rollback", "--job", committer.job_id, dest, *options)
    assert code == 0, err
    assert find_jobs(dest, fs=abfs) == []
    assert not abfs.exists(f"{azure_container}/out/kept.bin")


def test_jobs_list_names_a_committer_that_is_not_the_paths_default(
    abfs, azure_container, azurite_server, capsys
):
    """Azure's default is block-list; a manifest job there (adlfs serves both) is listed
    with commands naming ``--committer manifest``, and the one recommended rolls it back."""
    dest = f"abfs://{azure_container}/out"
    committer = magicfs.committer_for(dest, committer="manifest", fs=abfs)
    committer.setup_job()
    with committer.attempt(0) as task:
        committer.fs.pipe_file(task.path("a.csv"), b"abc")
    options = ["-o", f"connection_string={azurite_server.connection_string}"]

    code, out, err = run(capsys, "jobs", "list", dest, "--json", *options)
    assert code == 0, err
    (job,) = json.loads(out)["jobs"]
    assert (job["jobId"], job["committer"], job["state"]) == (
        committer.job_id,
        "manifest",
        "active",
    )
    rollback = f"magicfs jobs rollback --committer manifest --job {committer.job_id} {dest}"
    assert job["commands"][0] == rollback
    code, out, err = run(capsys, *shlex.split(rollback)[1:], *options)
    assert code == 0, err
    assert find_jobs(dest, fs=abfs) == []
