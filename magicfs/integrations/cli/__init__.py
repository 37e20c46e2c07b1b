"""The ``magicfs`` command line (argparse): the demo and the operator tools.

* ``magicfs demo``: the main job against an embedded S3 server on 127.0.0.1;
* ``magicfs server``: that S3 server on 127.0.0.1 with a bucket, to try magicfs with,
  until Ctrl-C (:mod:`.server`);
* ``magicfs uploads list|abort PATH``: pending multipart uploads under an S3 path
  (:mod:`.uploads`, Hadoop's ``hadoop s3guard uploads``);
* ``magicfs jobs list|recover|rollback|cleanup PATH``: jobs left under a destination
  after a crash, and how each is finished or rolled back (:mod:`.jobs`);
* ``magicfs inspect FILE``: validate and print a commit record (:mod:`.inspect_record`);
* ``magicfs success PATH``: a committed job's summary from its ``_SUCCESS``
  (:mod:`.success`, Hadoop's ``mapred successfile``).

Exit codes, errors, store options and logging: :mod:`.common`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..extras import DEMO_MODULES, require
from . import inspect_record, jobs, server, success, uploads
from .common import EXIT_FAILED, CliError, configure_logging, scrub

log = logging.getLogger("magicfs.cli")

EPILOG = (
    "exit codes: 0 ok; 1 check failed (invalid record, uploads found with --fail-if-any, "
    "no successful _SUCCESS) or the store could not be read; 2 usage error. "
    "Run 'magicfs COMMAND --help' for a command's options."
)


def build_parser() -> argparse.ArgumentParser:
    from ... import __version__

    parser = argparse.ArgumentParser(
        prog="magicfs",
        description="Commit job output to object stores without rename.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"magicfs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run the main job against an embedded S3 server",
        description="Run a realistic job on an S3 server embedded on 127.0.0.1 (moto, "
        "nothing leaves the machine), made as slow as S3 (latency per request, server-side "
        "copy bandwidth): a partitioned Parquet dataset written by four tasks, one failing "
        "and retried, one speculative duplicate; then the same data committed by rename "
        "(FileOutputCommitter v1) for comparison, measured.",
    )
    demo.add_argument(
        "--keep", action="store_true", help="leave the server running and print how to use it"
    )
    server.add_parser(sub)
    uploads.add_parser(sub)
    jobs.add_parser(sub)
    inspect_record.add_parser(sub)
    success.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        try:
            require("demo", DEMO_MODULES, "magicfs demo")
        except ModuleNotFoundError as e:
            print(f"magicfs: {e}", file=sys.stderr)
            return EXIT_FAILED
        from ..demo import run_demo

        return run_demo(keep=args.keep)
    if args.command == "server":
        return server.run(args)
    configure_logging(args.verbose)
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run the subcommand; expected failures become one line on stderr and an exit code."""
    try:
        code: int = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except CliError as e:
        print(f"magicfs: {scrub(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("magicfs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`magicfs ... | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as e:  # a bug or an unforeseen store error: one line, details at -vv
        log.debug("unexpected error", exc_info=True)
        message = scrub(f"{type(e).__name__}: {e}")
        print(f"magicfs: unexpected error: {message} (run with -vv for details)", file=sys.stderr)
        return EXIT_FAILED


__all__ = ["build_parser", "main"]


if __name__ == "__main__":
    sys.exit(main())
