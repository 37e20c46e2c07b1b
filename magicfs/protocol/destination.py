"""What the destination shows readers: a collaborator every committer holds.

**Visible data** is any entry of the destination whose name does not start with ``_``
or ``.`` (Spark, Hive and pyarrow skip ``_SUCCESS``, ``__magic_job-*`` and
``_temporary`` by that convention). ``fail`` mode refuses a destination holding some;
``replace`` mode deletes it (:meth:`Destination.visible_files`).

``fail`` mode is exclusive: a fail-mode job claims the destination
(:meth:`Destination.fail_claim`, :mod:`magicfs.stores.claims`) before it checks it, so
of jobs committing there at the same moment exactly one gets past the check; the others
are refused naming it (:meth:`Destination.refuse_claimed`). The claim is a record under
``_magicfs/``, which no reader counts as data.

Reads go through the store's own fsspec filesystem, on purpose: ``ls`` of the
destination, ``isdir`` and ``find`` of its visible entries (``replace``), a ranged
``cat_file`` of ``_SUCCESS`` (which job committed there). They are the reader's view,
the one the conflict modes and a job id's reuse are about, through the filesystem a
reader uses. The claim is written, read and deleted through the same filesystem: it
is between the jobs that write there, not a record of one job's. This is the one place
the committers use the store's filesystem directly
(with recovery's listing of the destination in ``replace`` mode,
:meth:`~magicfs.protocol.recovery.Recovery.old_data_deleted`); their records — markers,
task records, the journal, ``_SUCCESS``'s write — go through the deferred store's adapter
(:mod:`magicfs.stores.deferred`) or, on rename stores, :mod:`magicfs.stores.rename`.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import CommitConflictError
from ..names import FAIL_CLAIM, SUCCESS_FILE
from ..paths import join
from ..records import SuccessData
from ..stores.claims import ClaimHolder, DestinationClaim


class Destination:
    """Reads of one job's destination shared by job setup, job commit and abort.

    ``fs`` is the store's fsspec filesystem, ``path`` the destination as it names it.
    It holds no state: a committer builds one when it asks
    (:attr:`~.options.CommitterOptions.destination`).
    """

    def __init__(self, fs: Any, path: str):
        self.fs = fs
        self.path = path

    @property
    def url(self) -> str:
        return str(self.fs.unstrip_protocol(self.path))

    def visible_entries(self) -> list[str]:
        """Top-level entries of the destination that readers would see (one listing)."""
        try:
            entries = self.fs.ls(self.path, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries]
        return [
            entry
            for entry, name in zip(entries, names, strict=True)
            if name and not name.startswith(("_", ".")) and entry.rstrip("/") != self.path
        ]

    def visible_files(self) -> list[str]:
        """Every file of the destination's visible data (what ``replace`` deletes)."""
        files: list[str] = []
        for entry in self.visible_entries():
            if self.fs.isdir(entry):
                files.extend(self.fs.find(entry))
            else:
                files.append(entry)
        return files

    def refuse_visible_data(self, stage: str) -> None:
        """``fail`` mode's check: refuse a destination with visible data (``stage``: when
        checked, for the message)."""
        entries = self.visible_entries()
        if entries:
            committed = self.success_job_id()  # one read more, on refusal only
            by = f"; its _SUCCESS names job {committed}" if committed else ""
            raise CommitConflictError(
                f"{self.url}: destination already holds data ({len(entries)} entries, e.g. "
                f"{self.fs.unstrip_protocol(entries[0])}{by}) and conflict_mode is 'fail' "
                f"(checked at {stage})"
            )

    def fail_claim(self) -> DestinationClaim:
        """The claim a ``fail``-mode job holds while it commits here."""
        return DestinationClaim(self.fs, self.path, FAIL_CLAIM)

    def refuse_claimed(self, job_id: str, holder: ClaimHolder, rollback: str) -> None:
        """``fail`` mode: refuse to commit ``job_id`` while ``holder`` holds the destination's
        claim; ``rollback``: the command that rolls the holder back, if it is dead."""
        claim = self.fail_claim()
        committed = self.success_job_id()  # one read more, on refusal only
        already = f" (and job {committed} has committed there: its _SUCCESS names it)"
        raise CommitConflictError(
            f"{self.url}: another conflict_mode='fail' job is committing there"
            f"{already if committed else ''}: "
            f"{holder.describe()} holds the destination's claim ({claim.url}), so job "
            f"{job_id} may not commit (it would find the destination empty and both jobs "
            "would publish). If that job is running, wait for it to end and run this job "
            "again (it then fails if that job's data is there); if it is dead, roll it "
            f"back ({rollback}), which releases the claim, or delete {claim.url} once you "
            "know no process of it runs"
        )

    def success_job_id(self) -> str | None:
        """The job id the destination's ``_SUCCESS`` names (``None``: no readable one)."""
        try:
            data = self.fs.cat_file(
                join(self.path, SUCCESS_FILE), start=0, end=SuccessData.MAX_BYTES
            )
        except (FileNotFoundError, OSError):
            return None
        try:
            job_id: object = json.loads(data).get("jobId")
        except (ValueError, AttributeError):
            return None
        return job_id if isinstance(job_id, str) else None
