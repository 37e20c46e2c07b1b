"""A process killed while probing the store for conditional writes leaves nothing behind
once its job ends (issue 36, record integrity).

The probe (:mod:`magicfs.stores.s3.conditional`) creates one multipart upload on a
throw-away key in the job's own tree. A writer process SIGKILLed while that upload is
open leaves it parked: the job's end (abort or commit, from another process) must abort
it with the job's other uploads. The kill is real: the child's probe is held at its
``UploadPart`` by the fault front, at a point drawn at random between the upload's
creation and the part's reply, and the child is killed there.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import data_files, object_keys, pending_uploads
from helpers.polling import wait_until

from magicfs import MagicCommitter
from magicfs.stores.s3.conditional import PROBE_PREFIX

CHILD = textwrap.dedent(
    """
    import json, sys
    from magicfs import MagicCommitter
    spec = json.loads(sys.argv[1])
    committer = MagicCommitter(spec["dest"], job_id=spec["job_id"],
                               storage_options=spec["options"])
    task = committer.task_attempt(0)
    committer.setup_task(task)
    print("writing", flush=True)
    with committer.fs.open(task.path("create-only.csv"), "xb") as f:  # probes first
        f.write(b"never published")
    print("closed", flush=True)
    """
)


@pytest.mark.parametrize("ending", ["abort", "commit"])
def test_a_probe_upload_left_by_a_killed_writer_is_aborted_at_job_end(
    ending, faults_front, s3_client, bucket
):
    options = {**faults_front.storage_options, "skip_instance_cache": True}
    dest = f"s3://{bucket}/out"
    committer = MagicCommitter(dest, storage_options=options)
    committer.setup_job()
    # The probe's part upload is held (the writer's own parts go to other keys).
    held = faults_front.add_rule("UploadPart", "delay", ms=120_000, key=PROBE_PREFIX)
    spec = {"dest": dest, "job_id": committer.job_id, "options": options}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(spec)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "writing"
        probe_uploads = wait_until(
            lambda: [u for u in pending_uploads(s3_client, bucket) if PROBE_PREFIX in u["Key"]],
            "the probe's upload exists",
        )
        wait_until(
            lambda: any(r["id"] == held["id"] and r["matched"] for r in faults_front.rules()),
            "the probe's part is held at the front",
        )
        time.sleep(random.uniform(0, 0.2))  # the kill: any instant while the part is held
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        faults_front.clear()
    assert child.returncode == -signal.SIGKILL
    [probe] = probe_uploads
    assert probe["Key"].startswith(f"out/__magic_job-{committer.job_id}/")

    if ending == "abort":
        committer.abort_job()
    else:
        committer.commit_job([])  # no task reported: the job commits empty
    assert pending_uploads(s3_client, bucket) == []
    leftovers = [k for k in data_files(object_keys(s3_client, bucket)) if k != "out/_SUCCESS"]
    assert leftovers == []
