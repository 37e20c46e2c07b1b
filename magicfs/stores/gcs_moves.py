"""Renames on GCS without copies: the atomic ``objects.move`` where the bucket has it.

GCS renames an object within a bucket with one request (JSON API ``objects.move``,
``POST .../b/<bucket>/o/<source>/moveTo/o/<dest>``): the metadata changes, no byte is
copied, and the rename is atomic. Not every GCS speaks it: gcp-storage-emulator answers
501 and fake-gcs-server 400, and gcsfs's ``mv`` retries a 501 with back-off for about
half a minute per file before it falls back to a copy. So magicfs asks once per bucket:

* the first rename in a bucket sends the move *without* retries (the probe); a 200 moved
  the file and every later rename in that bucket is a move (through gcsfs, with its
  retries, as any request); 501, 405, 400 or 403 (or a 404 while the source is there)
  mean the store has no move, or this user may not use it: that rename and every later
  one in the bucket is gcsfs's rewrite (copy) + delete (which fails with the store's own
  error where the user may not copy either);
* any other failure of the probe (a timeout, a 503) decides nothing: that one file is
  copied, and the next rename probes again.

The answers are kept per (endpoint, bucket) for the life of the process, so a job and
every later one in the process probe a bucket once. A move that raised but happened
(a lost reply) is recognised by :meth:`~magicfs.stores.rename.RenameStore.rename_with_recovery`
as any rename is: the source gone and the destination of the right size.
"""

from __future__ import annotations

import logging
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("magicfs.stores.gcs")

#: The JSON API's move of one object within a bucket (after ``<endpoint>/storage/v1/``).
MOVE_PATH = "b/{}/o/{}/moveTo/o/{}"
#: Answers to the probe that say "no move here": not implemented (gcp-storage-emulator),
#: method not allowed, bad request (fake-gcs-server takes the request for an upload
#: without metadata; a requester-pays bucket, whose ``userProject`` the probe does not
#: send), forbidden (a role without the move's permission).
NO_MOVE_STATUSES = frozenset({400, 403, 405, 501})
#: Seconds the probe waits for a reply (a move changes metadata only: it is quick).
PROBE_TIMEOUT = 60.0


@dataclass
class _Answer:
    """What one bucket said to the probe; ``moves`` is ``None`` until it said something."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    moves: bool | None = None


_ANSWERS: dict[tuple[str, str], _Answer] = {}
_ANSWERS_LOCK = threading.Lock()


def _answer_for(endpoint: str, bucket: str) -> _Answer:
    with _ANSWERS_LOCK:
        return _ANSWERS.setdefault((endpoint, bucket), _Answer())


def known_answer(endpoint: str, bucket: str) -> bool | None:
    """Does the bucket at ``endpoint`` move objects (``None``: not asked yet)?"""
    with _ANSWERS_LOCK:
        answer = _ANSWERS.get((endpoint, bucket))
    return None if answer is None else answer.moves


def is_gcsfs(fs: Any) -> bool:
    """Is ``fs`` gcsfs's filesystem (recognised by its class, as the registry does)?

    Asked of gcsfs only where it is imported already (``fs`` cannot be one otherwise):
    a job on another store does not pay gcsfs's import.
    """
    gcsfs = sys.modules.get("gcsfs")
    return gcsfs is not None and isinstance(fs, gcsfs.GCSFileSystem)


def object_moves(fs: Any) -> GcsMoves | None:
    """The atomic moves of ``fs`` where it is GCS (probed on first use), else ``None``."""
    return GcsMoves(fs) if is_gcsfs(fs) else None


class GcsMoves:
    """Moves objects within a bucket of ``fs`` (a ``gcsfs.GCSFileSystem``) where GCS can."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    @property
    def endpoint(self) -> str:
        """The JSON API's base URL (``<endpoint>/storage/v1/``): gcsfs's ``base``."""
        return str(self.fs.base)

    def move(self, source: str, dest: str) -> bool:
        """Move ``source`` to ``dest`` with one request; ``False``: not moved, because the
        store has no move (or the probe failed for another reason): copy instead.

        Raises ``FileNotFoundError`` when the source is missing, and a move's error once
        the bucket is known to move objects.
        """
        bucket, source_key, _ = self.fs.split_path(source)
        dest_bucket, dest_key, _ = self.fs.split_path(dest)
        if bucket != dest_bucket or not source_key or not dest_key:
            return False
        answer = _answer_for(self.endpoint, bucket)
        if answer.moves is None:
            with answer.lock:  # one probe per bucket; the other threads wait for it
                if answer.moves is None:
                    return self._probe(answer, source, dest, (bucket, source_key, dest_key))
        if not answer.moves:
            return False
        self.fs.call(
            "POST", MOVE_PATH, bucket, source_key, dest_key, headers=_move_headers(), json_out=True
        )
        self._forget(source, dest)
        return True

    def _probe(self, answer: _Answer, source: str, dest: str, names: tuple[str, str, str]) -> bool:
        """The bucket's first move, sent once without retries; records what it says."""
        status, text = self._send_once(*names)
        if status == 200:
            answer.moves = True
            self._forget(source, dest)
            log.info("gs://%s moves objects (objects.move): renames copy nothing", names[0])
            return True
        if status == 404:
            self.fs.invalidate_cache(source)
            if not self.fs.exists(source):
                raise FileNotFoundError(source)
        if status in NO_MOVE_STATUSES or status == 404:
            answer.moves = False
            log.info(
                "gs://%s has no objects.move (HTTP %s): renames are a rewrite (copy) + delete",
                names[0],
                status,
            )
            return False
        log.warning("probing objects.move on gs://%s failed (%s): copying", names[0], text)
        return False

    def _send_once(self, bucket: str, source_key: str, dest_key: str) -> tuple[int, str]:
        """POST the move once (no retry); (HTTP status, or 0 with the error's text)."""
        quoted = (urllib.parse.quote(part, safe="") for part in (bucket, source_key, dest_key))
        url = self.endpoint + MOVE_PATH.format(*quoted)
        headers = _move_headers()
        self.fs.credentials.apply(headers)  # gcsfs's own requests add them themselves
        request = urllib.request.Request(url, data=b"", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT) as response:
                response.read()
                return int(response.status), ""
        except urllib.error.HTTPError as refused:
            return refused.code, f"HTTP {refused.code}"
        except OSError as failed:
            return 0, str(failed) or type(failed).__name__

    def _forget(self, source: str, dest: str) -> None:
        """gcsfs's listings cache knows neither name's new state."""
        self.fs.invalidate_cache(source)
        self.fs.invalidate_cache(dest)


def _move_headers() -> dict[str, str]:
    """A move's headers: JSON, and an idempotency token (a retried move is applied once)."""
    return {"Content-Type": "application/json", "X-Goog-GCS-Idempotency-Token": str(uuid.uuid4())}
