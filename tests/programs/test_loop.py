"""programs.loop.tool_loop: the loop, its hooks, and how it ends."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from interpreters import MemoryJournal, ScriptedModel, run
from op import Inc, Message, Op, Response, RunFailed, ToolCall, ToolResult, emit, update
from programs.loop import CUT_OFF, echoed, text_result, tool_loop
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


# -- tool calls written as text ---------------------------------------------------------------


def add(a: int, b: int) -> str:
    return str(a + b)


def _texts(journal: MemoryJournal, run_id: str) -> list[str]:
    """What the model really said, call by call, as the journal has it."""
    ordered = sorted(journal.entries(run_id), key=lambda e: int(e.address.split(".")[0]))
    return [
        Response.model_validate_json(e.result_json or "").text for e in ordered if e.kind == "infer"
    ]


def _loop_with(tools: list[str]) -> Op[tuple[str, list[Message]]]:
    reply, history = yield from tool_loop([Message.user("go")], tools=tools, max_steps=4)
    return reply.text, history


@pytest.mark.parametrize(
    "answer",
    [
        '{"name": "add", "arguments": {"a": 2, "b": 3}}',
        'I will add them.\n```json\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n```',
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
        '[{"name": "add", "parameters": {"a": 2, "b": 3}}]',
    ],
    ids=["bare", "fenced", "tagged", "list"],
)
def test_a_call_written_as_text_is_performed_and_replays(answer: str) -> None:
    from interpreters import replay

    journal = MemoryJournal()
    model = ScriptedModel([answer, "the sum is 5"])
    result = run(_loop_with, ["add"], model=model, tools=[add], db=journal)
    text, history = result.value
    assert text == "the sum is 5"
    assert _kinds(journal, result.run_id) == ["infer", "tool", "infer"]
    [tool_entry] = [e for e in journal.entries(result.run_id) if e.kind == "tool"]
    assert ToolResult.model_validate_json(tool_entry.result_json or "").output == "5"
    # the journal keeps the answer as the model wrote it; the call read from it is the loop's
    assert _texts(journal, result.run_id) == [answer, "the sum is 5"]
    assert history[1] == Message(role="assistant", content=answer)
    assert history[2] == Message.user("Result of add:\n5")
    assert model.requests[1].messages[-1].content == "Result of add:\n5"
    assert replay(result.run_id, db=journal).value == result.value


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (
            '{"name": "rm_rf", "arguments": {"path": "/"}}',
            "tool 'rm_rf' was not offered here; the tools are: add",
        ),
        (
            '```json\n{"name": "add", "arguments": {"a": 2, "b": 3}\n```',
            "your tool call is not valid JSON (Expecting ',' delimiter at line 2 column 1)",
        ),
        ('{"name": "add", "arguments": [2, 3]}', "the \"arguments\" of the call of 'add' are not"),
        (
            '{"name": "add", "arguments": {"a": 2, "b": 3}, "then": "rm"}',
            "the call of 'add' has keys a call does not have: then",
        ),
    ],
    ids=["not-offered", "bad-json", "arguments-not-an-object", "extra-keys"],
)
def test_a_call_written_as_text_that_is_not_one_runs_nothing_and_is_answered(
    answer: str, says: str
) -> None:
    ran: list[str] = []

    def rm_rf(path: str) -> str:
        ran.append(path)
        return "gone"

    journal = MemoryJournal()
    model = ScriptedModel([answer, "sorry, done"])
    result = run(_loop_with, ["add"], model=model, tools=[add, rm_rf], db=journal)
    assert result.value[0] == "sorry, done"  # the bad call was not taken as the end
    assert ran == []
    assert _kinds(journal, result.run_id) == ["infer", "infer"]
    told = model.requests[1].messages[-1]
    assert told.role == "user" and says in told.content, told.content
    assert told.content.startswith("Your answer held no tool call that could be run: ")
    assert _texts(journal, result.run_id) == [answer, "sorry, done"]


def test_a_text_call_whose_arguments_do_not_validate_is_refused_by_the_tool() -> None:
    journal = MemoryJournal()
    model = ScriptedModel(['{"name": "add", "arguments": {"a": "two", "c": 3}}', "ok"])
    result = run(_loop_with, ["add"], model=model, tools=[add], db=journal)
    assert result.value[0] == "ok"
    told = model.requests[1].messages[-1].content
    assert told.startswith("add failed: invalid arguments for tool 'add': "), told
    assert "a: " in told and "b: " in told and "c: " in told, told


def test_an_answer_that_is_json_but_no_call_is_the_end() -> None:
    model = ScriptedModel(['{"name": "Ada", "age": 36}'])
    result = run(_loop_with, ["add"], model=model, tools=[add])
    assert result.value[0] == '{"name": "Ada", "age": 36}'
    assert len(model.requests) == 1


def test_two_calls_written_as_text_are_both_performed_and_answered_in_one_message() -> None:
    answer = (
        '```json\n{"name": "add", "arguments": {"a": 1, "b": 1}}\n```\n'
        '```json\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n```'
    )
    seen: list[str] = []

    def on_result(call: ToolCall, result: ToolResult) -> None:
        seen.append(f"{call.id} {result.output}")

    def prog() -> Op[str]:
        reply, _ = yield from tool_loop(
            [Message.user("go")], tools=["add"], on_result=on_result, max_steps=3
        )
        return reply.text

    model = ScriptedModel([answer, "2 and 4"])
    assert run(prog, model=model, tools=[add]).value == "2 and 4"
    assert seen == ["text_1_1 2", "text_1_2 4"]
    assert model.requests[1].messages[-1].content == "Result of add:\n2\n\nResult of add:\n4"


def test_on_call_answers_a_call_in_place_of_the_tool_and_the_model_reads_it() -> None:
    ran: list[str] = []

    def echo(text: str) -> str:  # the tool, counting its runs
        ran.append(text)
        return text

    def refuse_pong(call: ToolCall) -> ToolResult | None:
        if call.arguments.get("text") == "pong":
            return ToolResult.failure("refused: no pong")
        return None

    def prog() -> Op[str]:
        reply, _ = yield from tool_loop(
            [Message.user("go")], tools=["echo"], on_call=refuse_pong, max_steps=4
        )
        return reply.text

    model = ScriptedModel([_call(1, "pong"), _call(2, "ping"), Response(text="done")])
    assert run(prog, model=model, tools=[echo]).value == "done"
    assert ran == ["ping"], "the refused call did not run"
    told = model.requests[1].messages[-1]
    assert told.role == "tool" and told.content == "error: refused: no pong"


def test_echoed_finds_a_result_given_back_as_it_was_or_as_it_was_framed() -> None:
    read = ToolCall(id="c1", name="read_file", arguments={"path": "a.py"})
    wrote = ToolCall(id="c2", name="write_file", arguments={"path": "a.py", "content": "x"})
    done = ToolResult(output="wrote 1 characters to a.py")
    missing = ToolResult.failure("b.py does not exist")
    earlier = [(read, missing), (wrote, done)]
    assert echoed("wrote 1 characters to a.py\n", earlier) is wrote
    assert echoed(text_result(wrote, done), earlier) is wrote
    assert echoed("error: b.py does not exist", earlier) is read
    assert echoed("read_file failed: b.py does not exist\n", earlier) is read
    assert echoed("Result of read_file:\nsomething else", earlier) is read
    assert echoed("x = 1\n", earlier) is None and echoed("  \n", earlier) is None
