"""A write handle on a rename store that the task's commit can account for.

On a rename store a task file is an ordinary file in the attempt's working directory,
written by the store's own file object. This wrapper adds what the commit protocol
needs, and what the S3 writer gives for free:

* the file is registered as **open** until it is closed (:mod:`magicfs.task_files`), so
  task commit refuses an attempt with a file still open — on a local disk such a file
  would keep changing after job commit renamed it;
* **a failed write leaves no file**: closed while an exception propagates (a ``with``
  block, a wrapper's ``finally``), or garbage-collected unclosed, the partial file is
  deleted, so a truncated file can never be committed (as on S3, where its upload is
  aborted);
* **opening the path again replaces it**: the earlier handle is closed at once and its
  later writes raise, instead of interleaving with the new file's bytes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from typing import Any, cast

from ..task_files import TaskFiles

log = logging.getLogger("magicfs.filesystems.tracked")


class TrackedWrite(io.IOBase):
    """Wraps the store's binary write handle ``raw`` for file ``path`` of an attempt."""

    def __init__(self, raw: Any, fs: Any, path: str, registry: TaskFiles):
        super().__init__()
        self._raw = raw
        self._fs = fs
        self.path = path
        self._registry = registry
        self._written = 0
        self._state = "open"
        self._superseded: str | None = None

    # -- the stream ------------------------------------------------------------------------

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return bool(getattr(self._raw, "readable", lambda: False)())

    def seekable(self) -> bool:
        return bool(getattr(self._raw, "seekable", lambda: False)())

    def write(self, data: Any) -> int | None:
        self._check_open()
        written: int | None = self._raw.write(data)  # None: a raw stream that reports nothing
        self._written += written if written is not None else len(data)
        self._registry.wrote(self.path, self, self._written)
        return written

    def read(self, size: int = -1) -> bytes:
        self._check_open()
        return cast(bytes, self._raw.read(size))

    def seek(self, offset: int, whence: int = 0) -> int:
        self._check_open()
        return cast(int, self._raw.seek(offset, whence))

    def tell(self) -> int:
        return cast(int, self._raw.tell())

    def flush(self) -> None:
        if self._state == "open":
            self._raw.flush()

    def fileno(self) -> int:
        return cast(int, self._raw.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    @property
    def closed(self) -> bool:
        return self._state != "open"

    # -- ending --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close normally; while an exception propagates, throw the partial file away."""
        if self._state != "open":
            if self._superseded:
                raise OSError(
                    f"{self.path}: {self._superseded} before this writer closed; its data "
                    "has been discarded"
                )
            return
        if sys.exc_info()[1] is not None:
            log.warning(
                "%s closed while an exception is propagating: deleting the partial file",
                self.path,
            )
            self.discard()
            return
        try:
            self._raw.close()
        except BaseException:
            self._throw_away()
            raise
        self._state = "closed"
        self._registry.closed(self.path, self, self._written)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()

    def discard(self) -> None:
        """Throw the file away: nothing of it remains in the attempt."""
        if self._state == "open":
            self._throw_away()

    def commit(self) -> None:
        """fsspec transactions: commit the store's file (a close, for most stores)."""
        if hasattr(self._raw, "commit"):
            self._raw.commit()
            self._state = "closed"
            self._registry.closed(self.path, self, self._written)
        else:
            self.close()

    def supersede(self, reason: str) -> None:
        """The path was opened again or deleted: stop this writer (see module docstring)."""
        if self._state == "open":
            self._superseded = reason
            self._state = "superseded"
            with contextlib.suppress(Exception):
                self._raw.close()

    def __del__(self) -> None:
        if getattr(self, "_state", None) == "open":
            log.warning("%s was never closed: deleting the partial file", self.path)
            with contextlib.suppress(Exception):
                self.discard()

    def _throw_away(self) -> None:
        self._state = "discarded"
        self._registry.discarded(self.path, self)
        with contextlib.suppress(Exception):
            if hasattr(self._raw, "discard"):
                self._raw.discard()
        with contextlib.suppress(Exception):
            self._raw.close()
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(self.path)

    def _check_open(self) -> None:
        if self._state != "open":
            reason = f" ({self._superseded})" if self._superseded else ""
            raise ValueError(f"I/O operation on {self._state} file {self.path}{reason}")
