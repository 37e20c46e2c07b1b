"""The filesystem layer: ``MagicFileSystem`` and its task views (deferred, routed)."""

from ..stores.capabilities import speaks_s3
from .magic import MagicFileSystem

__all__ = ["MagicFileSystem", "speaks_s3"]
