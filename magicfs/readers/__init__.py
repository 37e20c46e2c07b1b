"""What readers of a destination use: the snapshot of its committed jobs (:mod:`.snapshot`)."""

from .snapshot import Snapshot, snapshot

__all__ = ["Snapshot", "snapshot"]
