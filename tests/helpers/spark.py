"""A real local SparkSession for the tests: pyspark's own jars on Java, on loopback only.

Spark's start-up takes several seconds, so each test module builds one (module-scoped
fixture) and stops it at its end. ``local[2,4]``: two worker threads, and a failed task
is retried (up to 4 attempts), as on a cluster.
"""

from __future__ import annotations

import os
import sys


def local_session(app_name: str):
    """A started ``SparkSession`` whose Python workers run this interpreter; no web UI,
    driver bound to 127.0.0.1, Spark's log at ERROR (its warnings are about the host)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
