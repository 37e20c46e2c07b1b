"""Renames on GCS without copies where GCS can (``magicfs/stores/gcs_moves.py``).

Real GCS moves an object within a bucket atomically with one request (``moveTo``);
neither emulator has it. A loopback front (``tests/helpers/gcs_front.py``) stands
between gcsfs and an emulator and logs every request: with ``answers_moves`` it answers
``moveTo`` itself, as GCS does (by the emulator's rewrite + delete, out of the client's
sight), so the test sees exactly the requests magicfs sends where the move exists.
Without it the emulator's own refusal reaches magicfs (501 from gcp-storage-emulator,
400 from fake-gcs-server): one probe per bucket, then rewrite + delete, never gcsfs's
half-minute of retries.
"""

from __future__ import annotations

import itertools
import os
import urllib.parse
from collections.abc import Iterator

import gcsfs
import pytest
from helpers import data_files
from helpers.gcs_front import GcsFront

import magicfs
from magicfs.stores.gcs_moves import known_answer
from magicfs.stores.rename import RenameStore

#: Two tasks; names with a space and non-ASCII travel quoted in the move's URL.
TASKS = {
    0: {"a.csv": b"a,1\n" * 100, "year=2024/b.csv": b"b,2\n"},
    1: {"c.csv": b"c,3\n" * 7, "name with space \u00fc.csv": b"\xc3\xbc\n"},
}
FILES = {name: data for files in TASKS.values() for name, data in files.items()}
#: The renames of one job: each file at job commit; records saved under a temporary name
#: and renamed into place: each task's manifest twice (the attempt's, then the task's),
#: ``_SUCCESS``, and the commit journal twice (started, finished).
RENAMES = len(FILES) + 2 * len(TASKS) + 1 + 2

_buckets = itertools.count()
_EMULATORS = {"gcp-storage-emulator": "gcs_server", "fake-gcs-server": "fake_gcs_server"}


@pytest.fixture(params=sorted(_EMULATORS))
def emulator(request):
    """Each GCS emulator (neither has ``moveTo``)."""
    return request.getfixturevalue(_EMULATORS[request.param])


def _front_fs(front: GcsFront) -> gcsfs.GCSFileSystem:
    return gcsfs.GCSFileSystem(skip_instance_cache=True, **front.storage_options)


def _bucket(fs: gcsfs.GCSFileSystem) -> Iterator[str]:
    name = f"moves-{os.getpid()}-{next(_buckets)}"
    fs.mkdir(name)
    yield name
    fs.invalidate_cache()
    fs.rm(name, recursive=True)


def run_job(fs: gcsfs.GCSFileSystem, dest: str) -> None:
    """A manifest job writing :data:`TASKS`, committed."""
    with magicfs.write_job(dest, fs=fs, committer="manifest") as job:
        for index, files in TASKS.items():
            with job.task(index) as task:
                for name, data in files.items():
                    job.fs.pipe_file(task.path(name), data)


def moved_files(front: GcsFront, dest: str) -> list[str]:
    """The visible files under ``dest`` (a key prefix) that ``moveTo`` requests named."""
    found = []
    for seen in front.log:
        if seen.operation == "moveTo":
            target = urllib.parse.unquote(urllib.parse.urlsplit(seen.path).path.split("/o/")[-1])
            relative = target.removeprefix(dest + "/")
            if relative != target and not relative.startswith("_"):
                found.append(relative)
    return sorted(found)


def published(fs: gcsfs.GCSFileSystem, root: str) -> dict[str, bytes]:
    """Every file under ``root`` but ``_SUCCESS``, with its bytes; the temporary tree is gone."""
    fs.invalidate_cache()
    found = sorted(data_files(fs.find(root)))
    assert f"{root}/_SUCCESS" in found
    assert not any("/_temporary" in path for path in found)
    return {p[len(root) + 1 :]: fs.cat_file(p) for p in found if not p.endswith("/_SUCCESS")}


