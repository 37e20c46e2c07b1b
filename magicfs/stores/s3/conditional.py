"""Does the store honour ``If-None-Match: *``? Learned by a probe, never assumed.

A file opened ``xb`` (or written with ``pipe_file(..., mode="create")``) must never
replace an object. magicfs asks the store for that with ``If-None-Match: *`` in two
places: the writer's intent marker (``PutObject``: a second writer of the same task
path gets ``FileExistsError``) and job commit's ``CompleteMultipartUpload`` (the
destination must still be free; the record says which files ask it:
:mod:`magicfs.stores.create_only`). AWS honours both (completions since August 2024), and
so does moto; Ceph RGW 16.2 honours ``PutObject``'s but completes the upload anyway
and **replaces** the object; other S3-compatible stores may ignore or refuse either.

**The probe.** The first time a process needs one of these conditions on a bucket, it
tries them on a throw-away key in the job's own hidden tree (``<magic dir>/
_magicfs_probe-<uuid>``) and cleans up at once:

1. PUT the key; PUT it again with ``If-None-Match: *``: honoured if refused with 412;
2. create an upload on the same key, upload one part, complete it with
   ``If-None-Match: *``: honoured if refused with 412 (the upload is then aborted);
3. DELETE the key.

Seven requests (six when the completion is not honoured), paid once per process per
(endpoint, bucket), only by a process that writes or commits an ``xb`` file; the answer
is kept for the life of the process. A probe that fails (no permission, store down)
counts as "not honoured" for the files that asked (safe, though the fallback's HEAD
leaves the race window below), and is kept only for :data:`FAILED_PROBE_TTL` seconds: a
passing fault must not turn an atomic condition into HEAD-then-write for good.
A process killed during the probe leaves one small object in the job's tree (deleted
with it by the job's clean-up) and possibly one upload on it, which the job's sweep
aborts with its others (:func:`.sweep.sweep_job`: every upload inside the job's own
tree is the job's).

**The fallback** where a condition is not honoured: HEAD the key just before the write
and refuse if something is there, naming the file and the store's limitation. One HEAD
more per ``xb`` file on such a store. It leaves a race window: an object created by
someone else between the HEAD and the write (a few milliseconds, one round trip) is
still replaced. Only a store that honours the condition closes it.

Where ``PutObject``'s condition is honoured, a job also claims each create-only name
with a conditional ``PutObject`` before completing it (:mod:`.create_claims`), which
closes the HEAD's window and SeaweedFS's non-atomic completions between jobs; a
``conflict_mode="fail"`` job claims its destination the same way
(:mod:`magicfs.stores.claims`). Nothing else in magicfs relies on a conditional write:
the job marker, the records, the journal and ``_SUCCESS`` are written by the one process
that owns them (the driver, or the task attempt) and replacing them is intended; the
zombie check reads the job marker (HEAD) after the upload exists and does not write.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass

from . import checksums
from .store import S3Store, error_code

log = logging.getLogger("magicfs.s3.conditional")

#: What magicfs sends to ask for "only if nothing is there".
IF_NONE_MATCH = "*"
PROBE_PREFIX = "_magicfs_probe-"


@dataclass(frozen=True)
class ConditionalSupport:
    """What a probe learnt about one (endpoint, bucket)."""

    #: ``PutObject`` with ``If-None-Match: *`` is refused (412) when the key exists.
    put: bool
    #: ``CompleteMultipartUpload`` with ``If-None-Match: *`` is refused likewise.
    complete: bool
    #: What the probe saw, for messages (``"... answered 200 and replaced the object"``).
    detail: str
    #: The probe ran to its end (``False``: it failed, and nothing was learnt).
    probed: bool = True

    def limitation(self, operation: str) -> str:
        """Why magicfs checks with HEAD before ``operation`` on this store."""
        return (
            f"this store does not honour If-None-Match on {operation} ({self.detail}), so "
            "magicfs checked with HEAD just before"
        )


#: How long a failed probe's "not honoured" stands before the next file probes again.
FAILED_PROBE_TTL = 60.0

#: (endpoint, bucket) -> what was learnt, and until when (``None``: for good).
_LEARNT: dict[tuple[str, str], tuple[ConditionalSupport, float | None]] = {}
_PROBING: dict[tuple[int, str, str], asyncio.Future[ConditionalSupport]] = {}


async def aendpoint(store: S3Store) -> str:
    """The endpoint ``store``'s client talks to (``""`` for AWS's own)."""
    client = await store.fs.set_session()
    return str(getattr(client.meta, "endpoint_url", "") or "")


async def aconditional_support(store: S3Store, bucket: str, scratch_dir: str) -> ConditionalSupport:
    """What ``bucket``'s store honours, probed once per process (see the module docs).

    ``scratch_dir`` (``bucket/key``) is where the probe may write its throw-away key:
    the job's own hidden tree. Concurrent callers share one probe.
    """
    endpoint = await aendpoint(store)
    known = _LEARNT.get((endpoint, bucket))
    if known is not None and (known[1] is None or time.monotonic() < known[1]):
        return known[0]
    running = (id(asyncio.get_running_loop()), endpoint, bucket)
    probe = _PROBING.get(running)
    if probe is None:
        probe = _PROBING[running] = asyncio.ensure_future(_aprobe(store, bucket, scratch_dir))
        probe.add_done_callback(lambda _: _PROBING.pop(running, None))
    support = await asyncio.shield(probe)
    expires = None if support.probed else time.monotonic() + FAILED_PROBE_TTL
    _LEARNT[(endpoint, bucket)] = (support, expires)
    return support


async def _aprobe(store: S3Store, bucket: str, scratch_dir: str) -> ConditionalSupport:
    scratch_bucket, prefix = store.split(scratch_dir)
    if scratch_bucket != bucket:  # a job whose records live in another bucket
        prefix = ""
    key = f"{prefix.rstrip('/')}/{PROBE_PREFIX}{uuid.uuid4().hex}".lstrip("/")
    where = f"s3://{bucket}/{key}"
    try:
        header = await checksums.aheader(store.fs, b"probe")  # as every write: see there
        await store.acall("put_object", Bucket=bucket, Key=key, Body=b"probe", **header)
        try:
            put_outcome, put_detail = await _aoutcome(
                store.acall(
                    "put_object",
                    Bucket=bucket,
                    Key=key,
                    Body=b"probe",
                    IfNoneMatch=IF_NONE_MATCH,
                    **header,
                )
            )
            complete, complete_detail = await _aprobe_completion(store, bucket, key)
        finally:
            await store.acall("delete_object", Bucket=bucket, Key=key)
    except Exception as error:  # the fallback is always safe: only a HEAD more per file
        log.warning(
            "could not probe s3://%s for conditional writes (%s: %s): files opened 'xb' "
            "are checked with HEAD before they are written",
            bucket,
            type(error).__name__,
            error,
        )
        detail = f"the probe at {where} failed: {type(error).__name__}: {error}"
        return ConditionalSupport(put=False, complete=False, detail=detail, probed=False)
    support = ConditionalSupport(
        put_outcome == "refused",
        complete,
        f"PutObject: {put_detail}; CompleteMultipartUpload: {complete_detail}",
    )
    level = logging.INFO if support.put and support.complete else logging.WARNING
    log.log(level, "conditional writes on s3://%s: %s", bucket, support.detail)
    return support


async def _aprobe_completion(store: S3Store, bucket: str, key: str) -> tuple[bool, str]:
    upload = await store.acall("create_multipart_upload", Bucket=bucket, Key=key)
    upload_id = upload["UploadId"]
    try:
        part = await store.acall(
            "upload_part",
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=1,
            Body=b"x",
            **await checksums.aheader(store.fs, b"x"),
        )
        outcome, detail = await _aoutcome(
            store.acall(
                "complete_multipart_upload",
                Bucket=bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
                IfNoneMatch=IF_NONE_MATCH,
            )
        )
    except BaseException:
        await store.aabort_upload(bucket, key, upload_id)
        raise
    if outcome != "replaced":
        await store.aabort_upload(bucket, key, upload_id)  # a refusal leaves it open
    return outcome == "refused", detail


async def _aoutcome(call: Awaitable[object]) -> tuple[str, str]:
    """What a conditional request on an existing key did: ``refused`` (412, as asked),
    ``failed`` (another error) or ``replaced``; and a sentence saying so."""
    try:
        await call
    except OSError as error:
        code = error_code(error)
        if code == "PreconditionFailed":
            return "refused", "refused with 412 PreconditionFailed, as asked"
        return "failed", f"failed with {code or type(error).__name__} instead of 412"
    return "replaced", "answered 200 and replaced the existing object"
