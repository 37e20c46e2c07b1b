"""S3's binding: multipart uploads, its writers, job hooks, options and operator view."""

from __future__ import annotations

from ..binding import DeferredStoreSpec
from ..deferred import protocols
from .deferred import CAPABILITIES, S3Deferred
from .failures import FAILURES
from .job_hooks import S3CommitOptions, S3JobHooks
from .operator_view import S3OperatorView
from .writer import S3WriterOptions, S3Writes

SPEC = DeferredStoreSpec(
    name="s3",
    # s3fs and its subclasses: what matters is the multipart upload API (magicfs's own
    # installed wrappers answer to "s3" too, but have no ``call_s3``).
    recognises=lambda fs: bool(protocols(fs) & {"s3", "s3a"}) and hasattr(fs, "call_s3"),
    adapter=S3Deferred.for_job,
    capabilities=CAPABILITIES,
    committer="magic",
    writes=S3Writes,
    writer_options=S3WriterOptions,
    options=S3CommitOptions,
    job_hooks=S3JobHooks,
    operator_view=S3OperatorView,
    failures=FAILURES,
)
