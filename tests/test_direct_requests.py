"""The small requests' direct way (magicfs.stores.s3.direct) sends what the client sends,
reads the answer as the client reads it, and hands every doubt back to the client.

Each request is sent twice on each store, once through ``S3Store.acall`` (the direct way)
and once through s3fs's ``_call_s3`` (the client's way), and compared: the request on
the wire (method, URL, headers, body, seen by botocore's ``before-send`` event, which both
ways emit), the parsed answer, the error raised. Failures come from the fault front
between the client and the store.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import botocore
import botocore.compat
import pytest
import s3fs
from helpers.s3_targets import S3_TARGETS, S3Target, s3_target, store_fixture
from packaging.version import Version

from magicfs.errors import StoreCallError
from magicfs.stores.s3.body import PartBody, digest
from magicfs.stores.s3.direct import SERVED
from magicfs.stores.s3.retry import RetryPolicy
from magicfs.stores.s3.store import S3Store, error_code

#: Headers that differ between two sendings of the same request by design.
VOLATILE = {"authorization", "x-amz-date", "user-agent", "amz-sdk-invocation-id", "amz-sdk-request"}
#: Answer fields that differ between two sendings (times, the upload each one made).
VOLATILE_FIELDS = {
    "ResponseMetadata",
    "LastModified",
    "Initiated",
    "UploadId",
    "Body",
    "Expiration",
}


@pytest.fixture(params=S3_TARGETS)
def target(request: Any) -> S3Target:
    return s3_target(request)


#: The signers botocore may use here: its own always; the CRT's where awscrt is installed
#: (the ``test`` extra brings it, and ``test_checksums`` fails without it; the core
#: suite's environments install ``test-core`` only, the default install of users).
SIGNERS = ["botocore-signer"] + (["crt-signer"] if botocore.compat.HAS_CRT else [])


@pytest.fixture(params=SIGNERS)
def signer(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Who signs S3 requests: with awscrt installed (``botocore[crt]``, which the test
    extra and many company images install) botocore signs S3 with ``CrtS3SigV4Auth``,
    which hashes the payload itself; without it, with ``S3SigV4Auth``, whose payload
    hash the direct way supplies for a part whose writer computed it."""
    import botocore.auth

    if request.param == "botocore-signer":
        monkeypatch.setitem(botocore.auth.AUTH_TYPE_MAPS, "s3v4", botocore.auth.S3SigV4Auth)
    else:
        from botocore.crt.auth import CrtS3SigV4Auth

        assert botocore.auth.AUTH_TYPE_MAPS["s3v4"] is CrtS3SigV4Auth
    return str(request.param)


class Wire:
    """Every request an s3fs client puts on the wire (botocore's ``before-send``)."""

    def __init__(self, fs: Any) -> None:
        self.sent: list[tuple[str, str, dict[str, str], bytes]] = []
        fs.s3.meta.events.register("before-send.s3", self._record)

    def _record(self, request: Any, **_: Any) -> None:
        body = request.body if isinstance(request.body, bytes) else b""
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in VOLATILE}
        self.sent.append((request.method, request.url, headers, body))


def new_store(options: dict[str, Any], **extra: Any) -> S3Store:
    store = S3Store(s3fs.S3FileSystem(skip_instance_cache=True, **options, **extra))
    store.run(store.fs.set_session())
    return store


def via_client(store: S3Store, operation: str, **params: Any) -> dict[str, Any]:
    return store.run(store.fs._call_s3(operation, **params))


def via_direct(store: S3Store, operation: str, **params: Any) -> dict[str, Any]:
    before = store.direct.sent
    answer = store.run(store.acall(operation, **params))
    assert store.direct.sent == before + 1, f"{operation} did not go the direct way"
    return answer


