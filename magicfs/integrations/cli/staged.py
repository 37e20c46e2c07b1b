"""``magicfs uploads list|abort PATH`` on Azure Blob: blobs with staged, unpublished blocks.

Azure's counterpart of a parked multipart upload is a blob name holding staged
("uncommitted") blocks and no published blob: what a block-list job leaves when a task
attempt was aborted, superseded or killed. Such names are invisible to readers; the
listing (``list_blobs`` with uncommitted blobs) shows them with their staged blocks and
bytes, which Azure bills for until they go.

Decision: ``abort`` changes nothing on Azure and says why. Azure has no request that
deletes staged blocks alone; they go 7 days after they were staged, or when the name is
next published (any Put Block List or Put Blob on it). The only way to force them out
now is to publish something at that name, which would make a file visible: magicfs never
does that. ``abort`` therefore lists what would stay, and ``--force`` is refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...stores.azure.blocks import BlockStore
from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError, human_bytes, plural, print_json

NO_ABORT = (
    "Azure has no request that deletes staged blocks alone: they expire 7 days after "
    "staging, or are discarded when the name is next written. Nothing was changed."
)


def run_azure(args: argparse.Namespace, fs: Any, path: str) -> int:
    """``uploads list|abort`` for an ``abfs://``/``az://`` PATH."""
    if args.action == "abort" and args.force:
        raise CliError(f"{args.path}: cannot abort on Azure. {NO_ABORT}", EXIT_USAGE)
    if args.job or args.older_than:
        raise CliError(
            f"{args.path}: --job and --older-than select S3 uploads; on Azure the listing "
            "shows every name under PATH with staged blocks",
            EXIT_USAGE,
        )
    store = BlockStore(fs)
    container, prefix = store.split(path)
    if not container:
        raise CliError(f"{args.path}: no container in the path", EXIT_USAGE)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    staged = store.run(store.staged_blobs(container, prefix))
    total = sum(entry["bytes"] for entry in staged)
    if args.json:
        document = {
            "path": args.path,
            "store": "azure-block-list",
            "staged": [{**e, "url": store.url(e["name"])} for e in staged],
            "total": {"count": len(staged), "bytes": total},
        }
        print_json(document)
    else:
        for entry in staged:
            print(
                f"  {entry['bytes']:>15,} bytes  {store.url(entry['name'])}  "
                f"{plural(entry['blocks'], 'staged block')}"
            )
        found = plural(len(staged), "name")
        print(f"Total: {found} with staged blocks, {human_bytes(total)} staged.")
        if args.action == "abort":
            print(NO_ABORT)
    if args.action == "list" and getattr(args, "fail_if_any", False) and staged:
        return EXIT_FAILED
    return EXIT_OK
