"""On Azure a task path names its job, and the file goes where that job's committer looks.

adlfs serves two committers on Azure Blob: ``block-list`` (the default: blocks staged on
the final blob, ``block_lists=True``) and ``manifest`` (files in ``_temporary/``). A
filesystem opened without ``block_lists`` (``fsspec.open("abfs://...")`` after
``magicfs.install()``, or ``magic::abfs://`` with the store's plain options) used to send
every task path to the manifest committer's ``_temporary/`` tree, so a default job
committed without the file: it was silently lost. Judged by what a reader lists after
job commit, on Azurite.
"""

from __future__ import annotations

import adlfs
import fsspec
import pytest
from helpers import data_files

import magicfs
from magicfs.errors import UnsupportedTaskOperation


@pytest.fixture
def installed():
    """``magicfs.install()`` for one test; always undone."""
    magicfs.install()
    yield
    magicfs.uninstall()


def _listing(options, root: str) -> list[str]:
    """The data files under ``root`` (the job commit records under ``_magicfs/`` aside)."""
    plain = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **options)
    return data_files(sorted(plain.find(root)))


def test_plain_abfs_writes_reach_a_block_list_job(installed, azurite_server, azure_container):
    options = azurite_server.storage_options
    dest = f"abfs://{azure_container}/out"
    with magicfs.write_job(dest, storage_options=options) as job:
        assert job.committer.name == "block-list"
        with job.task(0) as task:
            fs = fsspec.filesystem("abfs", **options)  # the installed class, no block_lists
            fs.pipe_file(task.path("a.csv"), b"through install()")
            with fsspec.open(f"abfs://{task.path('b.csv')}", "wb", **options) as f:
                f.write(b"through fsspec.open")
            # a chained task URL with the store's plain options (no job.storage_options)
            with fsspec.open(task.url("c.csv"), "wb", abfs=options) as f:
                f.write(b"through magic::abfs")
            # nothing visible before job commit, nothing in a manifest job's tree
            assert _listing(options, f"{azure_container}/out/a.csv") == []
            assert not any("/_temporary/" in p for p in _listing(options, azure_container))
    root = f"{azure_container}/out"
    files = ["_SUCCESS", "a.csv", "b.csv", "c.csv"]
    assert _listing(options, root) == [f"{root}/{name}" for name in files]
    plain = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **options)
    assert plain.cat_file(f"{root}/a.csv") == b"through install()"
    assert plain.cat_file(f"{root}/b.csv") == b"through fsspec.open"
    assert plain.cat_file(f"{root}/c.csv") == b"through magic::abfs"


def test_plain_abfs_writes_still_reach_a_manifest_job(installed, azurite_server, azure_container):
    options = azurite_server.storage_options
    dest = f"abfs://{azure_container}/out"
    job = magicfs.write_job(dest, committer="manifest", storage_options=options)
    with (
        job,
        job.task(0) as task,
        fsspec.open(f"abfs://{task.path('m.csv')}", "wb", **options) as f,
    ):
        f.write(b"manifest")
    root = f"{azure_container}/out"
    assert _listing(options, root) == [f"{root}/_SUCCESS", f"{root}/m.csv"]


def test_a_filesystem_that_says_no_block_lists_is_refused_on_a_block_list_job(
    azurite_server, azure_container
):
    """``block_lists=False`` said outright, for a job whose committer is block-list: the
    write is refused at ``open()``, naming the option, before any byte is taken."""
    options = azurite_server.storage_options
    dest = f"abfs://{azure_container}/out"
    with magicfs.write_job(dest, storage_options=options) as job:
        task = job.committer.task_attempt(0)
        job.committer.setup_task(task)
        fs = magicfs.MagicFileSystem(
            target_protocol="abfs", target_options=options, block_lists=False
        )
        with pytest.raises(
            UnsupportedTaskOperation, match=r"block_lists=False.*block-list.*block_lists=True"
        ):
            fs.open(task.path("x.csv"), "wb")
        job.committer.abort_task(task)
    assert _listing(options, azure_container) == [f"{azure_container}/out/_SUCCESS"]
