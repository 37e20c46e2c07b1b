"""Job commit as a pipeline of small stages, each testable alone (Hadoop's ``stages/``).

``load`` -> ``directories`` -> ``rename`` -> ``validate`` (optional) -> ``success`` ->
``cleanup``. Every stage takes a :class:`~.context.StageContext` (the store
operations, the job layout, statistics, the thread count) and returns a small result.
"""

from .cleanup import CleanupOutcome, cleanup
from .context import StageContext
from .directories import create_directories
from .load import LoadedManifests, load_manifests
from .rename import RenameOutcome, rename_files, unrename
from .success import save_report, save_success
from .validate import OutputValidationError, validate_output

__all__ = [
    "CleanupOutcome",
    "LoadedManifests",
    "OutputValidationError",
    "RenameOutcome",
    "StageContext",
    "cleanup",
    "create_directories",
    "load_manifests",
    "rename_files",
    "save_report",
    "save_success",
    "unrename",
    "validate_output",
]
