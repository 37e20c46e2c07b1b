"""Does the store date its uploads? Learned by a probe, never assumed.

An unmarked job (:mod:`.tracking`) finds its uploads by the time ListMultipartUploads
says each was initiated. That needs a store whose ``Initiated`` is its real clock: AWS
and Ceph RGW date each upload; moto (5.x) answers one fixed date of 2010 for every
upload, under which an unmarked job would take every upload for older than itself and
leave its killed writers' uploads parked. So before a job goes unmarked, the store is
asked once per process and (endpoint, bucket):

1. create an upload on a throw-away key in the job's own tree
   (``<magic dir>/_magicfs_clock_probe``);
2. list the uploads on that key: its ``Initiated`` must be within the clock margin of
   the listing's own ``Date`` header (the store's clock; the local clock without one);
3. abort it.

Three requests, once per process and bucket. A probe that fails, or a store whose dates
are off, keeps the job's intent markers (today's behaviour: always safe). A process
killed during the probe leaves the upload on a key the job's sweep always includes
(:data:`PROBE_NAME`), so it is aborted with the job's other uploads.
"""

from __future__ import annotations

import datetime
import email.utils
import logging
from typing import Any

from .store import S3Store

log = logging.getLogger("magicfs.s3.clock")

#: The probe's key, in the job's tree.
PROBE_NAME = "_magicfs_clock_probe"

_DATED: dict[tuple[str, str], bool] = {}


async def adates_uploads(store: S3Store, bucket: str, probe_key: str, margin: float) -> bool:
    """Whether ``bucket``'s store reports real ``Initiated`` times (probed once per process)."""
    cache_key = (_endpoint(store), bucket)
    known = _DATED.get(cache_key)
    if known is not None:
        return known
    try:
        dated = await _aprobe(store, bucket, probe_key, margin)
    except OSError as error:
        log.warning("s3://%s: could not probe the store's upload dates: %s", bucket, error)
        return False  # not kept: a passing fault must not switch markers on for good
    if not dated:
        log.info("s3://%s: the store's upload dates are not its clock: intent markers stay", bucket)
    _DATED[cache_key] = dated
    return dated


async def _aprobe(store: S3Store, bucket: str, key: str, margin: float) -> bool:
    upload_id = await store.acreate_upload(bucket, key, {})
    try:
        page = await store.acall("list_multipart_uploads", Bucket=bucket, Prefix=key)
    finally:
        await store.aabort_upload(bucket, key, upload_id)
    now = _store_time(page)
    listed = [u for u in page.get("Uploads") or [] if u.get("UploadId") == upload_id]
    if not listed or not isinstance(listed[0].get("Initiated"), datetime.datetime):
        return False
    initiated: datetime.datetime = listed[0]["Initiated"]
    return abs((initiated - now).total_seconds()) <= margin


def _store_time(page: dict[str, Any]) -> datetime.datetime:
    """The reply's ``Date`` header (the store's clock), else the local clock."""
    date = (page.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
    if date:
        try:
            return email.utils.parsedate_to_datetime(date)
        except (TypeError, ValueError):
            pass
    return datetime.datetime.now(datetime.UTC)


def _endpoint(store: S3Store) -> str:
    kwargs = getattr(store.fs, "client_kwargs", None) or {}
    return str(kwargs.get("endpoint_url") or getattr(store.fs, "endpoint_url", None) or "aws")
