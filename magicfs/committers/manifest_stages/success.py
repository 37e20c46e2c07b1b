"""Stage 5: save ``_SUCCESS`` (``ManifestSuccessData``), and the optional summary report.

``_SUCCESS`` is written to a temporary file in the job attempt directory and renamed
into place, so a reader never sees half of it. The summary report — the same JSON,
also written when the job fails — goes to ``<report dir>/summary-<job id>.json``.
"""

from __future__ import annotations

import logging

from ...paths import join
from ...records import ManifestSuccessData
from .context import StageContext

log = logging.getLogger("magicfs.manifest.stages.success")


def save_success(context: StageContext, success: ManifestSuccessData) -> str:
    path = join(context.layout.dest, "_SUCCESS")
    with context.stats.track("job_stage_save_success_marker"):
        context.store.save_atomically(path, success.to_bytes(), context.layout.temp_success)
    return path


def save_report(context: StageContext, report_dir: str, success: ManifestSuccessData) -> str | None:
    """Write the summary report; failures are logged, never raised (it is a diagnostic)."""
    path = join(report_dir, f"summary-{context.job_id}.json")
    try:
        context.store.write_bytes(path, success.to_bytes())  # (makes the directory if needed)
    except OSError as e:
        log.warning("could not save the job summary report %s: %s", path, e)
        return None
    return path
