"""Testing programs: the scripted interpreter (an ordered list of expected effects and their
answers) and the pytest plugin (``opdsl_scripted``, ``opdsl_cassette``)."""

from typing import TYPE_CHECKING

from interpreters.testing._scripted import ANY, Expect, ScriptedInterpreter, ScriptMismatch, expect

if TYPE_CHECKING:
    from interpreters.testing.pytest_plugin import Cassette

__all__ = ["ANY", "Cassette", "Expect", "ScriptMismatch", "ScriptedInterpreter", "expect"]


def __getattr__(name: str) -> object:
    # the plugin imports pytest: only when asked for
    if name == "Cassette":
        from interpreters.testing.pytest_plugin import Cassette

        return Cassette
    raise AttributeError(f"module 'interpreters.testing' has no attribute {name!r}")
