"""`magicfs jobs list` from any prefix above a job's destination finds the job, in requests
bounded by the number of jobs, never by the files (issue 35, item 4).

Each job writes an entry in its bucket's job index at set-up, alongside its job marker
(`<bucket>/__magicfs_jobs/<destination key>/<job id>.json`), and its clean-up deletes it
with the last batch of its tree; `find_jobs(prefix)` lists the index below the prefix and
describes each job from its own tree. Local disks have no bucket: a walk of directories.

Per store: moto and Ceph RGW (S3), Azurite (Azure block lists), the GCS emulator and a
local disk (manifest committer). What is asserted is what the store holds (objects, the
index's entries), what `find_jobs` and `magicfs jobs list` answer, and which requests
were sent (botocore's hooks on S3, an Azure SDK pipeline policy that only records).
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from azure.core.pipeline.policies import AsyncHTTPPolicy
from fsspec.implementations.local import LocalFileSystem
from helpers import data_files
from helpers.faults import Faults, s3_error

import magicfs
from magicfs.committers import jobs as jobs_module
from magicfs.committers.jobs import find_jobs
from magicfs.integrations.cli import main
from magicfs.names import JOURNAL_FILE as JOURNAL

INDEX = "__magicfs_jobs"
#: Where the three jobs write: the bucket's root, two levels down, four levels down.
DESTINATIONS = ["", "deep/out", "a/b/c/out"]


@dataclass
class Store:
    """One store under test: its filesystem, the URL of its bucket's root (a directory on
    a local disk), and how to see every object it holds."""

    name: str
    fs: Any
    root: str  # a URL, no trailing "/"

    def url(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def committer(self, key: str, **options: Any) -> magicfs.OutputCommitter:
        return magicfs.committer_for(self.url(key), fs=self.fs, **options)

    @property
    def base(self) -> str:
        """The root as the filesystem names it (bucket, or directory path)."""
        return self.fs._strip_protocol(self.root)

    def objects(self, prefix: str = "") -> list[str]:
        """Every file below ``prefix`` (bucket-relative), fresh from the store."""
        self.fs.invalidate_cache()
        top = f"{self.base}/{prefix}".rstrip("/")
        try:
            found = self.fs.find(top, detail=True)
        except FileNotFoundError:
            return []
        # (SeaweedFS keeps a directory its last file left: find() names it, as a directory)
        files = [path for path, info in found.items() if info.get("type") != "directory"]
        return sorted(data_files(path[len(self.base) + 1 :] for path in files))

    def index(self) -> list[str]:
        return self.objects(INDEX)

    def put(self, files: dict[str, bytes]) -> None:
        """Write plain files (data of earlier jobs), many at once."""
        paths = {f"{self.base}/{key}": data for key, data in files.items()}
        if self.name == "local":
            for path, data in paths.items():
                self.fs.makedirs(self.fs._parent(path), exist_ok=True)
                self.fs.pipe_file(path, data)
        else:
            self.fs.pipe(paths)
        self.fs.invalidate_cache()


STORES = ["s3", "rgw", "azure", "gcs", "local"]
INDEXED = ["s3", "rgw", "azure", "gcs"]


@pytest.fixture
def store(request, tmp_path) -> Store:
    name = request.param
    if name == "s3":
        return Store(
            name, request.getfixturevalue("s3"), f"s3://{request.getfixturevalue('bucket')}"
        )
    if name == "rgw":
        bucket = request.getfixturevalue("rgw_bucket")
        return Store(name, request.getfixturevalue("rgw_s3"), f"s3://{bucket}")
    if name == "seaweed":
        bucket = request.getfixturevalue("seaweed_bucket")
        return Store(name, request.getfixturevalue("seaweed_s3"), f"s3://{bucket}")
    if name == "azure":
        container = request.getfixturevalue("azure_container")
        return Store(name, request.getfixturevalue("abfs"), f"abfs://{container}")
    if name == "gcs":
        return Store(
            name, request.getfixturevalue("gcs"), f"gs://{request.getfixturevalue('gcs_bucket')}"
        )
    root = tmp_path / "data"
    root.mkdir()
    return Store(name, LocalFileSystem(), f"file://{root}")


def run_one_task(committer: magicfs.OutputCommitter, name: str) -> magicfs.TaskCommitMessage:
    """Set the job up and commit one task writing ``name``; the job stays active."""
    committer.setup_job()
    with committer.attempt(0) as task:
        committer.fs.pipe_file(task.path(name), f"data of {committer.job_id}".encode())
    return task.message


def active_jobs(store: Store) -> list[magicfs.OutputCommitter]:
    """One active job (a committed task) at each of :data:`DESTINATIONS`."""
    jobs = [store.committer(key) for key in DESTINATIONS]
    for job in jobs:
        run_one_task(job, "part-0.csv")
    return jobs


def found(store: Store, prefix: str) -> list[tuple[str, str, str, int]]:
    """What ``find_jobs(prefix)`` answers: (destination, job id, state, task records)."""
    return [
        (j.destination, j.job_id, j.state, j.task_records)
        for j in find_jobs(store.url(prefix), fs=store.fs)
    ]


def described(jobs: list[magicfs.OutputCommitter], state: str = "active") -> list[tuple]:
    """What ``found`` should answer for ``jobs``: sorted by destination, as it sorts."""
    ordered = sorted(jobs, key=lambda job: (job.dest, job.job_id))
    return [(job.url, job.job_id, state, 1) for job in ordered]


# --- every job below any prefix, on every store ---------------------------------------------


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_jobs_at_every_depth_are_found_from_every_prefix_above_them(store):
    root_job, deep, nested = jobs = active_jobs(store)
    if store.name != "local":  # one entry per job, keyed by its destination
        assert store.index() == sorted(
            f"{INDEX}/{key + '/' if key else ''}{job.job_id}.json"
            for key, job in zip(DESTINATIONS, jobs, strict=True)
        )
        entry = json.loads(store.fs.cat_file(f"{store.base}/{INDEX}/deep/out/{deep.job_id}.json"))
        assert (entry["jobId"], entry["committer"], entry["destination"]) == (
            deep.job_id,
            deep.name,
            deep.url,
        )
    assert found(store, "") == described(jobs)
    assert found(store, "deep") == described([deep])
    assert found(store, "deep/out") == described([deep])
    assert found(store, "a") == found(store, "a/b/c") == described([nested])
    # A prefix that is a string prefix of a path, not a path prefix, is not above it.
    assert found(store, "dee") == found(store, "a/b/c/ou") == found(store, "deep/o") == []

    deep.commit_job()
    nested.abort_job()
    assert found(store, "") == described([root_job])
    root_job.abort_job()
    assert found(store, "") == []
    assert store.index() == []  # every entry went with its job's tree
    assert [k for k in store.objects() if "__magic_job-" in k or "_temporary" in k] == []


@pytest.mark.parametrize("store", ["s3", "local"], indirect=True)
def test_the_bucket_root_is_named_with_or_without_its_slash(store):
    jobs = active_jobs(store)
    as_given = [j.job_id for j in find_jobs(store.root + "/", fs=store.fs)]
    assert as_given == [j.job_id for j in find_jobs(store.root, fs=store.fs)]
    assert sorted(as_given) == sorted(j.job_id for j in jobs)
    for job in jobs:
        job.abort_job()


def cli_list(store: Store, prefix: str, *options: str) -> str:
    """``magicfs jobs list`` of ``prefix``, through the store's own filesystem."""
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        code = _cli(store, ["jobs", "list", *options, store.url(prefix)])
    assert code == 0, out.getvalue()
    return out.getvalue()


