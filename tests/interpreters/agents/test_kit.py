"""The backend kit: a backend written with nothing but ``interpreters.agents.kit`` runs under the
turn contract, and what it can do is declared on its class, never known elsewhere by name."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, ClassVar

from interpreters import MemoryJournal, run
from interpreters.agents.kit import Backend, CliBackend, Refused, Turn
from op import Agent, Budget, BudgetExhausted, Failure, Op, Success, TurnRecord, agent, limit
from tests.helpers import Recorder

ROOT = Path(__file__).resolve().parents[3]


class Echo(CliBackend):
    """A CLI that prints one JSON line (``echo``), read as a whole turn."""

    name: ClassVar[str] = "echo-agent"
    command: ClassVar[str] = "echo"

    def argv(self, exe: str, effect: Agent) -> list[str]:
        return [exe, '{"type": "init"}\n{"type": "done", "text": "hi from echo"}']

    def handle(self, line: dict[str, Any], turn: Turn, effect: Agent) -> None:
        if line["type"] == "init":
            turn.init_seen = True
        elif not turn.init_seen:
            raise Refused("acted before its init")
        else:
            turn.text = line["text"]
            turn.finished = True


class Unpriced(Echo):
    name: ClassVar[str] = "unpriced-agent"
    reports_cost: ClassVar[bool] = False


def ask(backend: str) -> Op[TurnRecord]:
    return (yield from agent(backend, "say hi"))


def under_a_usd_budget(backend: str) -> Op[Any]:
    return (yield from limit(Budget(usd=1.0), ask(backend)))


def test_a_backend_made_with_the_kit_alone_keeps_the_turn_contract() -> None:
    rec = Recorder()
    result = run(ask, "echo-agent", agents={"echo-agent": Echo()}, db=MemoryJournal(), on_event=rec)
    assert result.value.text == "hi from echo" and result.value.backend == "echo-agent"
    rec.check_protocol()
    assert isinstance(Echo(), Backend)


def test_a_backend_that_declares_it_reports_no_cost_is_refused_under_a_usd_budget() -> None:
    agents = {"echo-agent": Echo(), "unpriced-agent": Unpriced()}
    priced = run(under_a_usd_budget, "echo-agent", agents=agents, db=MemoryJournal()).value
    assert isinstance(priced, Success)
    refused = run(under_a_usd_budget, "unpriced-agent", agents=agents, db=MemoryJournal()).value
    assert isinstance(refused, Failure)
    exhausted = refused.failure()
    assert isinstance(exhausted, BudgetExhausted)
    assert "the unpriced-agent backend reports no cost" in str(exhausted.reason)


def test_codex_declares_it_reports_no_cost_and_both_that_they_serve_tools() -> None:
    from interpreters.agents import ClaudeCodeBackend, CodexBackend, NoopBackend

    assert (CodexBackend.reports_cost, CodexBackend.serves_tools) == (False, True)
    assert (ClaudeCodeBackend.reports_cost, ClaudeCodeBackend.serves_tools) == (True, True)
    assert (NoopBackend.reports_cost, NoopBackend.serves_tools) == (True, False)


PLUG_INS = [
    "interpreters/models/openai.py",
    "interpreters/models/ollama.py",
    "interpreters/models/anthropic.py",
    "interpreters/agents/claude_code.py",
    "interpreters/agents/codex.py",
    "interpreters/agents/noop.py",
]


def test_the_built_in_providers_and_backends_use_no_private_name_of_another_module() -> None:
    bad = []
    for rel in PLUG_INS:
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                bad += [f"{rel}: imports {a.name}" for a in node.names if a.name.startswith("_")]
            if isinstance(node, ast.Attribute) and node.attr == "__dict__":
                bad.append(f"{rel}:{node.lineno}: writes into an object's __dict__")
    assert not bad, "\n".join(bad)
