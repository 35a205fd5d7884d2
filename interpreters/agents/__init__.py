"""Agents: what performs the ``agent`` effect. Coding-agent CLIs run as subprocesses under the
turn contract (``_base``); one module per backend (``claude_code``, ``codex``, ``noop``);
``register_backend`` adds another, written with :mod:`interpreters.agents.kit`."""

from interpreters.agents._base import AgentError, CliBackend, backends, register_backend
from interpreters.agents.claude_code import ClaudeCodeBackend
from interpreters.agents.codex import CodexBackend
from interpreters.agents.noop import NoopBackend

__all__ = [
    "AgentError",
    "ClaudeCodeBackend",
    "CliBackend",
    "CodexBackend",
    "NoopBackend",
    "backends",
    "register_backend",
]