def _cli(store: Store, argv: list[str]) -> int:
    """Run the CLI with the store's options (an S3 store's endpoint and keys)."""
    if store.name in ("s3", "rgw"):
        client = store.fs.client_kwargs
        argv[2:2] = [
            "--endpoint-url",
            client["endpoint_url"],
            "-o",
            f"key={store.fs.key}",
            "-o",
            f"secret={store.fs.secret}",
        ]
    return main(argv)


@pytest.mark.parametrize("store", ["s3", "local"], indirect=True)
def test_jobs_list_prints_each_job_s_destination_and_command(store, capsys):
    jobs = active_jobs(store)
    out = cli_list(store, "")
    assert out.startswith(f"Jobs under {store.root}: 3\n")
    for job in sorted(jobs, key=lambda j: j.dest):
        assert f"      destination: {job.url}\n" in out
        # the command recommended for an active job names its own destination
        assert f"      magicfs jobs rollback --job {job.job_id} {job.url}    # " in out
    document = json.loads(cli_list(store, "", "--json"))
    assert document["destination"] == store.root
    assert [(j["jobId"], j["destination"]) for j in document["jobs"]] == [
        (job.job_id, job.url) for job in sorted(jobs, key=lambda j: j.dest)
    ]
    for job in jobs:
        job.abort_job()
    assert cli_list(store, "") == f"Jobs under {store.root}: none\n"


