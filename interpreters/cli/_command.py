"""How a command of ``opdsl`` is declared: its name, what it does, and every option it takes.

Each group of commands (``_run.py``, ``_going_on.py``, ``_reading.py``, ``_show.py``,
``_store.py``, ``_project.py``) ends with its ``COMMANDS``: one :class:`Command` each, which
lists its options in the order ``--help`` shows them. Options more than one command takes are
the values below (``DB``, ``TASK_QUEUE``, ``NAMED_CODE``, ...); a command names them, never
the other way round. What ``--temporal`` means for a command is declared on it
(:class:`OnTemporal`), and so is whether it imports code a journal names.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DB",
    "DETACH",
    "JSON",
    "MCP",
    "NAMED_CODE",
    "TASK_QUEUE",
    "TEMPORAL",
    "Command",
    "RUN",
    "OnTemporal",
    "Option",
    "UsageError",
]


class UsageError(Exception):
    """Bad command-line input: one line on stderr, status 2."""


@dataclass(frozen=True, slots=True, init=False, eq=False)
class Option:
    """One argument of a command, as :meth:`argparse.ArgumentParser.add_argument` takes it
    (one value, named where commands share it; compared by identity: its settings may hold
    a list).

    Example:
        >>> Option("--json", action="store_true").flags
        ('--json',)
    """

    flags: tuple[str, ...]
    settings: dict[str, Any]

    def __init__(self, *flags: str, **settings: Any) -> None:
        object.__setattr__(self, "flags", flags)
        object.__setattr__(self, "settings", settings)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **self.settings)


class OnTemporal(enum.Enum):
    """What ``--temporal HOST:PORT`` means for a command."""

    NO = "no"
    """The command takes no ``--temporal``."""
    READS = "reads"
    """It reads runs: with ``--temporal`` it reads the server's runs instead of a journal."""
    RUNS = "runs"
    """It starts, forks or answers a run there."""
    SERVES = "serves"
    """It serves the server's runs, and cannot work without it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """One subcommand: ``opdsl NAME ...``."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    options: tuple[Option, ...] = ()
    """Its own options, after ``--db`` (every command takes it) and ``--temporal``."""
    temporal: OnTemporal = OnTemporal.NO
    code_from_journal: bool = False
    """It imports the code a journal names (so the current folder goes last on the path)."""

    def add_to(self, commands: Any) -> None:
        """Add this command to ``commands``, the parser's subparsers."""
        parser: argparse.ArgumentParser = commands.add_parser(self.name, help=self.help)
        parser.set_defaults(declared=self)
        DB.add_to(parser)
        if self.temporal is not OnTemporal.NO:
            TEMPORAL.add_to(parser)
        for option in self.options:
            option.add_to(parser)


DB = Option("--db", help="journal file (default: $OPDSL_DB or .opdsl/runs.db)")
TEMPORAL = Option("--temporal", metavar="HOST:PORT", help="the runs are on this Temporal server")
TASK_QUEUE = Option(
    "--task-queue", default="opdsl", help="the Temporal task queue (default: opdsl)"
)
DETACH = Option("--detach", action="store_true", help="with --temporal: do not wait for the end")
JSON = Option("--json", action="store_true", help="machine-readable output")
MCP = Option(
    "--mcp",
    action="append",
    default=[],
    help="an MCP server whose tools the run gets (in place of those it recorded, when it goes "
    "on), NAME=COMMAND or NAME=URL; options in brackets: "
    "NAME[network,env=VAR,prefix=P,timeout=S,unconfined]=... (repeatable)",
)
RUN = Option("run")

NAMED_CODE = (
    Option(
        "--program",
        help="module:function; needed for a run imported, or not sealed as yours (opdsl trust)",
    ),
    Option("--state", help="the state type, module:Class; needed where --program is"),
    Option(
        "--accept-changed-code",
        action="store_true",
        help="run the program, tools and state type as their files are now, even if they "
        "changed or moved since the run started",
    ),
)
"""The options of the commands that go on with a run its journal names the code of."""
