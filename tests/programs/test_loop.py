"""programs.loop.tool_loop: the loop, its hooks, and how it ends."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from interpreters import MemoryJournal, ScriptedModel, run
from op import Inc, Message, Op, Response, RunFailed, ToolCall, ToolResult, emit, update
from programs.loop import CUT_OFF, tool_loop
from state import CRDTModel, GCounter


class Seen(CRDTModel):
    replies: GCounter = GCounter()


def echo(text: str) -> str:
    return text


def _call(i: int, text: str = "ping") -> Response:
    return Response(tool_calls=(ToolCall(id=f"c{i}", name="echo", arguments={"text": text}),))


def _kinds(journal: MemoryJournal, run_id: str) -> list[str]:
    return [
        e.kind for e in sorted(journal.entries(run_id), key=lambda e: int(e.address.split(".")[0]))
    ]


def test_hooks_run_in_order_between_the_loops_own_effects() -> None:
    order: list[str] = []

    def on_reply(reply: Response) -> Op[None]:
        order.append("reply")
        yield from update(replies=Inc(1))

    def on_result(call: ToolCall, result: ToolResult) -> None:
        order.append(f"result {call.id} {result.output}")

    def on_turn(step: int, calls: Sequence[tuple[ToolCall, ToolResult]]) -> Op[None]:
        order.append(f"turn {step} {len(calls)}")
        yield from emit("turn", {"step": step})

    def prog() -> Op[str]:
        reply, _ = yield from tool_loop(
            [Message.user("go")],
            tools=["echo"],
            on_reply=on_reply,
            on_result=on_result,
            on_turn=on_turn,
        )
        return reply.text

    journal = MemoryJournal()
    model = ScriptedModel([_call(1), Response(text="done")])
    result = run(prog, model=model, tools=[echo], db=journal, state=Seen())
    assert result.value == "done"
    assert order == ["reply", "result c1 ping", "turn 1 1", "reply"]
    assert isinstance(result.state, Seen) and result.state.replies.value == 2
    # infer, (update), tool, emit, infer, (update): state effects are not journaled
    assert _kinds(journal, result.run_id) == ["infer", "tool", "emit", "infer"]


def test_the_conversation_holds_each_message_once() -> None:
    def prog() -> Op[int]:
        _, history = yield from tool_loop([Message.user("go")], tools=["echo"], max_steps=2)
        return len(history)

    # user, (assistant + tool) x 2 when the loop stops at max_steps: the last assistant
    # message is not added twice
    model = ScriptedModel([_call(1), _call(2)])
    assert run(prog, model=model, tools=[echo]).value == 5


def test_max_steps_emits_by_default_and_leaves_the_tool_calls_on_the_last_reply() -> None:
    def prog() -> Op[bool]:
        reply, _ = yield from tool_loop([Message.user("go")], tools=["echo"], max_steps=1)
        return bool(reply.tool_calls)

    journal = MemoryJournal()
    result = run(prog, model=ScriptedModel([_call(1)]), tools=[echo], db=journal)
    assert result.value is True
    emitted = [e for e in journal.entries(result.run_id) if e.kind == "emit"]
    assert len(emitted) == 1 and "max_steps_reached" in emitted[0].effect_json


def test_a_hook_that_raises_stops_the_loop() -> None:
    def give_up(steps: int) -> None:
        raise RuntimeError(f"still calling tools after {steps} turns")

    def prog() -> Op[str]:
        reply, _ = yield from tool_loop(
            [Message.user("go")], tools=["echo"], max_steps=2, on_max_steps=give_up
        )
        return reply.text

    result = run(prog, model=ScriptedModel([_call(1), _call(2)]), tools=[echo])
    with pytest.raises(RunFailed, match="still calling tools after 2 turns"):
        _ = result.value


def test_an_answer_cut_by_max_tokens_is_not_taken_as_the_end() -> None:
    def prog() -> Op[tuple[str, list[str]]]:
        reply, history = yield from tool_loop([Message.user("go")], params={"max_tokens": 7})
        return reply.text, [m.role for m in history]

    model = ScriptedModel([Response(text="half an ans", stop_reason="max_tokens"), "done"])
    assert run(prog, model=model).value == ("done", ["user", "assistant", "user", "assistant"])
    assert model.requests[1].messages[-1].content == CUT_OFF
    assert [r.params for r in model.requests] == [{"max_tokens": 7}] * 2


def test_a_loop_that_is_only_ever_cut_off_ends_at_max_steps() -> None:
    def prog() -> Op[str]:
        reply, _ = yield from tool_loop([Message.user("go")], max_steps=2)
        return reply.stop_reason

    cut = Response(text="...", stop_reason="max_tokens")
    assert run(prog, model=ScriptedModel([cut, cut])).value == "max_tokens"


def test_a_tool_the_model_was_not_offered_does_not_run() -> None:
    ran: list[str] = []

    def secret_door(text: str) -> str:
        ran.append(text)
        return "opened"

    def prog() -> Op[list[str]]:
        _, history = yield from tool_loop([Message.user("go")], tools=["echo"])
        return [m.content for m in history if m.role == "tool"]

    sneaky = Response(
        tool_calls=(
            ToolCall(id="c1", name="secret_door", arguments={"text": "x"}),
            ToolCall(id="c2", name="echo", arguments={"text": "fine"}),
        )
    )
    journal = MemoryJournal()
    result = run(
        prog,
        model=ScriptedModel([sneaky, Response(text="ok")]),
        tools=[echo, secret_door],
        db=journal,
    )
    assert ran == [], "the tool that was not offered did not run"
    assert "tool 'secret_door' was not offered here; the tools are: echo" in result.value[0]
    assert result.value[1] == "fine"
    assert _kinds(journal, result.run_id) == ["infer", "tool", "infer"]
