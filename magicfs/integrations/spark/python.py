"""Which Python the Spark workers run: this one, unless the user chose another.

PySpark starts its Python workers (the data source's writer, ``mapPartitions``
functions) with ``PYSPARK_PYTHON``, and without it with ``python3`` from ``PATH``. In a
virtual environment that is not the driver's interpreter: the README's recipe, run from
the venv it installs, failed in every worker with ``ModuleNotFoundError: No module named
'magicfs'``. So :func:`use_driver_python` (called by ``register`` and
``write_partitions``) points the workers at ``sys.executable`` when nobody chose an
interpreter and the workers run on this machine (a ``local`` master). It changes
``SparkContext.pythonExec``, which PySpark reads for every Python function it ships,
so it works on a session that is already running; nothing else is changed.

A choice the user made (``PYSPARK_PYTHON``, ``spark.pyspark.python``) is kept. On a
cluster nothing is changed either (this interpreter's path may not exist on the
executors); a warning says how to choose one if the default is in use.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger("magicfs.spark")

#: What PySpark runs when nothing is set (``SparkContext.pythonExec``'s default).
SPARK_DEFAULT = "python3"


def use_driver_python(context: Any) -> str:
    """Make ``context``'s Python workers run ``sys.executable`` if nobody chose one.

    ``context`` is a ``SparkContext``. Returns the interpreter the workers will run.
    """
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    current: str = context.pythonExec
    if chosen or current != SPARK_DEFAULT:
        return current
    master = str(context.master)
    if master.startswith("local"):
        log.info("Spark workers run %s (PYSPARK_PYTHON is not set)", sys.executable)
        context.pythonExec = sys.executable
        return sys.executable
    log.warning(
        "Spark's Python workers run %r (PYSPARK_PYTHON is not set) on master %s: it must "
        "import magicfs on every executor; set PYSPARK_PYTHON (or spark.pyspark.python) to "
        "an interpreter that has it before the session starts",
        current,
        master,
    )
    return current
