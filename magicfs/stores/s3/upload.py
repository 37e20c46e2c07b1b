"""Uploading a local file as a multipart upload that is left for job commit to complete.

The staging committers' task commit: the file already sits on local disk, so it is read
in parts and uploaded, and the upload is recorded as a :class:`SinglePendingCommit`
instead of being completed. Any failure aborts the upload before raising. With a
``checksum`` algorithm, the upload declares it, each part carries its checksum, and the
record keeps them for job commit (:mod:`.checksums`), as the magic writer's do.
"""

from __future__ import annotations

import os

from ...records import SinglePendingCommit, path_to_uri
from . import checksums as part_checksums
from .body import PartBody
from .store import S3Store


def upload_pending(
    store: S3Store,
    local_path: str,
    bucket: str,
    key: str,
    *,
    part_size: int = 8 << 20,
    text: str = "",
    metadata: dict[str, str] | None = None,
    checksum: str | None = part_checksums.DEFAULT_ALGORITHM,
) -> SinglePendingCommit:
    """Upload ``local_path`` to ``bucket/key`` without completing it (empty files: one part).

    ``metadata`` goes on the upload, and so on the object it becomes: the committers put
    the job id there, which is how a retried or rolled-back commit knows its own files.
    """
    upload_id = store.run(store.acreate_upload(bucket, key, metadata, checksum))
    try:
        etags: list[str] = []
        sums: list[str] = []
        with open(local_path, "rb") as source:
            while True:
                chunk = source.read(part_size)
                if not chunk and etags:
                    break
                if checksum:
                    sums.append(part_checksums.compute(checksum, chunk))
                sent = (checksum, sums[-1]) if checksum else None
                number = len(etags) + 1
                body = PartBody([chunk])  # sent without a copy on the IO loop
                part = store.run(store.aupload_part(bucket, key, upload_id, number, body, sent))
                etags.append(part["ETag"])
                if len(chunk) < part_size:
                    break
    except BaseException:
        store.run(store.aabort_upload(bucket, key, upload_id))
        raise
    return SinglePendingCommit(
        uri=path_to_uri(f"s3://{bucket}/{key}"),
        upload_id=upload_id,
        bucket=bucket,
        destination_key=key,
        etags=etags,
        length=os.path.getsize(local_path),
        text=text,
        extra_data=part_checksums.record_fields(checksum, sums) if checksum else {},
    )
