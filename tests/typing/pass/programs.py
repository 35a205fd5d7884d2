"""Programs whose types both checkers must infer exactly (checked by `make typecheck`)."""

from __future__ import annotations

from typing import assert_type

from pydantic import BaseModel
from returns.result import Result

from op import (
    Budget,
    BudgetExhausted,
    Op,
    Response,
    TimedOut,
    ToolResult,
    TurnRecord,
    agent,
    ask,
    get,
    infer,
    limit,
    now,
    par,
    timeout,
    tool,
    uuid,
)
from state import CRDTModel, GCounter, GSet


class CodeState(CRDTModel):
    files: GSet[str] = GSet()
    tokens: GCounter = GCounter()


def count_words(text: str) -> Op[int]:
    reply = yield from infer(text)
    return len(reply.text.split())


def program(task: str) -> Op[tuple[int, str]]:
    reply = yield from infer(task, tools=["read_file"])
    assert_type(reply, Response)
    result = yield from tool("read_file", {"path": "a.py"})
    assert_type(result, ToolResult)
    record = yield from agent("claude-code", task)
    assert_type(record, TurnRecord)
    limited = yield from limit(Budget(tokens=100), count_words(task))
    assert_type(limited, Result[int, BudgetExhausted])
    timed = yield from timeout(30, count_words(task))
    assert_type(timed, Result[int, TimedOut])
    pair = yield from par(count_words("a"), infer("b"))
    assert_type(pair, tuple[int, Response])
    many = yield from par(*[count_words(w) for w in ("a", "b", "c", "d", "e", "f")])
    assert_type(many, tuple[int, ...])
    state = yield from get(CodeState)
    assert_type(state, CodeState)
    assert_type((yield from now()), float)
    assert_type((yield from uuid()), str)
    answer = yield from ask("which branch?")
    assert_type(answer, str)
    words = limited.value_or(0)
    return words, answer


class Plan(BaseModel):
    title: str
    steps: list[str]


def typed_answers(task: str) -> Op[int]:
    plan = yield from infer(task, output=Plan)
    assert_type(plan, Plan)
    retried = yield from infer([], model="openai:gpt-4.1-mini", output=Plan, retries=0)
    assert_type(retried, Plan)
    plain = yield from infer(task, max_tokens=5)
    assert_type(plain, Response)
    return len(plan.steps) + len(retried.title)


def run_keeps_the_result_type() -> str:
    from interpreters import MemoryJournal, ScriptedModel, run

    def hello() -> Op[str]:
        reply = yield from infer("hello")
        return reply.text

    text: str = run(hello, model=ScriptedModel(["hi"]), db=MemoryJournal()).value
    return text