# --- the index is a pointer: the tree is the truth ---------------------------------------------


@pytest.mark.parametrize("store", INDEXED, indirect=True)
def test_an_index_entry_whose_job_left_nothing_lists_no_job(store, caplog):
    (deep,) = [store.committer("deep/out")]
    run_one_task(deep, "part-0.csv")
    # An entry that outlived its job: the tree deleted by hand (an operator's "rm -r"),
    # and one written for a job that never was.
    gone = store.committer("gone/out")
    gone.setup_job()
    store.fs.rm(f"{store.base}/gone/out", recursive=True)
    store.put({f"{INDEX}/never/there/ghost-1.json": b'{"committer": "magic"}'})
    assert len(store.index()) == 3
    with caplog.at_level(logging.INFO, logger="magicfs.jobs"):
        assert found(store, "") == described([deep])
    stale = [r.getMessage() for r in caplog.records if "left nothing" in r.getMessage()]
    assert len(stale) == 2 and any(gone.job_id in m for m in stale)
    assert any("ghost-1" in m for m in stale)
    # A job whose marker is gone but whose tree remains is listed: it needs a clean-up.
    deep.flow.end_job(check=False)
    assert found(store, "deep") == [(deep.url, deep.job_id, "ended", 1)]
    deep.abort_job()
    gone.abort_job()  # its clean-up deletes its stale entry
    assert store.index() == [f"{INDEX}/never/there/ghost-1.json"]


@pytest.mark.parametrize("store", INDEXED, indirect=True)
def test_a_job_without_an_index_entry_is_found_at_its_own_destination(store):
    """Jobs of Hadoop or of an older magicfs have no entry: the destination's own listing
    still finds them; from a prefix above, only the index does."""
    job = store.committer("deep/out")
    run_one_task(job, "part-0.csv")
    entry = f"{INDEX}/deep/out/{job.job_id}.json"
    assert store.index() == [entry]
    store.fs.rm_file(f"{store.base}/{entry}")
    assert found(store, "deep/out") == described([job])
    assert found(store, "deep") == []
    job.commit_job()
    assert found(store, "deep/out") == []


# --- bounded: requests follow the jobs, not the files -------------------------------------------


