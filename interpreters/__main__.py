"""The ``opdsl`` command (also ``python -m interpreters``)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opdsl", description="Run agent programs written as generators.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the example program offline with a scripted model")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from interpreters._demo import demo

        return demo()
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first


if __name__ == "__main__":
    sys.exit(main())
