"""What a record says of a file opened ``"xb"`` (create only), for every deferred store.

A file opened ``"xb"`` (or written with ``pipe_file(..., mode="create")``) must not
replace an object. Its writer says so in its record, ``extraData["magicfs.if-none-match"]``
``"*"`` (the value of the HTTP condition that asks it), and the store's adapter reads it
at publish. How each store keeps the promise is its own (S3 with a condition on the
completion or a HEAD first: :mod:`.s3.conditional`; the in-process store under one lock:
:mod:`.memory_deferred.adapter`); the record's words are written once, here.
"""

from __future__ import annotations

from ..records import SinglePendingCommit

#: ``extraData`` key of a record whose file was opened ``xb`` (publish only if absent).
IF_NONE_MATCH_KEY = "magicfs.if-none-match"
#: Its value: "if none matches any" (``If-None-Match: *``).
ANY = "*"


def create_only_fields(mode: str) -> dict[str, str]:
    """The record's ``extraData`` for a file opened with ``mode``: the create-only field
    when ``mode`` is ``"xb"``, else nothing."""
    return {IF_NONE_MATCH_KEY: ANY} if "x" in mode else {}


def is_create_only(commit: SinglePendingCommit) -> bool:
    """Was ``commit``'s file opened ``"xb"`` (must its publish replace nothing)?"""
    return commit.extra_data.get(IF_NONE_MATCH_KEY) == ANY
