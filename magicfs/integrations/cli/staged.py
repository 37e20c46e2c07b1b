"""``magicfs uploads list|abort PATH`` on a store that cannot discard pending writes.

On such a store (Azure Blob: its staged blocks) the store's operator view
(:mod:`magicfs.stores.operator_view`) lists the names under PATH holding staged data and
no published file, with their staged parts and bytes, which the store may bill for until
they go; it says why they cannot be discarded
(:attr:`~magicfs.stores.operator_view.OperatorView.cannot_discard`).

Decision: ``abort`` changes nothing there and says why; ``--force`` is refused. The
only way to force staged data out would be to publish something at that name, which
would make a file visible: magicfs never does that.
"""

from __future__ import annotations

import argparse

from ...stores.operator_view import OperatorView
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    human_bytes,
    plural,
    print_json,
    store_errors,
)


def run_staged(args: argparse.Namespace, view: OperatorView, path: str, store: str) -> int:
    """``uploads list|abort`` for a PATH on a store that cannot discard (``store``: its
    registered name, for the JSON document)."""
    if args.action == "abort" and args.force:
        raise CliError(f"{args.path}: cannot abort here. {view.cannot_discard}", EXIT_USAGE)
    if args.job or args.older_than:
        raise CliError(
            f"{args.path}: --job and --older-than select pending writes a store can "
            "discard; on this store the listing shows every name under PATH with staged "
            f"{view.part_noun}s",
            EXIT_USAGE,
        )
    container, prefix = view.split(path)
    if not container:
        raise CliError(f"{args.path}: no container in the path", EXIT_USAGE)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    with store_errors(args.path):
        staged = list(view.iterate(view.alist_pending(f"{container}/{prefix}")))
    total = sum(entry.bytes for entry in staged)
    if args.json:
        document = {
            "path": args.path,
            "store": store,
            "staged": [
                {"name": e.path, "blocks": e.parts or 0, "bytes": e.bytes, "url": view.url(e.path)}
                for e in staged
            ],
            "total": {"count": len(staged), "bytes": total},
        }
        print_json(document)
    else:
        for entry in staged:
            print(
                f"  {entry.bytes:>15,} bytes  {view.url(entry.path)}  "
                f"{plural(entry.parts or 0, view.part_noun)}"
            )
        found = plural(len(staged), "name")
        print(f"Total: {found} with {view.part_noun}s, {human_bytes(total)} staged.")
        if args.action == "abort":
            print(view.cannot_discard)
    if args.action == "list" and getattr(args, "fail_if_any", False) and staged:
        return EXIT_FAILED
    return EXIT_OK
