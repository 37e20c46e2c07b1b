"""Ray Data's committed datasink (public name; see :mod:`magicfs.integrations.ray`)."""

from .integrations.ray import FORMATS, CommittedDatasink

__all__ = ["FORMATS", "CommittedDatasink"]
