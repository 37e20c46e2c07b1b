"""ListMultipartUploads in pages, as S3 answers it and moto does not (moto ignores MaxUploads).

A botocore ``before-call`` hook on an s3fs client answers each ListMultipartUploads
itself: it fetches the server's real listing (a plain boto3 client to the same moto
server), orders it as S3 documents (key, then upload id), starts after the request's
``KeyMarker``/``UploadIdMarker`` and returns at most ``page_size`` uploads with
``IsTruncated`` and the next markers. The uploads are real; only the paging is added.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

_PARAMS = "paged-listing-params"


class PagedUploadListing:
    """Attach to ``fs`` (an s3fs filesystem); ``requests`` records each request's markers."""

    def __init__(self, fs: Any, backend: Any, page_size: int):
        self.backend = backend
        self.page_size = page_size
        self.requests: list[tuple[str, str]] = []
        events = fs.s3.meta.events
        events.register("before-parameter-build.s3.ListMultipartUploads", self._remember)
        events.register("before-call.s3.ListMultipartUploads", self._answer)

    @staticmethod
    def _remember(params: dict, context: dict, **kwargs: Any) -> None:
        context[_PARAMS] = dict(params)  # the API parameters, before serialisation

    def _answer(self, context: dict, **kwargs: Any) -> tuple[Any, dict]:
        params = context[_PARAMS]
        key_marker = params.get("KeyMarker") or ""
        id_marker = params.get("UploadIdMarker") or ""
        self.requests.append((key_marker, id_marker))
        listing = self.backend.list_multipart_uploads(
            Bucket=params["Bucket"], Prefix=params.get("Prefix", "")
        )
        uploads = sorted(listing.get("Uploads", []), key=lambda u: (u["Key"], u["UploadId"]))
        if key_marker:
            uploads = [
                u
                for u in uploads
                if u["Key"] > key_marker
                or (id_marker and u["Key"] == key_marker and u["UploadId"] > id_marker)
            ]
        page = uploads[: self.page_size]
        parsed = {
            "Bucket": params["Bucket"],
            "Prefix": params.get("Prefix", ""),
            "KeyMarker": key_marker,
            "UploadIdMarker": id_marker,
            "MaxUploads": self.page_size,
            "IsTruncated": len(uploads) > self.page_size,
            "Uploads": page,
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}},
        }
        if page:
            parsed["NextKeyMarker"] = page[-1]["Key"]
            parsed["NextUploadIdMarker"] = page[-1]["UploadId"]
        return SimpleNamespace(status_code=200, headers={}), parsed
