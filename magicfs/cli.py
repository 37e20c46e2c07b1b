"""The ``magicfs`` command line (argparse)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magicfs", description="Commit job output to object stores without rename."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the main job against an embedded S3 server")
    demo.add_argument("--keep", action="store_true", help="leave the server running")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(keep=args.keep)
    return 2


if __name__ == "__main__":
    sys.exit(main())