class S3Requests:
    """Every S3 request an s3fs filesystem sends, with its parameters (botocore's hook)."""

    def __init__(self, fs: Any):
        self.sent: list[tuple[str, dict[str, Any]]] = []
        fs.s3.meta.events.register("before-parameter-build.s3", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.sent.append((model.name, dict(params)))

    def counts(self) -> Counter[str]:
        return Counter(operation for operation, _ in self.sent)


class AzureRequests(AsyncHTTPPolicy):
    """An Azure SDK pipeline policy that records each request (method, path, query) and
    sends it on unchanged."""

    def __init__(self, fs: Any):
        super().__init__()
        self.sent: list[tuple[str, str, dict[str, str]]] = []
        policies = fs.service_client._pipeline._impl_policies  # the SDK's per-client chain
        self.next = policies[0]
        policies.insert(0, self)

    async def send(self, request):
        url = urllib.parse.urlsplit(request.http_request.url)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.sent.append((request.http_request.method, url.path, query))
        return await self.next.send(request)


def many_files(count: int) -> dict[str, bytes]:
    """Data of earlier jobs: half at the root, the rest below the jobs' destinations."""
    half = count // 2
    files = {f"part-{n:05d}.csv": b"x" for n in range(half)}
    files |= {f"deep/out/old-{n:05d}.csv": b"x" for n in range(half // 2)}
    files |= {f"a/b/c/out/year={n % 7}/old-{n:05d}.csv": b"x" for n in range(count - len(files))}
    return files


def _allowed(prefix: str, jobs: list[magicfs.OutputCommitter]) -> bool:
    """A listing of the index, or of a job's own state at its destination: never of data."""
    if prefix.startswith(INDEX + "/"):
        return True
    bases = [f"{job.flow.dest_key}/" if job.flow.dest_key else "" for job in jobs]
    return any(prefix.startswith((f"{b}__magic_job-", f"{b}_temporary")) for b in bases)


@pytest.mark.parametrize("store", ["s3", "rgw", "azure"], indirect=True)
def test_finding_jobs_costs_requests_by_jobs_not_by_files(store):
    jobs = active_jobs(store)
    recorder = AzureRequests(store.fs) if store.name == "azure" else S3Requests(store.fs)

    def requests_of_find() -> tuple[Any, list[str]]:
        start = len(recorder.sent)
        assert [j.job_id for j in find_jobs(store.root, fs=store.fs)] == [
            j.job_id for j in sorted(jobs, key=lambda job: job.dest)
        ]
        sent = recorder.sent[start:]
        recorder.sent[start:] = []
        return len(sent), sent

    among_none, _ = requests_of_find()
    # Azure lists 5,000 names a page: there the count cannot tell, the prefixes do.
    store.put(many_files(500 if store.name == "azure" else 2000))
    among_many, second = requests_of_find()
    assert among_many == among_none  # 2,000 files more: not one request more
    if store.name != "azure":
        # The root's trees, the index (one page), then per job: its entry, journal and
        # marker (GETs) and its task records (a listing).
        assert Counter(op for op, _ in second) == {"ListObjectsV2": 2 + 3, "GetObject": 3 * 3}
        prefixes = [p.get("Prefix", "") for op, p in second if op == "ListObjectsV2"]
    else:
        prefixes = [q.get("prefix", "") for _, _, q in second if q.get("comp") == "list"]
    assert prefixes and all(_allowed(p, jobs) for p in prefixes), prefixes
    for job in jobs:
        job.abort_job()


# --- set-up and clean-up: the entry costs no round trip --------------------------------------


def test_setup_writes_the_entry_alongside_the_job_marker(fault_front, s3_client, bucket):
    """The entry's PUT is sent while the marker's is: here the marker's PUT fails, yet
    the entry's was sent. Set-up's requests: the old _SUCCESS's delete, the marker, the
    entry, then the intent-marker decision (two listings, the uploads' snapshot, the
    unmarked record)."""
    import s3fs

    from magicfs.stores.s3.retry import RetryPolicy

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **fault_front.storage_options)
    committer = magicfs.committer_for(
        f"s3://{bucket}/out", fs=fs, retry_policy=RetryPolicy(attempts=1)
    )
    fault_front.add_rule("PutObject", "500", key=r"_magicfs_job\.json$")
    entry_rule = fault_front.add_rule("PutObject", "delay", ms=0, key=rf"^{INDEX}/")
    with pytest.raises(OSError, match=r"_magicfs_job\.json"):
        committer.setup_job()
    assert [r["fired"] for r in fault_front.rules() if r["id"] == entry_rule["id"]] == [1]
    fault_front.clear()
    recorder = S3Requests(fs)
    committer.setup_job()
    assert recorder.counts() == {
        "DeleteObjects": 1,
        "PutObject": 3,
        "ListObjectsV2": 2,
        "ListMultipartUploads": 1,
    }
    marker = f"out/__magic_job-{committer.job_id}/_magicfs_job.json"
    entry = f"{INDEX}/out/{committer.job_id}.json"
    assert sorted(p["Key"] for op, p in recorder.sent[:3] if op == "PutObject") == [entry, marker]
    committer.abort_job()


@pytest.mark.parametrize("store", ["s3", "rgw", "seaweed"], indirect=True)
@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_clean_up_lists_the_tree_once_and_deletes_it_in_order(store, ending):
    """One listing serves the uploads sweep and the deletes. The journal goes last and
    the job's mode (its unmarked record) not after it; the task records go after the
    files and the mode has a batch of its own, except once the journal says committed (a
    retried commit then reads only the journal): then the whole small tree goes in one
    DeleteObjects, which a crash leaves whole or gone."""
    job = store.committer("out")
    message = run_one_task(job, "part-0.csv")
    tree = f"out/__magic_job-{job.job_id}/"
    # The file's .pending, unless its task's commit was already waiting for its close.
    files = [k.rsplit("/", 1)[-1] for k in store.objects() if k.endswith(".pending")]
    recorder = S3Requests(store.fs)
    job.commit_job([message]) if ending == "commit" else job.abort_job()
    listings = [p for op, p in recorder.sent if op == "ListObjectsV2"]
    assert [p["Prefix"] for p in listings if p["Prefix"].startswith(tree)] == [tree]
    batches = [
        sorted(o["Key"].rsplit("/", 1)[-1] for o in p["Delete"]["Objects"])
        for op, p in recorder.sent
        if op == "DeleteObjects" and any(o["Key"].startswith(tree) for o in p["Delete"]["Objects"])
    ]
    attempt = f"attempt_{job.job_id}_0000_m_000000_0"
    records = [f"{attempt}.pendingset"]
    entry = f"{job.job_id}.json"  # the job's index entry goes with the tree's last batch
    if ending == "commit":  # one request, the tree's directories with it (SeaweedFS keeps them)
        directories = [f"__magic_job-{job.job_id}", f"job-{job.job_id}", "00", "tasks"]
        directories += [attempt, "__base"] if files else []  # where the file left a record
        tree_keys = [*files, *records, "_magicfs_unmarked", JOURNAL, entry, *directories]
        expected = [sorted(tree_keys)]
    else:  # no journal: the job's mode is the last rank
        expected = [b for b in (files, records, sorted(["_magicfs_unmarked", entry])) if b]
    assert batches == expected
    uploads = store.fs.call_s3("list_multipart_uploads", Bucket=store.base).get("Uploads", [])
    assert store.index() == [] and uploads == []
    assert store.objects() == (["out/_SUCCESS", "out/part-0.csv"] if ending == "commit" else [])


@pytest.mark.parametrize("store", ["s3", "rgw", "seaweed"], indirect=True)
@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "in-memory"])
def test_a_committed_job_leaves_no_tree_for_the_next_job_to_count(store, in_memory):
    """SeaweedFS keeps a directory its last object left: the committed job's clean-up
    deletes its tree's directories with its files, or the next job on the destination
    would count an empty ``__magic_job-<id>/`` as another job's tree and write intent
    markers (one PUT per file more)."""
    for _ in range(2):
        job = store.committer("out", in_memory=in_memory)
        message = run_one_task(job, "part-0.csv")
        assert job.flow.store_hooks.unmarked  # alone on its destination: nothing left before it
        job.commit_job([message])
        listed = store.fs.call_s3(
            "list_objects_v2", Bucket=store.base, Prefix="out/__magic_job-", Delimiter="/"
        )
        assert listed.get("CommonPrefixes", []) == [] and listed.get("Contents", []) == []
    assert store.objects() == ["out/_SUCCESS", "out/part-0.csv"]


