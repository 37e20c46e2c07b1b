"""Checksums of deferred files, end to end: computed by the writer, checked by the store.

A direct upload is protected by a checksum the store verifies; a deferred file is as
well protected when its upload declares an algorithm (``CreateMultipartUpload``'s
``ChecksumAlgorithm``), each part carries its checksum (the store refuses a part whose
bytes do not match: ``BadDigest``), the ``.pending`` record keeps the parts' checksums,
and job commit passes them to ``CompleteMultipartUpload``, so the store checks that
what it assembles is what the writer wrote.

**The record.** Hadoop's ``SinglePendingCommit.extraData`` is a map of strings, so the
checksums travel there and Hadoop still reads the record:

* ``magicfs.checksum.algorithm``: ``CRC32`` (the algorithm's S3 name);
* ``magicfs.checksum.parts``: the parts' checksums, base64, comma-separated, in order;
* ``magicfs.checksum.object``: the object's checksum as S3 reports a multipart object
  (the algorithm over the parts' concatenated digests, then ``-<parts>``).

Task commit declares the algorithm in the pendingset's own extraData when every file of
the attempt carries it (:func:`magicfs.records.pending.declared_checksums`), so a record
stripped of these three keys is refused at job commit instead of passing for a record
written without checksums (Hadoop's declare nothing and still commit).

Before anything is published, each record is checked (:func:`check_record`): one
checksum per part, each of the algorithm's size, and the parts agreeing with the
object's. A record whose checksums were edited fails there, naming the file and the
field; a store that verifies checksums (AWS) also refuses a completion whose part
checksums do not match the parts it holds, and where the completion's reply reports
the object's checksum it must be the record's (:func:`check_reply`).

**The algorithm** (the ``checksum`` option): ``CRC32`` by default, because botocore
computes it without extra dependencies. ``CRC32C`` and ``CRC64NVME`` need botocore's
CRT extension (``pip install 'botocore[crt]'``); ``SHA1`` and ``SHA256`` work too, and
cost more CPU. ``None``: no algorithm declared and nothing recorded. With botocore's
default ``request_checksum_calculation="when_supported"`` magicfs still sends the CRC32
botocore would have added by itself (as a header, :func:`aheader`); for a store that
refuses checksum headers altogether, also set ``"when_required"`` in ``config_kwargs``.

**Why explicit checksum headers.** magicfs computes each part's checksum itself and
sends it as a header. botocore >= 1.36 would otherwise send its own (by default) as a
trailer of an ``aws-chunked`` body over TLS, which some S3-compatible stores refuse
(Ceph RGW 16.2: ``MissingContentLength``); a request that carries its checksum in a
header has no trailer.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import botocore.compat
import botocore.httpchecksum as httpchecksum

from ...errors import InvalidCommitData
from ...records import CHECKSUM_ALGORITHM_KEY, SinglePendingCommit
from .body import PartBody

ALGORITHM_KEY = CHECKSUM_ALGORITHM_KEY  # a pendingset declares it too (records.pending)
PARTS_KEY = "magicfs.checksum.parts"
OBJECT_KEY = "magicfs.checksum.object"

#: The default of the ``checksum`` option: built into botocore, cheap.
DEFAULT_ALGORITHM = "CRC32"

_CLASSES: dict[str, type[Any]] = {
    "CRC32": httpchecksum.Crc32Checksum,
    "SHA1": httpchecksum.Sha1Checksum,
    "SHA256": httpchecksum.Sha256Checksum,
    "CRC32C": httpchecksum.CrtCrc32cChecksum,
    "CRC64NVME": httpchecksum.CrtCrc64NvmeChecksum,
}
_NEEDS_CRT = frozenset({"CRC32C", "CRC64NVME"})
#: Bytes of each algorithm's digest.
_SIZES = {"CRC32": 4, "CRC32C": 4, "CRC64NVME": 8, "SHA1": 20, "SHA256": 32}


def checked_algorithm(name: str | None) -> str | None:
    """The ``checksum`` option, checked: an S3 algorithm name botocore can compute here,
    or ``None`` (no checksums)."""
    if name is None:
        return None
    algorithm = str(name).upper()
    if algorithm not in _CLASSES:
        raise ValueError(
            f"checksum={name!r} is not an S3 checksum algorithm: use one of "
            f"{', '.join(sorted(_CLASSES))}, or None for a store that refuses checksums"
        )
    if algorithm in _NEEDS_CRT and not botocore.compat.HAS_CRT:
        raise ValueError(
            f"checksum={name!r} needs botocore's CRT extension: pip install 'botocore[crt]', "
            f"or use checksum={DEFAULT_ALGORITHM!r} (built in)"
        )
    return algorithm


def compute(algorithm: str, data: bytes | PartBody) -> str:
    """The base64 checksum of ``data`` (a part's pieces in turn), as S3 headers carry it."""
    checksum = _CLASSES[algorithm]()
    for piece in data.pieces if isinstance(data, PartBody) else [data]:
        checksum.update(piece)
    return str(checksum.b64digest())


def parameter(algorithm: str) -> str:
    """The botocore parameter (and completion part field) of ``algorithm``: ``ChecksumCRC32``."""
    return f"Checksum{algorithm}"


def composite(algorithm: str, parts: Sequence[str]) -> str:
    """The checksum S3 reports for a multipart object of ``parts``: ``<b64>-<count>``."""
    digests = b"".join(base64.b64decode(part) for part in parts)
    return f"{compute(algorithm, digests)}-{len(parts)}"


def record_fields(algorithm: str, parts: Sequence[str]) -> dict[str, str]:
    """The ``extraData`` entries of a record whose parts have checksums ``parts``."""
    return {
        ALGORITHM_KEY: algorithm,
        PARTS_KEY: ",".join(parts),
        OBJECT_KEY: composite(algorithm, parts),
    }


def recorded(commit: SinglePendingCommit) -> tuple[str, list[str]] | None:
    """The algorithm and part checksums a record carries (``None``: written without)."""
    algorithm = commit.extra_data.get(ALGORITHM_KEY)
    if algorithm is None:
        return None
    parts = commit.extra_data.get(PARTS_KEY, "")
    return algorithm, parts.split(",") if parts else []


def check_record(commit: SinglePendingCommit, source: str | None) -> None:
    """Refuse (``InvalidCommitData``) a record whose checksums cannot be the writer's."""
    found = recorded(commit)
    if found is None:
        return
    algorithm, parts = found
    field = f"extraData.{PARTS_KEY}"
    try:  # an S3 algorithm this process can compute (CRC32C needs botocore's CRT here too)
        checked_algorithm(algorithm)
    except ValueError as refused:
        raise InvalidCommitData(source, f"extraData.{ALGORITHM_KEY}", str(refused)) from None
    if len(parts) != len(commit.etags):
        raise InvalidCommitData(
            source,
            field,
            f"lists {len(parts)} checksums for {len(commit.etags)} parts",
        )
    for number, part in enumerate(parts, 1):
        try:
            size = len(base64.b64decode(part, validate=True))
        except ValueError:
            size = -1
        if size != _SIZES[algorithm]:
            raise InvalidCommitData(
                source, field, f"the checksum of part {number} is not a base64 {algorithm}"
            )
    if commit.extra_data.get(OBJECT_KEY) != composite(algorithm, parts):
        raise InvalidCommitData(
            source,
            field,
            f"the parts' {algorithm} checksums do not add up to the object's "
            f"({OBJECT_KEY}): the record was changed after the writer saved it",
        )


def check_reply(commit: SinglePendingCommit, reply: dict[str, Any]) -> None:
    """Refuse a completion whose reply reports another object checksum than the record's.

    Stores that report none (moto, Ceph RGW 16.2) are not checked here.
    """
    found = recorded(commit)
    if found is None:
        return
    algorithm = found[0]
    reported = reply.get(parameter(algorithm))
    expected = commit.extra_data.get(OBJECT_KEY)
    # Only a composite checksum (``<b64>-<parts>``, ``ChecksumType: COMPOSITE``) is the
    # record's kind: a store may report a full-object one instead (AWS does for
    # CRC64NVME), which the parts' digests cannot be compared with.
    composite_reply = reply.get("ChecksumType") == "COMPOSITE" or "-" in str(reported or "")
    if not composite_reply:
        return
    if reported and expected and str(reported).split("-")[0] != expected.split("-")[0]:
        raise OSError(
            f"s3://{commit.destination}: the store assembled an object whose {algorithm} "
            f"checksum is {reported}, but the writer's parts make {expected}: the object "
            "is not what was written"
        )


async def aheader(fs: Any, body: bytes | PartBody) -> dict[str, str]:
    """A CRC32 checksum parameter for a request botocore would checksum by itself.

    With botocore's default ``request_checksum_calculation="when_supported"`` it adds a
    CRC32 to every upload, as a trailer over TLS (refused by some stores, see the module
    docs); one passed as a parameter is sent as a header instead, with the same
    protection. With ``"when_required"`` (the user's choice) nothing is added.
    """
    client = await fs.set_session()
    if getattr(client.meta.config, "request_checksum_calculation", None) != "when_supported":
        return {}
    return {parameter(DEFAULT_ALGORITHM): compute(DEFAULT_ALGORITHM, body)}
