"""Azure's binding: block lists, its writers, job hooks, options and operator view."""

from __future__ import annotations

from typing import Any

from ..binding import DeferredStoreSpec
from ..deferred import protocols
from .blocks import BLOCK_LIST_STORE
from .deferred import CAPABILITIES, BlockListDeferred
from .job_hooks import BlockListCommitOptions, BlockListJobHooks
from .operator_view import BlockListOperatorView
from .writer import BlockListWrites


def _is_adlfs(fs: Any) -> bool:
    """adlfs's AzureBlobFileSystem or a subclass (its block-blob client), not a wrapper
    that merely answers to ``abfs``."""
    cls = fs if isinstance(fs, type) else type(fs)
    return any(c.__module__.startswith("adlfs.") for c in cls.__mro__)


SPEC = DeferredStoreSpec(
    name=BLOCK_LIST_STORE,
    recognises=lambda fs: bool(protocols(fs) & {"abfs", "az", "abfss"}) and _is_adlfs(fs),
    adapter=BlockListDeferred.for_job,
    capabilities=CAPABILITIES,
    committer="block-list",
    generic_hooks_commit=False,  # writer records are read by BlockListJobHooks only
    opt_in="block_lists",
    writes=BlockListWrites,
    options=BlockListCommitOptions,
    job_hooks=BlockListJobHooks,
    operator_view=BlockListOperatorView,
)
