"""A part's bytes as botocore and aiohttp read them, without copying them.

A ``bytes`` body costs the IO loop three copies of every part: botocore wraps it in a
``BytesIO`` (``convert_body_to_file_like_object``), aiohttp's ``BytesIOPayload`` then
calls its ``getbuffer()``, which unshares the ``BytesIO`` from the ``bytes`` (a copy of
the whole part), and reads it back in 256 KiB ``read()`` calls (a second copy), while
botocore's payload hash over plain HTTP reads it in 1 MiB ``read()`` calls (a third).
All of it ran on s3fs's IO loop, the one thread every writer's requests share, and with
the writer's ``b"".join`` of the part's pieces (a fourth copy, holding the GIL) it was a
quarter of that thread's time in ``benchmarks/write_path.py``.

:class:`PartBody` hands out views of the pieces the writer was given instead: botocore
reads it as a seekable file (``read``/``seek``/``tell``, ``len``) for the payload hash,
and aiohttp, which takes an object that is not an ``io.IOBase`` but iterates
asynchronously (``__aiter__``) as a streamed payload of the ``Content-Length`` botocore
declared, sends the views as they are. Each call starts from the first byte: botocore
rewinds a stream before its own retries (``reset_stream``), and :func:`rewind` (a
``before-parameter-build`` hook on the client) does it before every call, so s3fs's and
:meth:`~.store.S3Store.acall`'s repetitions of a call send the whole part again.

**The payload hash.** Over plain HTTP (and where ``payload_signing_enabled`` asks for
it) botocore's SigV4 signer hashes each part (SHA-256) on the thread that sends it:
s3fs's one IO loop, which every writer's parts share (boto3 spreads its parts over ten
threads, and ``hashlib`` releases the GIL). A writer that knows its part will be hashed
(:func:`hashed_when_signed`) computes the hash on its worker thread with the part's
checksum (:attr:`PartBody.sha256`), and the direct way (:mod:`.direct`) signs with it
where botocore's signer would hash the body (the same value: the same bytes). Over
HTTPS with a checksum header, botocore sends the part unsigned and nothing is hashed.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

#: The most bytes handed to aiohttp per write: about the socket buffer on loopback.
CHUNK = 1 << 20


class PartBody:
    """The bytes of one part, read from its pieces (``bytes``-like, never changed again)."""

    def __init__(self, pieces: Sequence[Any]):
        #: The hex SHA-256 of the bytes when computed beforehand (:func:`digest`), for the
        #: signature over plain HTTP (module docstring); ``None``: the signer hashes them.
        self.sha256: str | None = None
        self._views = [memoryview(p).cast("B") for p in pieces if len(p)]
        self._starts = [0]
        for view in self._views:
            self._starts.append(self._starts[-1] + len(view))
        self._position = 0

    def __len__(self) -> int:
        return self._starts[-1]

    def __bool__(self) -> bool:
        return bool(len(self))

    @property
    def pieces(self) -> list[memoryview]:
        """The part's bytes, in order (views of the pieces, not copies)."""
        return list(self._views)

    def tell(self) -> int:
        return self._position

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._position, len(self))[whence]
        self._position = min(max(0, base + offset), len(self))
        return self._position

    def read(self, size: int | None = -1) -> memoryview | bytes:
        """Up to ``size`` bytes from the position (all that is left if ``size`` < 0).

        A read stops at the end of a piece and returns a view of it, not a copy (a
        short read, as raw streams make: botocore's hashes read until ``b""`` and take
        any buffer). Only a read of everything left joins the pieces.
        """
        if self._position >= len(self) or size == 0:
            return b""
        index = bisect.bisect_right(self._starts, self._position) - 1
        offset = self._position - self._starts[index]
        if size is None or size < 0:
            self._position = len(self)
            return b"".join([self._views[index][offset:], *self._views[index + 1 :]])
        view = self._views[index][offset : offset + size]
        self._position += len(view)
        return view

    def __aiter__(self) -> AsyncIterator[memoryview]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[memoryview]:
        """From the position to the end, as views of at most :data:`CHUNK` bytes."""
        while self._position < len(self):
            index = bisect.bisect_right(self._starts, self._position) - 1
            offset = self._position - self._starts[index]
            view = self._views[index][offset : offset + CHUNK]
            self._position += len(view)
            yield view


def digest(part: PartBody) -> str:
    """The hex SHA-256 of ``part``'s bytes (as botocore's signer computes it)."""
    hashed = hashlib.sha256()
    for piece in part.pieces:
        hashed.update(piece)
    return hashed.hexdigest()


def hashed_when_signed(client: Any) -> bool:
    """Would botocore's S3 signer hash a part's body for ``client``? Over plain HTTP,
    and wherever the client's ``s3`` config sets ``payload_signing_enabled`` (True:
    always; False: never). Over HTTPS a part with a checksum header goes unsigned."""
    s3_config = getattr(client.meta.config, "s3", None) or {}
    chosen = s3_config.get("payload_signing_enabled")
    if chosen is not None:
        return bool(chosen)
    return not str(client.meta.endpoint_url).startswith("https")


def rewind(params: dict[str, Any], **_: Any) -> None:
    """``before-parameter-build.s3`` hook: every call sends a :class:`PartBody` whole."""
    body = params.get("Body")
    if isinstance(body, PartBody):
        body.seek(0)
