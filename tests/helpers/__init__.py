"""Helpers shared by tests: observing the bucket, completing uploads as another process would."""

from __future__ import annotations

import json
from collections import Counter


def job_record(path) -> bool:
    """``path`` (relative to a destination, a key, a ``Path`` or a URL) is a destination's job
    commit record or its directory (``<dest>/_magicfs/jobs/``): kept after every commit
    by design (``docs/readers.md``). Not the claims beside it (``_magicfs/claims/``): a
    claim left behind is a leftover the tests must see."""
    wrapped = "/" + str(path).rstrip("/") + "/"
    return "/_magicfs/jobs/" in wrapped or wrapped.endswith("/_magicfs/")


def data_files(paths):
    """``paths`` (a listing of a destination, in its order) without the job commit records:
    what a test that checks the data, or that nothing else is left, compares."""
    return [p for p in paths if not job_record(p)]


def pending_uploads(client, bucket: str, prefix: str = "") -> list[dict]:
    """The multipart uploads waiting in ``bucket`` (key, upload id)."""
    response = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    return [{"Key": u["Key"], "UploadId": u["UploadId"]} for u in response.get("Uploads", [])]


def object_keys(client, bucket: str, prefix: str = "") -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return sorted(keys)


def visible_keys(client, bucket: str, prefix: str = "") -> list[str]:
    """Object keys outside any magic directory and the destinations' job commit records
    (``_magicfs/``): the output and its ``_SUCCESS``, what a reader of the output sees."""
    return [k for k in data_files(object_keys(client, bucket, prefix)) if "/__magic" not in f"/{k}"]


def complete_from_pending(client, pending_json: bytes | str) -> None:
    """Complete an upload from nothing but its ``.pending`` JSON, with plain boto3."""
    pending = json.loads(pending_json)
    client.complete_multipart_upload(
        Bucket=pending["bucket"],
        Key=pending["destinationKey"],
        UploadId=pending["uploadId"],
        MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(pending["etags"], 1)]
        },
    )


def as_another_process(committer, task) -> None:
    """Forget what this process knows of ``task``'s files, as a task commit elsewhere would.

    Waits for the files' background closes first: their records are then on the store.
    """
    from magicfs.task_files import TASK_FILES

    TASK_FILES.settle(committer.job_id, task.attempt_id)
    for entry in TASK_FILES.of_attempt(committer.job_id, task.attempt_id):
        TASK_FILES.discarded(entry.path)


class Calls:
    """Every S3 call an s3fs instance sends: (operation, key)."""

    def __init__(self, fs) -> None:
        self.made: list[tuple[str, str]] = []
        fs.s3.meta.events.register("provide-client-params.s3.*", self._record)

    def _record(self, params, model, **_) -> None:
        self.made.append((model.name, params.get("Key") or params.get("Prefix") or ""))

    def clear(self) -> None:
        self.made.clear()

    def counts(self) -> Counter:
        return Counter(op for op, _ in self.made)


def tamper_record(fs, message, change, carried: bool = True):
    """Apply ``change`` to the task record ``message`` names, as saved (through ``fs``);
    returns the message the job is then given: carrying the tampered record where the
    message carries one (``carried``), or none, so that the job reads the store's."""
    import dataclasses

    document = json.loads(fs.cat_file(message.record))
    change(document)
    fs.pipe_file(message.record, json.dumps(document).encode())
    if not carried or message.record_json is None:
        return dataclasses.replace(message, record_json=None)
    return dataclasses.replace(message, record_json=json.dumps(document))