@pytest.mark.parametrize("store", ["s3", "rgw", "seaweed"], indirect=True)
def test_clean_up_deletes_the_entry_in_the_tree_s_last_batch(store):
    job = store.committer("out")
    message = run_one_task(job, "part-0.csv")
    recorder = S3Requests(store.fs)
    job.commit_job([message])
    deletes = [p["Delete"]["Objects"] for op, p in recorder.sent if op == "DeleteObjects"]
    last = [o["Key"] for o in deletes[-1]]
    # The journal and the entry go in one request: the tree's last batch.
    assert f"{INDEX}/out/{job.job_id}.json" in last
    assert f"out/__magic_job-{job.job_id}/_magicfs_commit.json" in last
    entry_deletes = [
        batch for batch in deletes if any(o["Key"].startswith(f"{INDEX}/") for o in batch)
    ]
    assert len(entry_deletes) == 1 and len(entry_deletes[0]) > 1  # never a request of its own
    assert recorder.counts().get("DeleteObject", 0) == 1  # the job marker, as before
    assert store.index() == [] and store.objects() == ["out/_SUCCESS", "out/part-0.csv"]


def test_an_empty_tree_s_clean_up_still_deletes_the_entry(azure_container, abfs):
    """Azure: a job set up and aborted with no task leaves an empty tree once its marker
    is gone; its entry is deleted all the same."""
    store = Store("azure", abfs, f"abfs://{azure_container}")
    job = store.committer("out")
    job.setup_job()
    assert store.index() == [f"{INDEX}/out/{job.job_id}.json"]
    job.abort_job()
    assert store.index() == [] and store.objects() == []


