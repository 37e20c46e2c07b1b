"""Hadoop's own manifest-committer record classes, run on Java from the pyspark wheel's jars.

``tests/java/HadoopRecords.java`` loads a ``TaskManifest`` or ``ManifestSuccessData``
with Hadoop's serializers, calls ``validate()`` and describes what Hadoop understood as
one line of JSON; with ``--save`` it writes a sample record with Hadoop's classes, so
magicfs can be checked in both directions. :class:`HadoopRecords` compiles it once and
runs it (one short JVM per call: about a second). Hadoop's ``ManifestPrinter`` (what
``mapred successfile`` runs) is reached through :meth:`HadoopRecords.print_success`.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

MANIFEST_PRINTER = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.ManifestPrinter"
ERROR_PREFIX = "HadoopRecords-error: "
SOURCE = pathlib.Path(__file__).resolve().parent.parent / "java" / "HadoopRecords.java"

# The jars Hadoop's record classes need: the shaded client (its dependencies inside),
# Jackson for HadoopRecords' own output, and a logging backend. Fewer jars than all of
# pyspark/jars/ (280) keep each JVM start near one second.
_JAR_PREFIXES = (
    "hadoop-client-api-",
    "hadoop-client-runtime-",
    "jackson-annotations-",
    "jackson-core-",
    "jackson-databind-",
    "slf4j-api-",
    "log4j-api-",
    "log4j-core-",
    "log4j-slf4j2-impl-",
)
_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",  # quick start for a short-lived JVM
    "-XX:+UseSerialGC",
    "-Xmx256m",
    "-Dsun.stdout.encoding=UTF-8",
    "-Dsun.stderr.encoding=UTF-8",
)


class HadoopRejected(Exception):
    """Hadoop refused a record; the message is Hadoop's exception, class name first."""


class HadoopToolsMissing(RuntimeError):
    """java, javac or the pyspark jars are not installed."""


class HadoopRecords:
    """Runs the compiled ``HadoopRecords`` program; calling the instance is :meth:`load`."""

    def __init__(self, classpath: list[pathlib.Path]) -> None:
        self.classpath = classpath

    @classmethod
    def build(cls, build_dir: pathlib.Path) -> HadoopRecords:
        """Compile ``HadoopRecords.java`` into ``build_dir`` against the pyspark jars."""
        jars = hadoop_jars()
        javac = _tool("javac")
        build_dir.mkdir(parents=True, exist_ok=True)
        classpath = os.pathsep.join(map(str, jars))
        result = subprocess.run(
            [javac, "-encoding", "UTF-8", "-d", str(build_dir), "-cp", classpath, str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"javac failed for {SOURCE}:\n{result.stderr}")
        return cls([build_dir, *jars])

    def load(self, kind: str, path: os.PathLike | str) -> dict[str, Any]:
        """Hadoop's view of the ``kind`` (``manifest`` or ``success``) record at ``path``.

        Raises :class:`HadoopRejected` with Hadoop's message when loading or
        ``validate()`` fails.
        """
        return json.loads(self._run("HadoopRecords", kind, str(path)))

    __call__ = load

    def save(self, kind: str, path: os.PathLike | str) -> dict[str, Any]:
        """Have Hadoop's classes write their sample ``kind`` record to ``path``; describe it."""
        return json.loads(self._run("HadoopRecords", "--save", kind, str(path)))

    def print_success(self, path: os.PathLike | str) -> str:
        """Standard output of Hadoop's ``ManifestPrinter`` (``mapred successfile``) on ``path``."""
        return self._run(MANIFEST_PRINTER, str(path))

    def _run(self, main_class: str, *args: str) -> str:
        command = [_tool("java"), *_JVM_OPTIONS, "-cp", os.pathsep.join(map(str, self.classpath))]
        result = subprocess.run(
            [*command, main_class, *args], capture_output=True, timeout=300, env=_java_env()
        )
        stdout = result.stdout.decode("utf-8")
        stderr = result.stderr.decode("utf-8", errors="replace")
        if result.returncode != 0:
            if ERROR_PREFIX in stderr:
                raise HadoopRejected(stderr.split(ERROR_PREFIX, 1)[1].strip())
            raise HadoopRejected(f"{main_class} exited with {result.returncode}:\n{stderr}")
        return stdout


def hadoop_jars() -> list[pathlib.Path]:
    """The jars of the pyspark wheel that :class:`HadoopRecords` needs."""
    try:
        import pyspark
    except ImportError as error:
        raise HadoopToolsMissing(
            "pyspark is not installed; it ships the Hadoop jars: pip install -e '.[test]'"
        ) from error
    jars_dir = pathlib.Path(pyspark.__file__).parent / "jars"
    jars = []
    for prefix in _JAR_PREFIXES:
        found = sorted(jars_dir.glob(f"{prefix}[0-9]*.jar"))
        if not found:
            raise HadoopToolsMissing(f"no {prefix}*.jar in {jars_dir}")
        jars.append(found[-1])
    return jars


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise HadoopToolsMissing(
            f"{name} not found: the Hadoop interop tests need a JDK 17+ on PATH "
            "(Debian: apt-get install openjdk-17-jdk-headless)"
        )
    return path


def _java_env() -> dict[str, str]:
    """The environment minus options that would make the JVM print or behave differently."""
    env = dict(os.environ)
    for name in ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH"):
        env.pop(name, None)
    return env
