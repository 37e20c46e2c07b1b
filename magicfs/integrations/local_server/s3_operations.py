"""Which S3 operation a path-style request asks for, by botocore's names: one routing
for the fault front (``tests/helpers/fault_front.py``) and the benchmarks' stub."""

from __future__ import annotations

import urllib.parse
from typing import Any

#: The operations :func:`s3_operation` names (botocore's names); anything else is ``"Other"``.
OPERATIONS = (
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "ListMultipartUploads",
    "ListParts",
    "PutObject",
    "CopyObject",
    "GetObject",
    "HeadObject",
    "DeleteObject",
    "DeleteObjects",
    "ListObjectsV2",
    "ListObjects",
    "HeadBucket",
    "CreateBucket",
    "DeleteBucket",
    "GetBucketLocation",
    "ListBuckets",
    "Other",
)

# Query parameters of a plain GET or HEAD of an object or of a bucket listing: any other
# query parameter names a subresource (``?acl``, ``?tagging``, ...), which is "Other".
_GET_OBJECT_PARAMS = frozenset({"versionId", "partNumber"})
_LIST_OBJECTS_PARAMS = frozenset({"prefix", "delimiter", "marker", "max-keys", "encoding-type"})


def s3_operation(
    method: str, target: str, headers: Any = None
) -> tuple[str, str | None, str | None]:
    """``(operation, bucket, key)`` of a path-style S3 request.

    ``target`` is the request target (``/bucket/key?query``); ``headers`` any mapping
    with ``get`` (only ``x-amz-copy-source`` is consulted). The key is percent-decoded.
    """
    split = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
    # Some SDKs name the operation in ``x-id`` (``?x-id=PutObject``); it is no subresource.
    query.pop("x-id", None)
    params = set(query)
    bucket_part, _, key_part = split.path.lstrip("/").partition("/")
    bucket = urllib.parse.unquote(bucket_part) or None
    key = urllib.parse.unquote(key_part) or None
    method = method.upper()
    copy_source = headers is not None and headers.get("x-amz-copy-source") is not None
    if bucket is None:
        operation = "ListBuckets" if method == "GET" and not params else "Other"
    elif key is None:
        operation = _bucket_operation(method, params, query)
    else:
        operation = _object_operation(method, params, copy_source)
    return operation, bucket, key


def _bucket_operation(method: str, params: set[str], query: dict[str, list[str]]) -> str:
    if method == "GET":
        if "uploads" in params:
            return "ListMultipartUploads"
        if "location" in params:
            return "GetBucketLocation"
        if query.get("list-type") == ["2"]:
            return "ListObjectsV2"
        if params <= _LIST_OBJECTS_PARAMS:
            return "ListObjects"
    elif method == "HEAD" and not params:
        return "HeadBucket"
    elif method == "PUT" and not params:
        return "CreateBucket"
    elif method == "DELETE" and not params:
        return "DeleteBucket"
    elif method == "POST" and "delete" in params:
        return "DeleteObjects"
    return "Other"


def _object_operation(method: str, params: set[str], copy_source: bool) -> str:
    if method == "POST":
        if "uploads" in params:
            return "CreateMultipartUpload"
        if "uploadId" in params:
            return "CompleteMultipartUpload"
    elif method == "PUT":
        if {"partNumber", "uploadId"} <= params:
            return "UploadPartCopy" if copy_source else "UploadPart"
        if not params:
            return "CopyObject" if copy_source else "PutObject"
    elif method == "DELETE":
        if "uploadId" in params:
            return "AbortMultipartUpload"
        if params <= {"versionId"}:
            return "DeleteObject"
    elif method == "GET":
        if "uploadId" in params:
            return "ListParts"
        if all(p in _GET_OBJECT_PARAMS or p.startswith("response-") for p in params):
            return "GetObject"
    elif method == "HEAD" and params <= _GET_OBJECT_PARAMS:
        return "HeadObject"
    return "Other"