# --- an index write refused: the job goes on ----------------------------------------------------


def _team_policy(bucket: str, user: str) -> str:
    """A bucket policy for a team whose rights stop at ``team/``: it may list the bucket
    (the committer looks for other jobs' trees above its destination) and do anything
    below ``team/``, nothing elsewhere."""
    principal = {"AWS": [f"arn:aws:iam:::user/{user}"]}
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": principal,
                    # RGW checks a multi-object delete's right on the bucket first,
                    # then on each key (AWS: on each key only).
                    "Action": [
                        "s3:ListBucket",
                        "s3:ListBucketMultipartUploads",
                        "s3:DeleteObject",
                    ],
                    "Resource": [f"arn:aws:s3:::{bucket}"],
                },
                {
                    "Effect": "Allow",
                    "Principal": principal,
                    "Action": [
                        "s3:GetObject",
                        "s3:PutObject",
                        "s3:DeleteObject",
                        "s3:AbortMultipartUpload",
                        "s3:ListMultipartUploadParts",
                    ],
                    "Resource": [f"arn:aws:s3:::{bucket}/team/*"],
                },
            ],
        }
    )


def test_a_user_who_may_not_write_the_index_runs_jobs_all_the_same(
    rgw_server, rgw_client, rgw_bucket, rgw_s3, caplog
):
    """Ceph RGW, a second user confined to ``team/`` by a bucket policy: the entry's PUT
    and its delete are refused (AccessDenied, the latter per key inside the tree's last
    DeleteObjects). Each job commits exactly, its tree goes, one warning per process and
    bucket says why the job is found only from its destination."""
    import s3fs

    user = f"team-{uuid.uuid4().hex[:8]}"
    options = rgw_server.create_user(user, f"{user}-access", f"{user}-secret")
    rgw_client.put_bucket_policy(Bucket=rgw_bucket, Policy=_team_policy(rgw_bucket, user))
    team = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    with pytest.raises(PermissionError):
        team.pipe_file(f"{rgw_bucket}/{INDEX}/probe.json", b"{}")  # the policy holds

    with caplog.at_level(logging.INFO, logger="magicfs.job_index"):
        for n in range(2):
            job = magicfs.committer_for(f"s3://{rgw_bucket}/team/out{n}", fs=team)
            message = run_one_task(job, "part-0.csv")
            assert [j.job_id for j in find_jobs(job.url, fs=team)] == [job.job_id]
            assert find_jobs(f"s3://{rgw_bucket}", fs=rgw_s3) == []  # no entry: not from above
            job.commit_job([message])
    told = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "magicfs.job_index"]
    assert [level for level, _ in told] == [logging.WARNING, logging.INFO], told
    assert "could not be saved" in told[0][1] and "from its destination" in told[0][1]
    assert "could not be deleted" in told[1][1]  # the tree's last batch, sent again without it
    listed = rgw_client.list_objects_v2(Bucket=rgw_bucket)["Contents"]
    keys = sorted(data_files(o["Key"] for o in listed))
    assert keys == [f"team/out{n}/{name}" for n in range(2) for name in ("_SUCCESS", "part-0.csv")]


