"""``magicfs server``: an S3 server on 127.0.0.1 to try magicfs with, in a terminal.

The embedded S3 server (moto, data in memory; :mod:`magicfs.integrations.embedded_s3`)
in this process, with its buckets made before it answers, on a free loopback port unless
``--port`` names one. It prints the options to use (a Python ``opts = {...}`` line, the
AWS CLI's and magicfs's flags) and serves until Ctrl-C or SIGTERM; it starts no other
process, so stopping it leaves nothing behind. In a Python process,
``magicfs.local_s3(bucket="bkt")`` gives the same server without a terminal.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..embedded_s3 import bucket_argument, serve
from .common import EXIT_FAILED, EXIT_OK

#: The bucket the server has when ``--bucket`` is not given (the one the docs use).
DEFAULT_BUCKET = "bkt"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "server",
        help="run an S3 server on 127.0.0.1 (moto, in memory) and print the options to use",
        description="Run an S3 server (moto, data in memory) on 127.0.0.1 with a bucket, "
        "print the options that reach it (Python's opts, the AWS CLI's, magicfs's), and "
        "serve until Ctrl-C or SIGTERM. Nothing leaves the machine; stopping it leaves "
        "no process behind. Needs the demo extra (pip install 'magicfs[demo]').",
    )
    parser.add_argument(
        "--bucket",
        action="append",
        type=bucket_argument,
        metavar="NAME",
        help=f"a bucket the server has from the start (repeatable; default {DEFAULT_BUCKET})",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=0,
        help="the port on 127.0.0.1 (default 0: a free one)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Serve until stopped. A missing moto is one line and exit 1; so is a port that
    cannot be bound (werkzeug, which moto's server runs on, says so and exits 1)."""
    try:
        serve(args.port, buckets=args.bucket or [DEFAULT_BUCKET], ready_line=False)
    except ModuleNotFoundError as e:
        print(f"magicfs: {e}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: a number from 0 to 65535")
    return int(text)
