"""A create-only (``"xb"``) file is published by exactly one job, even where the store's
conditional completion is not atomic.

SeaweedFS 4.48 checks ``If-None-Match: *`` on ``CompleteMultipartUpload`` but not
atomically: two jobs completing one create-only key at the same moment can both succeed
(docs/s3-compatible-stores.md). Ceph RGW 16.2 ignores the condition on the completion,
and the ``HEAD`` before it leaves a window of one round trip (:mod:`.conditional`). Both
check the condition atomically on ``PutObject``. So before it completes a create-only
file, a job claims the file's key: a conditional ``PutObject`` of
``<bucket>/_magicfs/claims/create/<SHA-256 of the key>`` naming its job. Exactly one
job's write succeeds while the claim exists; the others read the claim and fail naming
the file and the holder. The holder completes the file (with the condition, or after
the ``HEAD``, as before) and only then deletes its claim; a job that claims the key
afterwards finds the file there, and its completion (or ``HEAD``) refuses it: the
completions are never at the same moment. Where ``PutObject``'s condition is not
honoured either (the probe tells), no claim is taken and the store's own check is all.

Costs two requests more per create-only file (the claim's PUT and DELETE; one GET more
on a refusal). A job killed between its claim and its delete leaves the claim: a later
job creating that key is refused naming it until the dead job is rolled back
(``abort_job()``, ``magicfs jobs rollback``: roll-back deletes the claims of the files
it takes back) or finished (``magicfs jobs recover``: publishing again finds its own
claim and deletes it).
"""

from __future__ import annotations

import hashlib
import json
import time

from ...names import CREATE_CLAIMS_DIR
from .store import S3Store, error_code

#: How often a claim found gone before it could be read is tried again.
ATTEMPTS = 3
#: The largest claim read back.
MAX_BYTES = 64 * 1024


def claim_key(key: str) -> str:
    """The claim's key for the create-only file at ``key`` (same bucket)."""
    return f"{CREATE_CLAIMS_DIR}/{hashlib.sha256(key.encode()).hexdigest()}"


async def atake(store: S3Store, bucket: str, key: str, job_id: str) -> str | None:
    """Claim ``key`` for ``job_id``: ``None`` once this job holds it (now or from an
    earlier attempt of its commit), else the job id of the holder."""
    record = json.dumps({"jobId": job_id, "key": key, "created": int(time.time() * 1000)})
    for _ in range(ATTEMPTS):
        try:
            await store.aput_object(bucket, claim_key(key), record.encode(), if_none_match=True)
            return None
        except OSError as error:
            if error_code(error) != "PreconditionFailed":
                raise
        holder = await aholder(store, bucket, key)
        if holder is not None:
            return None if holder == job_id else holder
    return await aholder(store, bucket, key) or "<unknown: its claim keeps changing hands>"


async def aholder(store: S3Store, bucket: str, key: str) -> str | None:
    """The job id ``key``'s claim names (``None``: no claim)."""
    try:
        data = await store.aread(bucket, claim_key(key), MAX_BYTES)
    except FileNotFoundError:
        return None
    try:
        job_id = json.loads(data)["jobId"]
    except (ValueError, KeyError, TypeError):
        job_id = None
    return job_id if isinstance(job_id, str) and job_id else "<unknown: unreadable claim>"


async def arelease(store: S3Store, bucket: str, key: str, job_id: str) -> None:
    """Delete ``key``'s claim if ``job_id`` holds it (another job's is kept)."""
    if await aholder(store, bucket, key) == job_id:
        await store.adelete_object(bucket, claim_key(key))
