"""The local S3 servers' credentials and the options that bind s3fs and boto3 to them."""

from __future__ import annotations

from typing import Any

LOOPBACK = "127.0.0.1"
#: The local servers' credentials: moto and the stub take any; never real ones.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
CREDENTIALS = (ACCESS_KEY, SECRET_KEY)
REGION = "us-east-1"


def s3_storage_options(
    endpoint_url: str, credentials: tuple[str, str] = CREDENTIALS, region: str | None = None
) -> dict[str, Any]:
    """Options for ``s3fs.S3FileSystem`` (and ``fsspec.filesystem("s3", ...)``).

    ``region`` goes into ``client_kwargs`` only when given: with a region s3fs sends a
    ``LocationConstraint`` when it creates a bucket, which moto refuses for us-east-1.
    """
    client_kwargs: dict[str, Any] = {"endpoint_url": endpoint_url}
    if region is not None:
        client_kwargs["region_name"] = region
    key, secret = credentials
    return {"key": key, "secret": secret, "client_kwargs": client_kwargs}


def s3_boto3_client(
    endpoint_url: str,
    credentials: tuple[str, str] = CREDENTIALS,
    region: str = REGION,
    **config: Any,
) -> Any:
    """A boto3 S3 client bound to ``endpoint_url``; ``config``: ``botocore.config.Config``
    options (``retries={"total_max_attempts": 1}``, ``read_timeout=...``)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=credentials[0],
        aws_secret_access_key=credentials[1],
        config=Config(**config) if config else None,
    )


class S3Endpoint:
    """``storage_options`` and ``boto3_client()`` of a server at ``endpoint_url``.

    A server class sets ``credentials`` (its keys) and ``region_name`` (``None``: none in
    the storage options, see :func:`s3_storage_options`) and defines ``endpoint_url``.
    """

    credentials: tuple[str, str] = CREDENTIALS
    region_name: str | None = None

    @property
    def endpoint_url(self) -> str:
        raise NotImplementedError

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``s3fs.S3FileSystem`` (add ``skip_instance_cache=True`` for a fresh one)."""
        return s3_storage_options(self.endpoint_url, self.credentials, self.region_name)

    def boto3_client(self, **config: Any) -> Any:
        """A boto3 S3 client of this server; ``config``: ``botocore.config.Config`` options."""
        return s3_boto3_client(
            self.endpoint_url, self.credentials, self.region_name or REGION, **config
        )
