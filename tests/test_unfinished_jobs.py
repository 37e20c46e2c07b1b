"""Jobs left unfinished: nothing published that nobody meant, each message names the next step.

* A driver killed while its tasks still ran (2 of 4 committed, one writing) leaves a job
  whose commit never began. Only that driver knew whether every task had committed, so
  ``magicfs jobs recover`` and ``commit_job()`` in another process refuse it, changing
  nothing, until the operator says what to publish: the tasks' messages
  (``--messages FILE``) or that the committed tasks are the whole job
  (``--all-committed-tasks``, recorded in ``_SUCCESS``). On S3 (moto) and on a rename
  store (local disk, manifest committer).
* Every ``magicfs jobs`` action on a job id of which nothing is left fails, naming the
  jobs that are there; a job committed and cleaned up is told apart from a typo.
* A process that exits with a job it set up still active warns, naming the job, its
  destination and commands that work; jobs it committed or aborted are not named.

The drivers run in child processes (``helpers.abandoned_job``); the operator's commands
run as operators run them (``python -m magicfs``), checked by exit code, output and store.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid

import pytest
from helpers import object_keys, pending_uploads, visible_keys
from helpers.cli import run_cli

import magicfs
from magicfs.errors import JobCommitError, NothingToCommitError

TESTS = os.path.dirname(os.path.abspath(__file__))
#: This checkout's magicfs, not another one installed in the environment.
CHILD_PATH = os.pathsep.join([TESTS, os.path.dirname(TESTS)])
TASKS = [{f"t{t}/f{n}.csv": f"task {t} file {n}\n" for n in range(2)} for t in range(2)]
WRITING = {"t2/f0.csv": "task 2, still writing when its driver died\n"}


def run_driver(spec: dict, end: str) -> subprocess.CompletedProcess:
    """``helpers.abandoned_job`` in a child process, ending as ``end`` says."""
    return subprocess.run(
        [sys.executable, "-m", "helpers.abandoned_job", json.dumps({**spec, "end": end})],
        cwd=TESTS,
        env={**os.environ, "PYTHONPATH": CHILD_PATH},
        capture_output=True,
        text=True,
        timeout=120,
    )


def kill_driver(job: dict) -> None:
    """The driver of ``job`` dies (SIGKILL) with its tasks committed and one writing."""
    done = run_driver({"jobs": [job]}, "kill")
    assert done.returncode == -9, f"the driver did not die as planned:\n{done.stderr[-3000:]}"


@pytest.fixture
def cli(s3_server):
    """``magicfs ARGS --endpoint-url <moto>``; credentials come from the environment."""
    keys = {
        "AWS_ACCESS_KEY_ID": s3_server.storage_options["key"],
        "AWS_SECRET_ACCESS_KEY": s3_server.storage_options["secret"],
    }

    def run(*args: str):
        return run_cli(*args, "--endpoint-url", s3_server.endpoint_url, env=keys)

    return run


@pytest.fixture
def s3_job(s3_options, bucket, tmp_path):
    """A magic-committer job on moto: its spec, and ``committer()`` for its id here."""
    job_id = f"killed-{uuid.uuid4().hex[:8]}"
    spec = {
        "dest": f"s3://{bucket}/out",
        "job_id": job_id,
        "storage_options": s3_options,
        "tasks": TASKS,
        "writing": WRITING,
        "messages": str(tmp_path / "messages.json"),
    }

    def committer():
        options = {**s3_options, "skip_instance_cache": True}
        return magicfs.committer_for(spec["dest"], job_id=job_id, storage_options=options)

    return spec, committer


def store_state(s3_client, bucket: str) -> tuple[list[str], list[dict]]:
    """Every object (the job's tree included, the job commit records, which every commit
    leaves, aside) and every pending upload."""
    keys = [k for k in object_keys(s3_client, bucket) if "/_magicfs/" not in f"/{k}"]
    return keys, pending_uploads(s3_client, bucket)


def published(s3_client, bucket: str) -> dict[str, bytes]:
    """What readers see under ``out/`` (``_SUCCESS`` aside), with the bytes."""
    return {
        key.removeprefix("out/"): s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
        for key in visible_keys(s3_client, bucket, "out/")
        if key != "out/_SUCCESS"
    }


def files_of(*tasks: int) -> dict[str, bytes]:
    return {name: text.encode() for t in tasks for name, text in TASKS[t].items()}


def success(s3_client, bucket: str) -> dict:
    return json.loads(s3_client.get_object(Bucket=bucket, Key="out/_SUCCESS")["Body"].read())


# --- a driver killed before committing: refused until the operator says what ------------------


def test_a_killed_drivers_job_is_refused_until_told_what_then_all_committed_tasks_publish(
    cli, s3_job, s3_client, bucket
):
    spec, committer = s3_job
    job_id, dest = spec["job_id"], spec["dest"]
    kill_driver(spec)
    before = store_state(s3_client, bucket)
    assert len(before[1]) == 5  # 4 files of the committed tasks + the one being written

    listed = cli("jobs", "list", dest)
    assert listed.code == 0, listed.output
    assert f"{job_id}  magic  active, 2 committed tasks" in listed.stdout
    assert "the driver stopped before committing, or is still running; 2 task records" in (
        listed.stdout
    )
    rollback = f"magicfs jobs rollback --job {job_id} {dest}"
    by_messages = f"magicfs jobs recover --messages FILE --job {job_id} {dest}"
    all_tasks = f"magicfs jobs recover --all-committed-tasks --job {job_id} {dest}"
    lines = [line.strip() for line in listed.stdout.splitlines()]
    assert [line.split("    #")[0] for line in lines if line.startswith("magicfs ")] == [
        rollback,
        by_messages,
        all_tasks,
    ]
    listed_json = cli("jobs", "list", "--json", dest).json()["jobs"]
    assert listed_json[0]["commands"] == [rollback, by_messages, all_tasks]

    refused = cli("jobs", "recover", "--job", job_id, dest)
    assert refused.code == 1
    assert (
        "not recovered: no commit of it began (the driver stopped before committing, or is "
        "still running; 2 task records)"
    ) in refused.stderr
    for command in (by_messages, all_tasks, rollback):
        assert command in refused.stderr
    assert store_state(s3_client, bucket) == before  # nothing changed, the job still active

    with pytest.raises(JobCommitError, match="no commit begun") as error:
        committer().commit_job()  # this process did not set the job up either
    assert error.value.recoverable
    assert "commit_job(messages)" in str(error.value)
    assert all_tasks in str(error.value) and rollback in str(error.value)
    assert store_state(s3_client, bucket) == before

    recovered = cli("jobs", "recover", "--all-committed-tasks", "--json", "--job", job_id, dest)
    assert recovered.code == 0, recovered.output
    outcome = recovered.json()
    assert (outcome["stateBefore"], outcome["recoveredFrom"]) == ("active", "all-committed-tasks")
    assert (outcome["files"], outcome["tasks"]) == (4, 2)
    assert published(s3_client, bucket) == files_of(0, 1)
    diagnostics = success(s3_client, bucket)["diagnostics"]
    assert diagnostics["magicfs.recovered"].startswith("all-committed-tasks: ")
    assert "(pid " in diagnostics["magicfs.recovered.by"]
    assert diagnostics["magicfs.recovered.at"].endswith("Z")
    assert store_state(s3_client, bucket) == (
        ["out/_SUCCESS", *sorted(f"out/{n}" for n in files_of(0, 1))],
        [],
    )


def test_recover_with_messages_publishes_exactly_the_attempts_they_name(
    cli, s3_job, s3_client, bucket, tmp_path
):
    spec, _ = s3_job
    kill_driver(spec)
    saved = json.loads(pathlib.Path(spec["messages"]).read_text())
    assert len(saved) == 2
    only_first = tmp_path / "first.jsonl"  # one message per line is read too
    only_first.write_text(json.dumps(saved[0]) + "\n")
    recovered = cli(
        "jobs", "recover", "--messages", str(only_first), "--job", spec["job_id"], spec["dest"]
    )
    assert recovered.code == 0, recovered.output
    assert "committed 2 files" in recovered.stdout
    assert "exactly the attempts the messages name" in recovered.stdout
    assert published(s3_client, bucket) == files_of(0)
    assert "magicfs.recovered" not in success(s3_client, bucket)["diagnostics"]
    assert store_state(s3_client, bucket) == (
        ["out/_SUCCESS", *sorted(f"out/{n}" for n in files_of(0))],
        [],  # task 1's committed uploads and task 2's unfinished one: aborted
    )


def _other_jobs_message(saved: list[dict]) -> list[dict]:
    return [{**saved[0], "job_id": "another-job"}]


def _missing_field(saved: list[dict]) -> list[dict]:
    return [{k: v for k, v in saved[0].items() if k != "record"}]


def _gone_record(saved: list[dict]) -> list[dict]:
    directory = saved[0]["record"].rsplit("/", 1)[0]
    return [{**saved[0], "record": f"{directory}/attempt-never-committed.pendingset"}]


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        (_other_jobs_message, "entry 0: job_id is 'another-job', not the job recovered"),
        (_missing_field, "entry 0: field record is missing or not a str"),
        (_gone_record, "1 record they name is not there"),
        (lambda saved: saved + saved[:1], "entry 2: a second message for task"),
    ],
)
def test_a_wrong_messages_file_is_refused_and_changes_nothing(
    cli, s3_job, s3_client, bucket, tmp_path, tamper, says
):
    spec, _ = s3_job
    kill_driver(spec)
    before = store_state(s3_client, bucket)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(tamper(json.loads(pathlib.Path(spec["messages"]).read_text()))))
    refused = cli(
        "jobs", "recover", "--messages", str(wrong), "--job", spec["job_id"], spec["dest"]
    )
    assert refused.code == 1
    assert f"--messages {wrong}: {says}" in refused.stderr
    assert store_state(s3_client, bucket) == before
    assert cli("jobs", "rollback", "--job", spec["job_id"], spec["dest"]).code == 0
    assert store_state(s3_client, bucket) == ([], [])


def test_on_a_rename_store_recover_refuses_then_publishes_the_committed_tasks(tmp_path):
    root = tmp_path / "out"
    dest = f"file://{root}"
    job_id = f"killed-{uuid.uuid4().hex[:8]}"
    kill_driver({"dest": dest, "job_id": job_id, "tasks": TASKS, "writing": WRITING})

    def visible() -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and not p.relative_to(root).as_posix().startswith("_")
        }

    def everything() -> list[str]:
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))

    listed = run_cli("jobs", "list", dest)
    assert f"{job_id}  manifest  active, 2 committed tasks" in listed.stdout
    assert "the driver stopped before committing, or is still running; 2 task records" in (
        listed.stdout
    )
    before = everything()
    refused = run_cli("jobs", "recover", "--job", job_id, dest)
    assert refused.code == 1
    assert f"magicfs jobs recover --all-committed-tasks --job {job_id} {dest}" in refused.stderr
    assert f"magicfs jobs recover --messages FILE --job {job_id} {dest}" in refused.stderr
    assert everything() == before and visible() == {}
    recovered = run_cli("jobs", "recover", "--all-committed-tasks", "--job", job_id, dest)
    assert recovered.code == 0, recovered.output
    assert visible() == files_of(0, 1)
    document = json.loads((root / "_SUCCESS").read_text())
    assert document["diagnostics"]["magicfs.recovered"].startswith("all-committed-tasks")
    assert not (root / "_temporary").exists()


# --- commit_job() in the process that set the job up, and the keyword -------------------------


def test_commit_job_lists_where_the_job_was_set_up_and_takes_one_choice(
    s3_options, bucket, s3_client
):
    options = {**s3_options, "skip_instance_cache": True}
    driver = magicfs.committer_for(f"s3://{bucket}/out", storage_options=options)
    driver.setup_job()
    for index in range(2):
        task = driver.task_attempt(index)
        driver.setup_task(task)
        for name, text in TASKS[index].items():
            driver.fs.pipe_file(task.path(name), text.encode())
        driver.commit_task(task)
    with pytest.raises(ValueError, match="messages or all_committed_tasks=True, not both"):
        driver.commit_job([], all_committed_tasks=True)
    # Another committer object for the same job, in the process that set it up: it lists.
    same_process = magicfs.committer_for(
        f"s3://{bucket}/out", job_id=driver.job_id, storage_options=options
    )
    assert same_process.commit_job().files == 4
    assert published(s3_client, bucket) == files_of(0, 1)
    assert "magicfs.recovered" not in success(s3_client, bucket)["diagnostics"]
    with pytest.raises(NothingToCommitError, match="already been committed"):
        driver.commit_job()  # ended here: the job is not this process's any more


# --- job ids of which nothing is left ----------------------------------------------------------


@pytest.mark.parametrize("action", ["recover", "rollback", "cleanup"])
def test_every_action_on_an_unknown_job_id_fails_naming_the_jobs_that_are_there(
    cli, action, s3_options, bucket, s3_client
):
    dest = f"s3://{bucket}/out"
    options = {**s3_options, "skip_instance_cache": True}
    real = magicfs.committer_for(dest, job_id="real-job", storage_options=options)
    real.setup_job()
    before = store_state(s3_client, bucket)
    typo = cli("jobs", action, "--job", "real-jbo", dest)
    assert typo.code == 1
    assert f"no job real-jbo at {dest}: nothing of it is there" in typo.stderr
    assert "Jobs found there: real-job" in typo.stderr
    assert store_state(s3_client, bucket) == before  # the real job untouched
    real.abort_job()


@pytest.mark.parametrize("action", ["recover", "rollback", "cleanup"])
def test_on_a_rename_store_an_unknown_job_id_fails_too(action, tmp_path):
    dest = f"file://{tmp_path}/out"
    real = magicfs.committer_for(dest, job_id="real-job")
    real.setup_job()
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    typo = run_cli("jobs", action, "--job", "real-jbo", dest)
    assert typo.code == 1
    assert f"no job real-jbo at {dest}: nothing of it is there" in typo.stderr
    assert "Jobs found there: real-job" in typo.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    nothing = run_cli("jobs", action, "--job", "real-jbo", f"file://{tmp_path}/empty")
    assert nothing.code == 1 and "Jobs found there: none" in nothing.stderr
    real.abort_job()


def test_a_committed_and_cleaned_up_job_is_known_cleanup_says_so_rollback_refuses(
    cli, s3_options, bucket, s3_client
):
    dest = f"s3://{bucket}/out"
    committer = magicfs.committer_for(
        dest, job_id="done-job", storage_options={**s3_options, "skip_instance_cache": True}
    )
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("a.csv"), b"a\n")
    committer.commit_job([committer.commit_task(task)])
    after = store_state(s3_client, bucket)
    cleanup = cli("jobs", "cleanup", "--job", "done-job", dest)
    assert cleanup.code == 0, cleanup.output
    assert "already committed and cleaned up (its _SUCCESS names it): nothing to do" in (
        cleanup.stdout
    )
    rollback = cli("jobs", "rollback", "--job", "done-job", dest)
    assert rollback.code == 1
    assert "has already committed to" in rollback.stderr
    assert "nothing to roll back, its output stays" in rollback.stderr
    recover = cli("jobs", "recover", "--job", "done-job", dest)
    assert recover.code == 1 and "already been committed" in recover.stderr
    assert store_state(s3_client, bucket) == after == (["out/_SUCCESS", "out/a.csv"], [])


# --- a script that ends with its job still active ---------------------------------------------


def test_a_process_exiting_with_its_job_active_names_it_and_commands_that_work(
    cli, s3_options, bucket, s3_client, tmp_path
):
    def job(name: str, finish: str | None, **more) -> dict:
        return {
            "dest": f"s3://{bucket}/{name}",
            "job_id": f"{name}-{uuid.uuid4().hex[:6]}",
            "storage_options": s3_options,
            "tasks": TASKS[:1],
            "finish": finish,
            **more,
        }

    left = job("left", None, writing=WRITING)  # one task committed, one never committed
    ended = [
        job("committed", "commit"),
        job("aborted", "abort"),
        job("staged", "commit", committer="directory", options={"buffer_dir": str(tmp_path)}),
    ]
    done = run_driver({"jobs": [left, *ended]}, "exit")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "still active at exit" in line]
    assert len(warnings) == 1, done.stderr
    dest = f"s3://{bucket}/left"
    assert warnings[0].startswith(
        f"magicfs: job {left['job_id']} at {dest} was set up by this process and is still "
        "active at exit"
    )
    rollback = f"magicfs jobs rollback --job {left['job_id']} {dest}"
    recover = f"magicfs jobs recover --all-committed-tasks --job {left['job_id']} {dest}"
    assert rollback in warnings[0] and recover in warnings[0]
    for other in ended:
        assert other["job_id"] not in done.stderr
    # The command it names works: the committed task is published, the other's upload goes.
    recovered = cli(*recover.split()[1:])
    assert recovered.code == 0, recovered.output
    assert [k for k in visible_keys(s3_client, bucket, "left/")] == [
        "left/_SUCCESS",
        *sorted(f"left/{n}" for n in files_of(0)),
    ]
    assert pending_uploads(s3_client, bucket) == []