def comparable(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer without what differs between two sendings (nested lists included)."""
    out: dict[str, Any] = {}
    for key, value in answer.items():
        if key in VOLATILE_FIELDS:
            continue
        if isinstance(value, list):  # (in the order the store chose: RGW's deletes vary)
            value = sorted(repr(comparable(v) if isinstance(v, dict) else v) for v in value)
        out[key] = value
    return out


def both_ways(store: S3Store, wire: Wire, operation: str, **params: Any) -> dict[str, Any]:
    """``operation`` sent the client's way then the direct way: the same request on the
    wire and the same answer; returns the direct way's answer."""
    wire.sent.clear()
    expected = via_client(store, operation, **params)
    if "Body" in expected:
        expected["Body"] = store.run(expected["Body"].read())
    client_request = wire.sent[-1]
    wire.sent.clear()
    answer = via_direct(store, operation, **params)
    if "Body" in answer:
        answer["Body"] = store.run(answer["Body"].read())
    assert wire.sent == [client_request]
    assert comparable(answer) == comparable(expected)
    assert answer.get("Body") == expected.get("Body")
    return answer


def test_each_served_request_is_sent_and_read_as_the_client_sends_and_reads_it(target, signer):
    store = new_store(target.options)
    wire = Wire(store.fs)
    bucket, record = target.bucket, b'{"record": "\xc3\xa9"}' * 20
    names = ["out/a b/\u00e9+%.json", "out/x.json"]
    served: set[str] = set()

    def send(operation: str, **params: Any) -> dict[str, Any]:
        served.add(operation)
        return both_ways(store, wire, operation, Bucket=bucket, **params)

    for name in names:
        send("put_object", Key=name, Body=record)
    assert send("head_object", Key=names[0])["ContentLength"] == len(record)
    assert send("get_object", Key=names[0])["Body"] == record
    assert send("get_object", Key=names[1], Range="bytes=0-9")["Body"] == record[:10]
    listed = send("list_objects_v2", Prefix="out/")
    assert [c["Key"] for c in listed["Contents"]] == sorted(names)  # URL-decoded, as botocore
    # Each sending makes its own upload: compared on a fresh one each time.
    upload = store.run(store.acall("create_multipart_upload", Bucket=bucket, Key="out/big"))
    assert send("list_multipart_uploads", Prefix="out/")["Uploads"][0]["Key"] == "out/big"
    # A part: sent both ways on an upload of its own (SeaweedFS lists a part sent twice
    # twice), then once the direct way on out/big.
    twice = store.run(store.acall("create_multipart_upload", Bucket=bucket, Key="out/twice"))
    part_params = {"Key": "out/twice", "UploadId": twice["UploadId"], "PartNumber": 1}
    sent = store.direct.sent
    store.run(store.acall("upload_part", Bucket=bucket, **part_params, Body=PartBody([b"x"])))
    assert store.direct.sent == sent  # a part without its hash: the client's way
    body = PartBody([b"p" * 60, memoryview(b"q" * 40)])  # as a writer hands its pieces
    body.sha256 = digest(body)  # as its writer computes it, over plain HTTP
    send("upload_part", **part_params, Body=body)
    signed = hashlib.sha256(b"p" * 60 + b"q" * 40).hexdigest().encode()
    assert wire.sent[0][2]["x-amz-content-sha256"] == signed
    store.run(
        store.acall(
            "abort_multipart_upload", Bucket=bucket, Key="out/twice", UploadId=twice["UploadId"]
        )
    )
    part = via_direct(
        store,
        "upload_part",
        Bucket=bucket,
        Key="out/big",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=body,
    )
    listed_parts = send("list_parts", Key="out/big", UploadId=upload["UploadId"])
    assert [p["ETag"] for p in listed_parts["Parts"]] == [part["ETag"]]
    done = via_direct(
        store,
        "complete_multipart_upload",
        Bucket=bucket,
        Key="out/big",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    served |= {"create_multipart_upload", "complete_multipart_upload"}
    assert target.body("out/big") == b"p" * 60 + b"q" * 40 and done["Key"] == "out/big"
    other = store.run(store.acall("create_multipart_upload", Bucket=bucket, Key="out/other"))
    via_direct(
        store, "abort_multipart_upload", Bucket=bucket, Key="out/other", UploadId=other["UploadId"]
    )
    served.add("abort_multipart_upload")
    deleted = send("delete_objects", Delete={"Objects": [{"Key": k} for k in names]})
    assert sorted(d["Key"] for d in deleted["Deleted"]) == sorted(names)
    send("delete_object", Key="out/big")
    assert sorted(target.client.list_objects_v2(Bucket=bucket).get("Contents", [])) == []
    assert {store.fs.s3.meta.method_to_api_mapping[m] for m in served} == SERVED
    assert store.direct.handed_back == 0


def test_final_errors_are_raised_as_the_client_raises_them(target):
    store = new_store(target.options)
    bucket = target.bucket
    target.client.put_object(Bucket=bucket, Key="taken", Body=b"x")
    cases = [
        ("head_object", {"Key": "missing"}),
        ("get_object", {"Key": "missing"}),
        ("list_parts", {"Key": "k", "UploadId": "no-such-upload"}),
        ("put_object", {"Key": "taken", "Body": b"y", "IfNoneMatch": "*"}),
        ("get_object", {"Key": "empty", "Range": "bytes=0-10"}),
    ]
    target.client.put_object(Bucket=bucket, Key="empty", Body=b"")
    for operation, params in cases:
        with pytest.raises(OSError) as by_client:
            via_client(store, operation, Bucket=bucket, **params)
        sent = store.direct.sent
        with pytest.raises(StoreCallError) as by_direct:
            store.run(store.acall(operation, Bucket=bucket, **params))
        assert store.direct.sent == sent + 1  # answered the direct way, not sent twice
        assert type(by_direct.value.__cause__) is type(by_client.value)
        assert error_code(by_direct.value) == error_code(by_client.value)
        assert str(by_client.value) in str(by_direct.value.__cause__)
    assert target.body("taken") == b"x"
    assert store.run(store.aread(bucket, "empty", 10)) == b""  # its InvalidRange read as such
    assert store.direct.handed_back == 0


def test_options_of_the_filesystem_reach_the_wire(target):
    """s3fs's ``requester_pays`` and ``s3_additional_kwargs`` (encryption) are added as the
    client adds them. (Ceph RGW 16.2 refuses SSE-S3 without a key server configured: the
    encryption is asked on the other stores only.)"""
    encrypt = target.name != "rgw"
    extra = {"ServerSideEncryption": "AES256"} if encrypt else {}
    store = new_store({**target.options, "requester_pays": True, "s3_additional_kwargs": extra})
    wire = Wire(store.fs)
    answer = both_ways(store, wire, "put_object", Bucket=target.bucket, Key="enc", Body=b"e")
    put_headers = wire.sent[0][2]
    both_ways(store, wire, "head_object", Bucket=target.bucket, Key="enc")
    # both_ways compared the two ways' wire on every release; the header itself is s3fs's
    # to add, which it does on these requests from 2026.9 (earlier: on neither way).
    if Version(s3fs.__version__) >= Version("2026.9.0"):
        assert put_headers["x-amz-request-payer"] == b"requester"
        assert wire.sent[0][2]["x-amz-request-payer"] == b"requester"
    if encrypt:
        assert answer["ServerSideEncryption"] == "AES256"
        assert put_headers["x-amz-server-side-encryption"] == b"AES256"


@pytest.mark.parametrize("event", ["before-sign", "request-created", "needs-retry"])
def test_a_hook_on_a_replaced_step_sees_every_request(s3_server, bucket, event):
    """A handler of anyone but botocore on an event the direct way does not emit sends the
    operation the client's way, from its registration to its removal."""
    store = new_store(dict(s3_server.storage_options))
    seen: list[str] = []

    def hook(**kwargs: Any) -> None:
        seen.append(event)

    via_direct(store, "put_object", Bucket=bucket, Key="k", Body=b"1")
    store.fs.s3.meta.events.register(f"{event}.s3.PutObject", hook)
    sent = store.direct.sent
    for _ in range(3):
        store.run(store.acall("put_object", Bucket=bucket, Key="k", Body=b"2"))
    store.run(store.acall("head_object", Bucket=bucket, Key="k"))  # not hooked: direct
    assert store.direct.sent == sent + 1
    assert len(seen) >= 3
    store.fs.s3.meta.events.unregister(f"{event}.s3.PutObject", hook)
    via_direct(store, "put_object", Bucket=bucket, Key="k", Body=b"3")


def test_clients_that_do_not_sign_with_sigv4_go_the_clients_way(s3_server, bucket):
    """Anonymous access (no signature at all) is the client's."""
    store = new_store(dict(s3_server.storage_options), anon=True)
    with pytest.raises(StoreCallError):
        store.run(store.acall("head_object", Bucket=bucket, Key="missing"))
    assert store.direct.sent == 0


@pytest.fixture(params=S3_TARGETS)
def fronted(request: Any) -> Iterator[tuple[S3Target, Any]]:
    """A target whose requests go through its fault front."""
    target = s3_target(request)
    front = store_fixture(request, request.param, "front")
    front.clear()
    options = {**target.options, **front.storage_options}
    yield S3Target(target.name, options, target.client, target.bucket, target.server), front
    front.clear()


@pytest.mark.parametrize(
    ("action", "operation", "method", "params"),
    [
        ("500", "PutObject", "put_object", {"Key": "k", "Body": b"data"}),
        ("503", "HeadObject", "head_object", {"Key": "k"}),
        ("reset-before", "GetObject", "get_object", {"Key": "k"}),
        ("500-after", "DeleteObject", "delete_object", {"Key": "gone"}),
    ],
)
def test_an_attempt_that_fails_is_sent_again_the_clients_way(
    fronted, action, operation, method, params
):
    target, front = fronted
    target.client.put_object(Bucket=target.bucket, Key="k", Body=b"data")
    store = new_store(target.options)
    store.run(store.acall("list_objects_v2", Bucket=target.bucket))  # connected, answered
    front.add_rule(operation, action, count=1)
    answer = store.run(store.acall(method, Bucket=target.bucket, **params))
    if "Body" in answer:
        assert store.run(answer["Body"].read()) == b"data"
    stats = front.stats()[operation]
    assert stats == {"requests": 2, "faults": {action: 1}}
    # aiohttp itself sends a GET again on a connection reset before any answer
    assert store.direct.handed_back == (0 if action == "reset-before" else 1)
    assert store.throttled == (1 if action == "503" else 0)
    assert target.body("k") == b"data"


def test_a_client_configured_for_one_attempt_sends_a_failing_request_once(fronted):
    """The direct attempt is the client's first: with no attempt left in the client's
    retry configuration, its error is raised as the client's way raises it, after one
    request, not sent again."""
    target, front = fronted
    one_attempt = {"retries": {"total_max_attempts": 1, "mode": "standard"}}
    store = new_store({**target.options, "config_kwargs": one_attempt})
    store.fs.retries = 1  # s3fs's own repeats of a SlowDown: none
    store.policy = RetryPolicy(attempts=1)  # magicfs's own: one call
    store.run(store.acall("list_objects_v2", Bucket=target.bucket))  # connected, answered
    for way in ("client", "direct"):
        front.clear()
        front.add_rule("PutObject", "500", count=1)
        with pytest.raises(OSError) as raised:
            if way == "client":
                via_client(store, "put_object", Bucket=target.bucket, Key="k", Body=b"1")
            else:
                store.run(store.acall("put_object", Bucket=target.bucket, Key="k", Body=b"1"))
        assert error_code(raised.value) == "InternalError"
        assert front.stats()["PutObject"] == {"requests": 1, "faults": {"500": 1}}, way
    assert store.direct.handed_back == 0
    via_direct(store, "put_object", Bucket=target.bucket, Key="k", Body=b"2")
    assert target.body("k") == b"2"


def test_a_connection_lost_with_no_attempt_left_is_raised_after_one_request(fronted):
    """A reset before any answer, on a request neither aiohttp nor botocore nor s3fs (one
    attempt each) sends again: raised, as the client's way raises it, after one request."""
    target, front = fronted
    one_attempt = {"retries": {"total_max_attempts": 1, "mode": "standard"}}
    store = new_store({**target.options, "config_kwargs": one_attempt})
    store.fs.retries = 1
    store.policy = RetryPolicy(attempts=1)
    target.client.put_object(Bucket=target.bucket, Key="k", Body=b"1")
    params = {"Bucket": target.bucket, "Delete": {"Objects": [{"Key": "k"}]}}
    causes = []
    for way in ("client", "direct"):
        front.clear()
        front.add_rule("DeleteObjects", "reset-before", count=1)
        with pytest.raises(Exception) as raised:
            if way == "client":
                via_client(store, "delete_objects", **params)
            else:
                store.run(store.acall("delete_objects", **params))
        error = raised.value
        for _ in range(4):  # magicfs's and s3fs's wrappers, to botocore's
            assert error.__cause__ is not error, "an exception caused by itself"
            error = error.__cause__ or error
        causes.append(type(error))
        assert front.stats()["DeleteObjects"]["requests"] == 1, way
    assert causes[0] is causes[1] and issubclass(causes[0], botocore.exceptions.ConnectionError)
    assert store.direct.handed_back == 0
    assert target.body("k") == b"1"


def test_an_error_botocore_does_not_retry_goes_out_once(fronted):
    """A refusal botocore does not send again (a completion naming a part never
    uploaded) is raised after one request either way, with the same error."""
    target, front = fronted
    store = new_store(target.options)
    upload = store.run(store.acall("create_multipart_upload", Bucket=target.bucket, Key="big"))
    params = {
        "Bucket": target.bucket,
        "Key": "big",
        "UploadId": upload["UploadId"],
        "MultipartUpload": {"Parts": [{"PartNumber": 1, "ETag": '"0123456789abcdef"'}]},
    }
    errors = []
    for way in ("client", "direct"):
        front.clear()
        with pytest.raises(OSError) as raised:
            if way == "client":
                via_client(store, "complete_multipart_upload", **params)
            else:
                store.run(store.acall("complete_multipart_upload", **params))
        errors.append(error_code(raised.value))
        assert front.stats()["CompleteMultipartUpload"]["requests"] == 1, way
    assert errors[0] == errors[1] and errors[0]
    assert store.direct.handed_back == 0
    store.run(store.acall("abort_multipart_upload", **{k: params[k] for k in list(params)[:3]}))


def test_a_200_carrying_an_error_is_sent_again_the_clients_way(fronted):
    target, front = fronted
    store = new_store(target.options)
    upload = store.run(store.acall("create_multipart_upload", Bucket=target.bucket, Key="big"))
    part = store.run(
        store.acall(
            "upload_part",
            Bucket=target.bucket,
            Key="big",
            UploadId=upload["UploadId"],
            PartNumber=1,
            Body=b"b" * 10,
        )
    )
    front.add_rule("CompleteMultipartUpload", "error-200", count=1)
    store.run(
        store.acall(
            "complete_multipart_upload",
            Bucket=target.bucket,
            Key="big",
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        )
    )
    assert front.stats()["CompleteMultipartUpload"]["requests"] == 2
    assert store.direct.handed_back == 1
    assert target.body("big") == b"b" * 10


def test_the_endpoint_rules_read_only_the_bucket_of_a_request():
    """The direct way resolves an endpoint once per bucket and operation: botocore's S3
    rules must not read the other parameters they are given (the key, the prefix)."""
    root = pathlib.Path(botocore.__file__).parent / "data" / "s3"
    path = next(root.glob("*/endpoint-rule-set-1.json*"))
    text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    rules = json.dumps(json.loads(text)["rules"])
    assert '"ref": "Bucket"' in rules
    for parameter in ("Key", "Prefix", "CopySource"):
        assert f'"ref": "{parameter}"' not in rules


def test_jobs_sharing_a_client_all_go_the_direct_way_and_add_no_handlers(s3_server, bucket):
    """Each job makes its own store over the process's one filesystem (fsspec's cache):
    every job's small requests go the direct way, and the client keeps one reply watch
    and one body rewind however many jobs ran, showing replies to the live jobs only."""
    import gc

    from magicfs.stores.s3 import rate

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options)
    counts = []
    for n in range(4):
        store = S3Store(fs)
        via_direct(store, "put_object", Bucket=bucket, Key=f"k{n}", Body=b"1")
        handlers = fs.s3.meta.events._emitter._handlers
        counts.append(
            [
                len(handlers.prefix_search(f"{event}.s3.PutObject"))
                for event in ("needs-retry", "before-parameter-build")
            ]
        )
        del store
        gc.collect()
        assert len(rate._WATCHES[fs.s3]) == 0  # the job's store is gone: so is its watch
    assert counts == [counts[0]] * 4


def test_a_writers_parts_go_the_direct_way_signed_with_the_hash_it_computed(
    s3_server, bucket, signer
):
    """Over plain HTTP a writer computes each part's SHA-256 with its checksum, off the
    IO loop, and the part goes the direct way signed with it: no retry bookkeeping
    headers (the direct way's), and the hash on the wire that of the part's bytes."""
    import magicfs

    storage = {**s3_server.storage_options, "skip_instance_cache": True}
    committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=storage)
    seen: list[tuple[str, bool]] = []

    def record(request: Any, **_: Any) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        signed = headers["x-amz-content-sha256"]
        signed = signed.decode() if isinstance(signed, bytes) else signed
        seen.append((signed, "amz-sdk-invocation-id" in headers))

    committer.store_fs.s3.meta.events.register("before-send.s3.UploadPart", record)
    committer.setup_job()
    attempt = committer.task_attempt(0)
    committer.setup_task(attempt)
    data = [bytes([n]) * (1 << 20) for n in range(17)]  # 17 MiB: parts of 8, 8 and 1
    with committer.fs.open(attempt.path("big.bin"), "wb") as f:
        for piece in data:
            f.write(piece)
    committer.commit_job([committer.commit_task(attempt)])
    blob = b"".join(data)
    parts = [blob[: 8 << 20], blob[8 << 20 : 16 << 20], blob[16 << 20 :]]
    assert sorted(seen) == sorted((hashlib.sha256(p).hexdigest(), False) for p in parts)
    assert committer.store_fs.cat_file(f"{bucket}/out/big.bin") == blob


