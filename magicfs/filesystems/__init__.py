"""The filesystem layer: ``MagicFileSystem`` and its two task views (S3, rename stores)."""

from ..stores.capabilities import is_s3
from .magic import MagicFileSystem

__all__ = ["MagicFileSystem", "is_s3"]