def test_where_gcs_moves_each_rename_is_one_move_and_nothing_is_copied(gcs_server):
    with GcsFront(gcs_server.endpoint_url, answers_moves=True) as front:
        fs = _front_fs(front)
        for bucket in _bucket(fs):
            run_job(fs, f"gs://{bucket}/out")

            assert published(fs, f"{bucket}/out") == FILES
            assert front.count("rewriteTo") == 0  # no byte copied by magicfs
            moves = [seen.status for seen in front.log if seen.operation == "moveTo"]
            assert moves == [200] * RENAMES  # one request per rename, the probe included
            assert moved_files(front, "out") == sorted(FILES)  # each file moved once
            assert known_answer(fs.base, bucket) is True

            front.clear()  # a second job in the bucket: no probe, moves straight away
            run_job(fs, f"gs://{bucket}/again")
            assert published(fs, f"{bucket}/again") == FILES
            assert (front.count("moveTo"), front.count("rewriteTo")) == (RENAMES, 0)


def test_without_moves_one_probe_then_rewrite_and_delete(emulator):
    """Eight rename threads race for the first rename: one probe is sent, the emulator
    refuses it once (no retries), and every rename copies and deletes."""
    refusal = 501 if emulator.name == "gcp-storage-emulator" else 400
    with GcsFront(emulator.endpoint_url) as front:
        fs = _front_fs(front)
        for bucket in _bucket(fs):
            run_job(fs, f"gs://{bucket}/out")

            assert published(fs, f"{bucket}/out") == FILES
            moves = [seen.status for seen in front.log if seen.operation == "moveTo"]
            assert moves == [refusal]  # the probe, sent once, never retried
            assert front.count("rewriteTo") == RENAMES  # the probe's file copied too
            assert known_answer(fs.base, bucket) is False

            front.clear()  # the answer is kept: the next job does not ask again
            run_job(fs, f"gs://{bucket}/again")
            assert published(fs, f"{bucket}/again") == FILES
            assert (front.count("moveTo"), front.count("rewriteTo")) == (0, RENAMES)


def test_on_each_emulator_directly_the_job_commits_by_copy(emulator):
    """No front: gcsfs talks to the emulator itself, and the job commits."""
    fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **emulator.storage_options)
    for bucket in _bucket(fs):
        run_job(fs, f"gs://{bucket}/out")
        assert published(fs, f"{bucket}/out") == FILES
        assert known_answer(fs.base, bucket) is False


def test_a_probe_failing_otherwise_decides_nothing(gcs_server):
    """A 503 to the first probe: that file is copied, and the next rename probes again
    and finds the move."""
    with GcsFront(gcs_server.endpoint_url, answers_moves=True, fail_moves=1) as front:
        fs = _front_fs(front)
        for bucket in _bucket(fs):
            run_job(fs, f"gs://{bucket}/out")

            assert published(fs, f"{bucket}/out") == FILES
            moves = [seen.status for seen in front.log if seen.operation == "moveTo"]
            assert moves == [503] + [200] * (RENAMES - 1)
            assert front.count("rewriteTo") == 1
            assert known_answer(fs.base, bucket) is True


def test_moving_a_missing_file_raises_file_not_found_and_decides_nothing(gcs_server):
    with GcsFront(gcs_server.endpoint_url, answers_moves=True) as front:
        fs = _front_fs(front)
        for bucket in _bucket(fs):
            store = RenameStore(fs)
            with pytest.raises(FileNotFoundError):
                store.rename(f"{bucket}/missing.csv", f"{bucket}/there.csv")
            renames = ("moveTo", "rewriteTo", "delete")
            sent = [(s.operation, s.status) for s in front.log if s.operation in renames]
            assert sent == [("moveTo", 404)]  # the probe only: no copy of nothing tried
            assert known_answer(fs.base, bucket) is None
            assert fs.ls(bucket, refresh=True) == []
