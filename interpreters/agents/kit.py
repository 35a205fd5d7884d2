"""The backend kit: what an agent backend is written with. Every name here is documented API;
a backend imports nothing private.

A backend is a :class:`Backend`: an async callable ``(effect, call, tools=None) ->
TurnRecord`` that declares on its class ``name`` and its capabilities: ``serves_tools`` (it
can be given opdsl's bound tools), ``reports_cost`` (its records say what a turn cost; one
that does not cannot run under a ``usd`` budget), ``supports_cooperative_stop`` (a ``stop=``
predicate ends its turn cleanly at a message boundary, ``stopped=True``; arming one on a
backend that does not declare it is refused) and ``supports_max_turns`` (a turn that runs out
of ``max_turns`` returns its record with ``max_turns_exhausted=True``; ``cli_max_turns``: the
CLI keeps the cap itself, else opdsl counts its tool calls). It is registered with
``register_backend("name", factory)``. Each record's ``environment`` says what the turn ran
against: the CLI's ``cli_version``, the ``model``, the ``endpoint``
(:meth:`CliBackend.endpoint`).

A coding-agent CLI that prints JSON lines subclasses :class:`CliBackend`, which keeps the
turn contract (one ``AgentStart`` and ``AgentEnd``, tools paired and closed, hard and idle
timeouts that kill the process group, a crash or refusal as :class:`AgentError` carrying
the partial record) and gives only:

- ``name`` and ``command`` (the executable looked for on ``PATH``), ``homes`` (the
  environment variables naming folders the CLI keeps its state in) and ``home_state`` (what
  in ``HOME`` it writes: confined, the rest of the home folder is read-only to it);
- :meth:`CliBackend.argv` and, if the prompt goes on standard input, :meth:`CliBackend.stdin`
  (or :meth:`CliBackend.session` for a turn that needs more set up around it);
- :meth:`CliBackend.handle`, which reads one JSON line into the :class:`Turn` and raises
  :class:`Refused` to fail closed (:func:`check_init` checks an init line against what the
  effect allowed).

Example:
    >>> from interpreters.agents.kit import CliBackend, Turn
    >>> class Echo(CliBackend):
    ...     name, command = "echo-agent", "echo"
    ...     def argv(self, exe, effect):
    ...         return [exe, '{"type": "done", "text": "hi"}']
    ...     def handle(self, line, turn: Turn, effect):
    ...         turn.init_seen = turn.finished = True
    ...         turn.text = line["text"]
    >>> Echo.reports_cost, Echo.serves_tools
    (True, False)
"""

from interpreters.agents._base import (
    AgentError,
    Backend,
    CliBackend,
    Refused,
    Session,
    Turn,
    backends,
    check_init,
    register_backend,
)
from interpreters.agents._bridge import ToolHost
from interpreters.runtime._frame import Call as CallInfo

__all__ = [
    "AgentError",
    "Backend",
    "CallInfo",
    "CliBackend",
    "Refused",
    "Session",
    "ToolHost",
    "Turn",
    "backends",
    "check_init",
    "register_backend",
]
