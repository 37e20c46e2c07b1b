"""Which extra to install: one line naming it, before a command or server needs a module
that an optional extra brings.

The optional engines (``magicfs.spark``, ``magicfs.dask``, ``magicfs.ray``,
``magicfs.duckdb``) say so when imported; the commands that run an embedded server or
the demo check here first, so a missing package reads as ``pip install 'magicfs[demo]'``
rather than as a traceback from a child process.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

#: What the embedded S3 server imports: moto's S3 and the werkzeug/Flask app it serves.
SERVER_MODULES = ("moto", "flask", "flask_cors", "werkzeug", "boto3")
#: What ``magicfs demo`` needs besides the server: the writers it drives.
DEMO_MODULES = (*SERVER_MODULES, "pandas", "pyarrow")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False


def require(extra: str, modules: Sequence[str], needed_by: str) -> None:
    """Raise :class:`ModuleNotFoundError` naming ``extra`` unless every module is installed."""
    missing = [module for module in modules if not installed(module)]
    if missing:
        raise ModuleNotFoundError(
            f"{needed_by} needs {', '.join(missing)}, not installed: "
            f"pip install 'magicfs[{extra}]'",
            name=missing[0],
        )
