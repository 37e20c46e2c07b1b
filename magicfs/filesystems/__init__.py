"""The filesystem layer: ``MagicFileSystem`` and its task views (deferred, routed)."""

from ..stores.capabilities import is_s3
from .magic import MagicFileSystem

__all__ = ["MagicFileSystem", "is_s3"]