def test_a_refused_entry_delete_fails_no_clean_up(s3, bucket, caplog):
    """moto, the refusals injected at the client: the entry's PUT, and the DeleteObjects
    that carries the entry (the whole request refused). The job commits, its tree goes:
    the last batch is sent again without the entry."""
    faults = Faults(s3)
    refused = lambda operation: lambda: s3_error("AccessDenied", operation)  # noqa: E731
    faults.fail(
        "DeleteObjects",
        when=lambda p: any(o["Key"].startswith(f"{INDEX}/") for o in p["Delete"]["Objects"]),
        error=refused("DeleteObjects"),
    )
    store = Store("s3", s3, f"s3://{bucket}")
    job = store.committer("out")
    message = run_one_task(job, "part-0.csv")
    assert store.index() == [f"{INDEX}/out/{job.job_id}.json"]
    with caplog.at_level(logging.DEBUG, logger="magicfs.job_index"):
        job.commit_job([message])
    assert [k for k in store.objects() if "__magic_job-" in k] == []
    assert store.objects() == [f"{INDEX}/out/{job.job_id}.json", "out/_SUCCESS", "out/part-0.csv"]
    assert any("could not be deleted" in r.getMessage() for r in caplog.records)
    assert found(store, "") == []  # the entry stays, and lists no job


# --- readers skip the index -------------------------------------------------------------------


def test_a_dataset_at_the_bucket_root_reads_exactly_with_the_index_present(s3, bucket):
    store = Store("s3", s3, f"s3://{bucket}")
    tables = [pa.table({"n": list(range(k * 10, k * 10 + 10))}) for k in range(2)]
    for k, table in enumerate(tables):
        with s3.open(f"{bucket}/part-{k}.parquet", "wb") as f:
            pq.write_table(table, f)
    job = store.committer("deep/out")
    run_one_task(job, "part-9.parquet")
    assert store.index() == [f"{INDEX}/deep/out/{job.job_id}.json"]
    dataset = ds.dataset(bucket, format="parquet", filesystem=s3)
    assert sorted(dataset.files) == [f"{bucket}/part-0.parquet", f"{bucket}/part-1.parquet"]
    assert sorted(dataset.to_table().column("n").to_pylist()) == list(range(20))
    job.abort_job()


@pytest.mark.parametrize("mode", ["fail", "replace"])
def test_conflict_modes_at_the_bucket_root_leave_the_index_alone(s3, bucket, mode):
    """The index is not data: ``fail`` at the root does not see it, ``replace`` does not
    delete it."""
    store = Store("s3", s3, f"s3://{bucket}")
    entry = f"{INDEX}/elsewhere/ghost-1.json"
    store.put({entry: b"{}", **({"old.csv": b"old"} if mode == "replace" else {})})
    job = store.committer("", conflict_mode=mode)
    message = run_one_task(job, "new.csv")
    # fail: checked again at commit, with the job's own entry and another in the index.
    assert store.index() == sorted([entry, f"{INDEX}/{job.job_id}.json"])
    job.commit_job([message])
    assert store.objects() == sorted([entry, "_SUCCESS", "new.csv"])


# --- local disks: a walk, bounded ---------------------------------------------------------------


def test_a_local_walk_refuses_past_its_limit_rather_than_answer_for_part(tmp_path, monkeypatch):
    store = Store("local", LocalFileSystem(), f"file://{tmp_path}")
    for n in range(5):
        (tmp_path / f"d{n}").mkdir()
    job = store.committer("d4/out")
    run_one_task(job, "part-0.csv")
    assert found(store, "") == described([job])
    monkeypatch.setattr(jobs_module, "WALK_LIMIT", 4)
    with pytest.raises(OSError, match=r"more than 4 directories below .*closer to"):
        find_jobs(store.root, fs=store.fs)
    assert found(store, "d4") == described([job])  # closer: within the limit
    job.abort_job()
