"""The adapter contract (``tests/helpers/adapter_contract.py``) on every deferred store:
S3 (moto), Azure Blob (Azurite) and the in-process ``mem-deferred://``."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from helpers.adapter_contract import AdapterContract, mem_deferred_root


class TestS3Adapter(AdapterContract):
    def make(self, request: pytest.FixtureRequest) -> tuple[Any, str, str, dict[str, Any]]:
        import s3fs

        options = request.getfixturevalue("s3_options")
        bucket = request.getfixturevalue("bucket")
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        return fs, bucket, f"s3://{bucket}", {"storage_options": options}


class TestAzureAdapter(AdapterContract):
    def make(self, request: pytest.FixtureRequest) -> tuple[Any, str, str, dict[str, Any]]:
        import adlfs

        options = request.getfixturevalue("azurite_server").storage_options
        container = request.getfixturevalue("azure_container")
        fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **options)
        return fs, container, f"abfs://{container}", {"storage_options": options}


class TestMemDeferredAdapter(AdapterContract):
    def make(self, request: pytest.FixtureRequest) -> tuple[Any, str, str, dict[str, Any]]:
        root = f"adapter-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fs = mem_deferred_root(request, root)
        return fs, root, f"mem-deferred://{root}", {"fs": fs}
