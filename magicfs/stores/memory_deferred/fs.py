"""``mem-deferred://``: fsspec's memory filesystem plus uploads staged in process memory.

Files are fsspec memory files in a namespace of their own (not ``memory://``'s), shared
by every instance in the process, named ``bucket/key`` as on S3 (no leading ``/``). As on
an object store, directories are only implied by the files below them: ``mkdir`` and
``makedirs`` make nothing, and a directory whose last file is deleted is gone.

An **upload** is parts staged against a final path under an upload id: nothing of it is
visible (no listing, no read) until :meth:`MemoryDeferredFileSystem.publish` joins the
named parts into the file in one step, under a lock, so a reader sees the old file or the
new, never half. :meth:`~MemoryDeferredFileSystem.discard` drops an upload. **Pending**
means staged and neither published nor discarded: :meth:`~MemoryDeferredFileSystem.pending`
lists those under a prefix (S3's ListMultipartUploads). The upload that published a path
is remembered, so a repeated publish (a retried job commit) is recognised as done.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fsspec.implementations.memory import MemoryFileSystem


@dataclass
class Upload:
    """Parts staged against ``path``, by part id."""

    path: str
    parts: dict[str, bytes] = field(default_factory=dict)


class MemoryDeferredFileSystem(MemoryFileSystem):  # type: ignore[misc]
    """fsspec's memory filesystem with deferred writes (see the module docstring)."""

    protocol = "mem-deferred"
    root_marker = ""
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    uploads: ClassVar[dict[str, Upload]] = {}
    published: ClassVar[dict[str, str]] = {}  # path -> the upload that published it
    lock: ClassVar[threading.RLock] = threading.RLock()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for prefix in ("mem-deferred://", "mem-deferred::"):
            path = path.removeprefix(prefix)
        return path.strip("/")

    # -- directories: implied by the files below them, as on object stores ------------------

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to make: a directory exists while a file below it does (as on S3)."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Nothing to make (see :meth:`mkdir`)."""

    # -- markers and records ------------------------------------------------------------

    def put_marker(self, path: str, create_only: bool) -> None:
        """A zero-byte file at ``path``; ``create_only``: ``FileExistsError`` if one is
        there (checked and written under the lock: no window between the two)."""
        with self.lock:
            if create_only and self.exists(path):
                raise FileExistsError(path)
            self.pipe_file(path, b"")

    # -- uploads ---------------------------------------------------------------------------

    def create_upload(self, path: str) -> str:
        upload_id = uuid.uuid4().hex
        with self.lock:
            self.uploads[upload_id] = Upload(self._strip_protocol(path))
        return upload_id

    def stage(self, upload_id: str, number: int, body: bytes) -> str:
        """Stage part ``number`` of an upload; returns the part's id."""
        part = f"{upload_id}-{number:05d}"
        with self.lock:
            self._upload(upload_id).parts[part] = bytes(body)
        return part

    def publish(self, upload_id: str, parts: list[str], create_only: bool = False) -> None:
        """Make the upload's ``parts``, in order, the file at its path, in one step.

        ``FileNotFoundError``: no such upload (discarded or already published);
        ``ValueError``: a part the upload does not hold; ``FileExistsError``:
        ``create_only`` and a file is there. The upload is gone afterwards.
        """
        with self.lock:
            upload = self._upload(upload_id)
            missing = [p for p in parts if p not in upload.parts]
            if missing:
                raise ValueError(f"upload {upload_id} holds no part {missing[0]!r}")
            if create_only and self.exists(upload.path):
                raise FileExistsError(upload.path)
            self.pipe_file(upload.path, b"".join(upload.parts[p] for p in parts))
            del self.uploads[upload_id]
            self.published[upload.path] = upload_id

    def discard(self, upload_id: str) -> bool:
        """Drop an upload; ``False`` if there was none."""
        with self.lock:
            return self.uploads.pop(upload_id, None) is not None

    def pending(self, prefix: str = "") -> list[tuple[str, str]]:
        """``(path, upload id)`` of every pending upload whose path starts with ``prefix``."""
        prefix = prefix.removeprefix("mem-deferred://").lstrip("/")  # a trailing / stays
        with self.lock:
            found = [(u.path, uid) for uid, u in self.uploads.items()]
        return sorted(f for f in found if f[0].startswith(prefix))

    def published_by(self, path: str) -> str | None:
        """The upload that published the file at ``path``, while it is there."""
        path = self._strip_protocol(path)
        with self.lock:
            return self.published.get(path) if self.exists(path) else None

    def _upload(self, upload_id: str) -> Upload:
        try:
            return self.uploads[upload_id]
        except KeyError:
            raise FileNotFoundError(f"no pending upload {upload_id}") from None