class _RenamedSigner:
    """The client's request signer with ``_signature_version`` renamed, as a botocore
    release could: everything else is the signer's own (the client signs through the
    handler it registered, bound to the signer itself)."""

    def __init__(self, signer: Any) -> None:
        self._signer = signer

    def __getattr__(self, name: str) -> Any:
        if name == "_signature_version":
            raise AttributeError(name)
        return getattr(self._signer, name)


def _without_user_agent_flag(client: Any) -> None:
    """``_convert_to_request_dict`` without its ``set_user_agent_header`` parameter (the
    client never passes it; the direct way does)."""
    original = client._convert_to_request_dict

    async def changed(api_params, operation_model, endpoint_url, context, headers):
        return await original(
            api_params=api_params,
            operation_model=operation_model,
            endpoint_url=endpoint_url,
            context=context,
            headers=headers,
        )

    client._convert_to_request_dict = changed


def _renamed_signer_attribute(client: Any) -> None:
    client._request_signer = _RenamedSigner(client._request_signer)


@pytest.mark.parametrize(
    "change",
    [_without_user_agent_flag, _renamed_signer_attribute],
    ids=["a-parameter-removed", "an-attribute-renamed"],
)
def test_a_changed_internal_sends_requests_the_clients_way(s3_server, bucket, change, caplog):
    """An internal of the client that is there but not as the direct way expects (another
    signature, an attribute renamed) is not the store's answer: the request is sent the
    client's way, once on the wire, and succeeds; the client's later requests go the
    client's way too, and one warning names the versions."""
    store = new_store(s3_server.storage_options)
    client = store.run(store.fs.get_s3(bucket))
    change(client)
    wire = Wire(store.fs)
    with caplog.at_level("WARNING", logger="magicfs.s3.direct"):
        store.run(store.acall("put_object", Bucket=bucket, Key="k", Body=b"data"))
        answer = store.run(store.acall("head_object", Bucket=bucket, Key="k"))
    assert store.direct.sent == 0
    assert [(method, url.rsplit("/", 1)[1]) for method, url, _, _ in wire.sent] == [
        ("PUT", "k"),
        ("HEAD", "k"),
    ]
    assert answer["ContentLength"] == 4
    assert s3_server.boto3_client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"
    warnings = [r.getMessage() for r in caplog.records if r.name == "magicfs.s3.direct"]
    assert len(warnings) == 1
    assert f"botocore {botocore.__version__}" in warnings[0]


def test_an_unchanged_client_goes_the_direct_way(s3_server, bucket):
    """The counterpart of the test above: the same requests on an untouched client go the
    direct way (so the test above sees the change, not a client that was never direct)."""
    store = new_store(s3_server.storage_options)
    via_direct(store, "put_object", Bucket=bucket, Key="k", Body=b"data")
    via_direct(store, "head_object", Bucket=bucket, Key="k")
