"""Commands that start the user off: ``opdsl demo`` and ``opdsl new PATH``."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from interpreters.cli._command import Command, Option
from interpreters.cli._inputs import version
from interpreters.cli._output import console

__all__ = ["DEMO", "NEW"]


def demo(a: argparse.Namespace) -> int:
    if a.which == "director":
        from interpreters.cli._demo_director import director_demo

        return director_demo(console())
    from interpreters.cli._demo import demo

    return demo(console())


def new(a: argparse.Namespace) -> int:
    from interpreters.cli._new import new_project

    written = new_project(a.path, version=version())
    root = Path(a.path)
    print(f"created {root}/ ({len(written)} files):")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: cd {shlex.quote(str(root))} && pip install -e '.[test]' && pytest")
    return 0


DEMO = Command(
    name="demo",
    help="an example program, offline: the Coder, or the director workflow",
    run=demo,
    options=(Option("which", nargs="?", choices=("coder", "director"), default="coder"),),
)

NEW = Command(
    name="new",
    help="a new agent program with its tests: opdsl new PATH",
    run=new,
    options=(Option("path"),),
)
