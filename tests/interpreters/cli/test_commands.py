"""The commands are their declarations: each takes ``--db``, ``--temporal`` when it declares
what that means for it, and the options it lists, in that order; nothing else wires them."""

from __future__ import annotations

import argparse

import pytest

from interpreters.cli._command import DB, TEMPORAL, OnTemporal
from interpreters.cli._main import COMMANDS, _parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_the_parser_has_one_subcommand_per_declared_command_in_the_order_declared() -> None:
    names = [c.name for c in COMMANDS]
    assert len(set(names)) == len(names)
    assert list(_subparsers(_parser())) == names


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_a_commands_options_are_db_its_temporal_and_those_it_lists(command: object) -> None:
    from interpreters.cli._command import Command

    assert isinstance(command, Command)
    sub = _subparsers(_parser())[command.name]
    taken = [a.option_strings or [a.dest] for a in sub._actions if a.dest != "help"]
    declared = [
        DB,
        *([TEMPORAL] if command.temporal is not OnTemporal.NO else []),
        *command.options,
    ]
    assert taken == [list(o.flags) for o in declared]
    assert sub.get_default("declared") is command


def test_the_commands_that_import_the_code_a_journal_names_are_the_ones_that_go_on_with_a_run() -> (
    None
):
    going_on = {c.name for c in COMMANDS if c.code_from_journal}
    # check replays the runs a journal holds, and whatif forks one, with the code it names
    assert going_on == {"resume", "replay", "answer", "check", "whatif"}
    assert [c.name for c in COMMANDS if c.temporal is OnTemporal.SERVES] == ["worker"]
