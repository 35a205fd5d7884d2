"""Agents: what performs the ``agent`` effect. Coding-agent CLIs (Claude Code, Codex) run as
subprocesses under the turn contract; ``register_backend`` adds another."""

from interpreters.agents._cli import (
    AgentError,
    ClaudeCodeBackend,
    CliBackend,
    CodexBackend,
    NoopBackend,
    backends,
    register_backend,
)

__all__ = ["AgentError", "ClaudeCodeBackend", "CliBackend", "CodexBackend", "NoopBackend", "backends", "register_backend"]
