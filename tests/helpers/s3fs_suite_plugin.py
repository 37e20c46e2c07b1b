"""pytest plugin (``-p s3fs_suite_plugin``): s3fs's own tests, through ``magicfs.install()``.

Loaded before s3fs's test modules are imported, it installs magicfs and makes
``s3fs.S3FileSystem`` and ``s3fs.core.S3FileSystem`` the class ``install()`` registered,
so that every ``from s3fs.core import S3FileSystem`` in the tests, every
``fsspec.filesystem("s3")`` and every ``fsspec.url_to_fs("s3://...")`` gets it. s3fs's
files are run as they are (see ``s3fs_suite.py``).
"""

from __future__ import annotations

import fsspec
import s3fs
import s3fs.core

import magicfs

magicfs.install()
INSTALLED = fsspec.get_filesystem_class("s3")
s3fs.S3FileSystem = INSTALLED
s3fs.core.S3FileSystem = INSTALLED


def pytest_report_header() -> str:
    return f"magicfs.install(): s3fs.S3FileSystem is {INSTALLED.__module__}.{INSTALLED.__name__}"
