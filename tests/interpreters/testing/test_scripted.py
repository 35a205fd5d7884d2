"""The scripted interpreter: ordered (expected effect, answer) pairs, perform_sequence style."""

from __future__ import annotations

from typing import Any

import pytest

from interpreters import ANY, ScriptedInterpreter, ScriptMismatch, expect
from op import (
    Budget,
    Emit,
    Failure,
    Message,
    Op,
    Response,
    Success,
    Tool,
    ToolResult,
    checkpoint,
    emit,
    infer,
    limit,
    now,
    par,
    timeout,
    tool,
)


def program(path: str) -> Op[str]:
    yield from checkpoint("start")
    src = yield from tool("read_file", {"path": path})
    reply = yield from infer([Message.user(f"fix {src.output}")])
    yield from emit("fixed", {"path": path})
    return reply.text


def test_a_script_drives_the_program() -> None:
    result = ScriptedInterpreter(
        [
            (Tool(name="read_file", args={"path": "a.py"}), ToolResult(output="x = 1")),
            (expect("infer", messages=lambda ms: "x = 1" in ms[-1].content), "fixed it"),
            (expect("emit", name="fixed"), None),
        ]
    ).run(program, "a.py")
    assert result.value == "fixed it"


def test_emits_and_checkpoints_pass_unless_the_script_expects_them() -> None:
    result = ScriptedInterpreter(
        [
            (expect("tool", name="read_file", args=ANY), "src"),
            (expect("infer"), Response(text="ok")),
        ]
    ).run(program, "a.py")
    assert result.value == "ok"


def test_mismatch_prints_the_log_and_the_next_expected_effect() -> None:
    interp = ScriptedInterpreter(
        [
            (expect("tool", name="read_file"), "src"),
            (expect("tool", name="write_file"), "ok"),
        ]
    )
    with pytest.raises(ScriptMismatch) as info:
        interp.run(program, "a.py")
    text = str(info.value)
    assert "effect at address 3 does not match the script" in text
    assert "passed: 1 checkpoint(name='start')" in text
    assert "scripted: 2 tool(name='read_file'" in text
    assert "NOT FOUND: 3 infer(messages=" in text
    assert "NEXT EXPECTED: tool(name='write_file')" in text


def test_mismatch_is_not_swallowed_by_the_program() -> None:
    def careless() -> Op[str]:
        try:
            yield from tool("x", {})
        except Exception:
            return "swallowed"
        return "no"

    with pytest.raises(ScriptMismatch):
        ScriptedInterpreter([(expect("tool", name="y"), "")]).run(careless)


def test_unused_script_entries_fail_the_test() -> None:
    with pytest.raises(ScriptMismatch, match=r"the script expects more:\n  tool\(name='never'\)"):
        ScriptedInterpreter(
            [(expect("tool"), "a"), (expect("infer"), "b"), (expect("tool", name="never"), "")]
        ).run(program, "a.py")


def test_answers_can_be_functions_or_exceptions() -> None:
    def p() -> Op[Any]:
        r = yield from tool("echo", {"text": "hi"})
        try:
            yield from infer("x")
        except RuntimeError as exc:
            return r.output, str(exc)
        return None

    result = ScriptedInterpreter(
        [
            (expect("tool"), lambda eff: ToolResult(output=eff.args["text"] * 2)),
            (expect("infer"), RuntimeError("provider down")),
        ]
    ).run(p)
    assert result.value == ("hihi", "provider down")


def test_scopes_run_under_the_script_with_a_virtual_clock() -> None:
    def p() -> Op[Any]:
        a = yield from limit(Budget(model_calls=1), twice())
        b = yield from timeout(5, now())
        c = yield from par(tool("t", {"n": 1}), tool("t", {"n": 2}))
        return a, b, [r.output for r in c]

    def twice() -> Op[str]:
        yield from infer("1")
        yield from infer("2")
        return "both"

    result = ScriptedInterpreter(
        [
            (expect("infer"), "one"),
            (expect("now"), 12.5),
            (expect("tool", args={"n": 1}), "first"),
            (expect("tool", args={"n": 2}), "second"),
        ]
    ).run(p)
    a, b, c = result.value
    assert isinstance(a, Failure) and a.failure().exceeded == "model_calls"
    assert b == Success(12.5) and c == ["first", "second"]


def test_exact_effect_matching() -> None:
    def p() -> Op[None]:
        yield from emit("x", {"a": 1})

    ScriptedInterpreter([(Emit(name="x", data={"a": 1}), None)]).run(p)
    with pytest.raises(ScriptMismatch):
        ScriptedInterpreter([(Emit(name="x", data={"a": 2}), None)]).run(p)
