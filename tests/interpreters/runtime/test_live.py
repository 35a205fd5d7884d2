"""The live interpreter: every effect's semantics, events, journal, and bad input."""

from __future__ import annotations

from typing import Any

import pytest

from interpreters import (
    LiveInterpreter,
    MemoryJournal,
    ModelScriptExhausted,
    ScriptedModel,
    VirtualClock,
    run,
)
from op import (
    Add,
    Budget,
    BudgetExhausted,
    DuplicateTool,
    Failure,
    Inc,
    MergeConflict,
    Message,
    ModelError,
    Op,
    Response,
    RunFailed,
    RunNotFinished,
    Success,
    TimedOut,
    ToolCall,
    ToolResult,
    Usage,
    ask,
    checkpoint,
    emit,
    get,
    infer,
    limit,
    merge,
    now,
    par,
    put,
    random,
    sleep,
    timeout,
    tool,
    update,
    uuid,
)
from op.effects import NotAnEffect, NotAProgram, NotSerializable
from op.events import CheckpointSaved, ConflictDetected, Emitted, TokenDelta
from state import Append, Assign, GCounter, GSet, Log, LWWRegister, Stamp, StateError
from state import CRDTModel as _Model
from tests.helpers import Recorder


class S(_Model):
    files: GSet[str] = GSet()
    tokens: GCounter = GCounter()
    log: Log[str] = Log()
    branch: LWWRegister[str] = LWWRegister()


def echo(text: str) -> str:
    """Return the text."""
    return text


def boom(text: str) -> str:
    raise ValueError(f"cannot {text}")


def usage(n: int, cost: float | None = None) -> Usage:
    return Usage(input_tokens=n, output_tokens=0, cost_usd=cost)


# -- the basics -----------------------------------------------------------------------------


def test_infer_and_tool_round_trip_with_journal_and_events() -> None:
    def program(q: str) -> Op[str]:
        r = yield from tool("echo", {"text": q})
        reply = yield from infer(r.output, tools=["echo"])
        return reply.text

    model = ScriptedModel(["answer"])
    rec = Recorder()
    result = run(program, "hello", model=model, tools=[echo], on_event=rec)
    assert (result.status, result.value) == ("completed", "answer")
    assert model.requests[0].messages == (Message.user("hello"),)
    assert [t.name for t in model.requests[0].tools] == ["echo"]
    assert model.requests[0].tools[0].parameters["properties"]["text"]["type"] == "string"
    entries = result.journal.entries(result.run_id)  # type: ignore[union-attr]
    assert [(e.address, e.kind, e.status) for e in entries] == [
        ("1", "tool", "completed"),
        ("2", "infer", "completed"),
    ]
    assert entries[0].result_json == '{"error":null,"ok":true,"output":"hello"}'
    assert any(isinstance(e, TokenDelta) and e.text == "answer" for e in rec.events)
    rec.check_protocol()


def test_results_reach_the_journal_before_the_program_sees_them() -> None:
    journal = MemoryJournal()
    seen: list[tuple[str, str]] = []

    def inspect(address: str) -> str:
        run_id = journal.runs()[0].run_id
        for e in journal.entries(run_id):
            seen.append((e.address, e.status))
        return "ok"

    def program() -> Op[None]:
        yield from tool("echo", {"text": "x"})
        yield from tool("inspect", {"address": "1"})

    run(program, tools=[echo, inspect], db=journal)
    # while the second tool ran: the first was completed, the second already started
    assert seen == [("1", "completed"), ("2", "started")]


def test_addresses_are_nested_under_scopes_and_branches() -> None:
    def branch(n: int) -> Op[int]:
        yield from emit("b", n)
        yield from emit("b", n)
        return n

    def program() -> Op[Any]:
        yield from emit("start")
        yield from limit(Budget(), branch(0))
        return (yield from par(branch(1), branch(2)))

    result = run(program)
    addresses = [e.address for e in result.journal.entries(result.run_id)]  # type: ignore[union-attr]
    assert addresses == ["1", "2", "2.1", "2.2", "3", "3.1.1", "3.1.2", "3.2.1", "3.2.2"]
    assert result.value == (1, 2)


def test_handler_error_is_thrown_in_at_the_yield_and_can_be_caught() -> None:
    def program() -> Op[str]:
        try:
            yield from infer("hi")
        except ModelScriptExhausted as exc:
            return f"caught: {exc}"
        return "not reached"

    result = run(program, model=ScriptedModel([]))
    assert result.value.startswith("caught: scripted: no response left for call 1")


def test_failing_tools_are_values_the_program_can_read() -> None:
    def program() -> Op[list[ToolResult]]:
        out = []
        out.append((yield from tool("boom", {"text": "fly"})))
        out.append((yield from tool("echo", {"text": 3})))
        out.append((yield from tool("echo", {})))
        out.append((yield from tool("missing", {"x": 1})))
        out.append((yield from tool("echo", {"text": "hi", "extra": 1})))
        return out

    results = run(program, tools=[echo, boom]).value
    assert [r.ok for r in results] == [False] * 5
    errors = [r.error or "" for r in results]
    assert results[0].error == "tool 'boom' raised ValueError: cannot fly"
    assert "invalid arguments for tool 'echo': text: Input should be a valid string" in errors[1]
    assert "text: Field required" in errors[2]
    assert results[3].error == "no tool named 'missing'; available: boom, echo"
    assert "extra: Extra inputs are not permitted" in errors[4]


def test_async_tools_and_structured_outputs() -> None:
    async def count(items: list[str]) -> dict[str, int]:
        return {"n": len(items)}

    def program() -> Op[str]:
        return (yield from tool("count", {"items": ["a", "b"]})).output

    assert run(program, tools=[count]).value == '{"n":2}'


def test_model_tool_loop_with_tool_calls() -> None:
    from programs.loop import tool_loop

    calls = (ToolCall(id="c1", name="echo", arguments={"text": "ping"}),)
    model = ScriptedModel([Response(tool_calls=calls), Response(text="done")])

    def program() -> Op[str]:
        reply, history = yield from tool_loop([Message.user("go")], tools=["echo"])
        assert history[2] == Message(role="tool", content="ping", tool_call_id="c1")
        return reply.text

    assert run(program, model=model, tools=[echo]).value == "done"
    assert model.requests[1].messages[-1].content == "ping"


# -- limit ------------------------------------------------------------------------------------


def spend(n_calls: int, log: list[str]) -> Op[int]:
    try:
        for i in range(n_calls):
            yield from infer(f"call {i}")
        return n_calls
    finally:
        log.append("closed")


@pytest.mark.parametrize(
    ("budget", "calls", "exceeded", "spent_calls"),
    [
        (Budget(model_calls=2), 5, "model_calls", 2),
        (Budget(tokens=250), 5, "tokens", 3),
        (Budget(tokens=300), 5, "tokens", 3),
        (Budget(usd=0.25), 5, "usd", 3),
        (Budget(model_calls=10), 3, None, 3),
    ],
)
def test_limit_stops_before_the_effect_that_would_overspend(
    budget: Budget, calls: int, exceeded: str | None, spent_calls: int
) -> None:
    log: list[str] = []
    model = ScriptedModel([Response(text="x", usage=usage(100, 0.1))] * 10)

    def program() -> Op[Any]:
        outcome = yield from limit(budget, spend(calls, log))
        yield from emit("after")
        return outcome

    result = run(program, model=model)
    outcome = result.value
    assert log == ["closed"], "the body's finally ran"
    assert len(model.requests) == spent_calls
    if exceeded is None:
        assert outcome == Success(calls)
    else:
        assert isinstance(outcome, Failure)
        ex: BudgetExhausted = outcome.failure()
        assert ex.exceeded == exceeded and ex.spent.model_calls == spent_calls
        assert ex.spent.tokens == 100 * spent_calls


def test_limit_on_tool_calls_and_unknown_prices_are_counted_not_zeroed() -> None:
    def body() -> Op[int]:
        for _ in range(5):
            yield from infer("x")
            yield from tool("echo", {"text": "x"})
        return 0

    def program() -> Op[Any]:
        return (yield from limit(Budget(tool_calls=2, usd=1.0), body()))

    model = ScriptedModel([Response(text="x", usage=usage(1))] * 5)
    # a usd budget cannot price the first call's answer: the next model call is refused
    ex = run(program, model=model, tools=[echo]).value.failure()
    assert ex.exceeded == "usd" and ex.spent.model_calls == 1 and ex.spent.tool_calls == 1
    assert ex.spent.usd_unknown == 1 and ex.spent.usd == 0.0
    assert ex.reason is not None and "no known price" in ex.reason and "OPDSL_PRICES" in ex.reason

    def counted() -> Op[Any]:
        return (yield from limit(Budget(tool_calls=2), body()))

    ex = run(
        counted, model=ScriptedModel([Response(text="x", usage=usage(1))] * 5), tools=[echo]
    ).value.failure()
    assert ex.exceeded == "tool_calls" and ex.spent.tool_calls == 2
    assert ex.spent.usd_unknown == 3 and ex.spent.usd == 0.0


def test_nested_limits_are_all_charged_and_the_outer_one_closes_the_inner_body() -> None:
    log: list[str] = []

    def inner() -> Op[Any]:
        try:
            return (yield from limit(Budget(model_calls=100), spend(10, log)))
        finally:
            log.append("inner closed")

    def program() -> Op[Any]:
        first = yield from limit(Budget(model_calls=3), spend(2, []))
        outer = yield from limit(Budget(model_calls=4), inner())
        return first, outer

    model = ScriptedModel([Response(text="x")] * 20)
    first, outer = run(program, model=model).value
    assert first == Success(2)
    assert outer.failure().exceeded == "model_calls" and outer.failure().spent.model_calls == 4
    assert log == ["closed", "inner closed"]
    assert len(model.requests) == 6


def test_limit_on_seconds_cancels_in_flight_effects_with_a_virtual_clock() -> None:
    def slow() -> Op[str]:
        yield from sleep(30)
        yield from sleep(3600)
        return "never"

    def program() -> Op[Any]:
        return (yield from limit(Budget(seconds=60), slow()))

    clock = VirtualClock()
    rec = Recorder()
    result = run(program, clock=clock, on_event=rec)
    ex = result.value.failure()
    assert ex.exceeded == "seconds" and ex.spent.seconds == 60
    assert clock.monotonic() == 60
    assert rec.finished()["1.2"] == "cancelled"
    rec.check_protocol()


# -- timeout ----------------------------------------------------------------------------------


def test_timeout_of_an_hour_takes_no_time_and_cancels_the_model_call() -> None:
    log: list[str] = []

    def body() -> Op[str]:
        try:
            reply = yield from infer("slow")
            return reply.text
        finally:
            log.append("closed")

    def program() -> Op[Any]:
        fast = yield from timeout(3600, body())
        slow = yield from timeout(3600, body())
        return fast, slow

    clock = VirtualClock()
    rec = Recorder()
    model = ScriptedModel(["quick", "late"], delay=1800)
    fast, slow = run(program, model=model, clock=clock, on_event=rec).value
    assert fast == Success("quick")
    assert slow == Success("late")

    model = ScriptedModel(["late"], delay=7200)
    result = run(lambda: timeout(3600, body()), model=model, clock=clock, on_event=rec)
    assert result.value == Failure(TimedOut(seconds=3600))
    assert log == ["closed", "closed", "closed"]
    assert clock.monotonic() == 1800 * 2 + 3600
    rec.check_protocol()


def test_timeout_with_real_clock() -> None:
    def program() -> Op[Any]:
        return (yield from timeout(0.05, sleep(10)))

    assert run(program).value == Failure(TimedOut(seconds=0.05))


# -- par --------------------------------------------------------------------------------------


def worker(name: str, files: list[str], delay: float) -> Op[str]:
    yield from sleep(delay)
    for f in files:
        yield from update(files=Add(f), tokens=Inc(1), log=Append(name))
    return name


def test_par_runs_branches_on_replicas_and_merges_in_branch_order() -> None:
    def program() -> Op[Any]:
        yield from update(branch=Assign("main"))
        results = yield from par(worker("a", ["a.py"], 5), worker("b", ["b.py", "c.py"], 1))
        state = yield from get(S)
        return results, state

    clock = VirtualClock()
    (results, state) = run(program, state=S(), clock=clock).value
    assert results == ("a", "b")
    assert state.files.sorted() == ["a.py", "b.py", "c.py"]
    assert state.tokens.value == 3
    assert state.tokens.counts == {"r/2.1": 1, "r/2.2": 2}
    assert set(state.log.items) == {"a", "b"}
    assert clock.monotonic() == 5, "branches waited concurrently"


def test_par_conflicts_are_reported_and_can_raise() -> None:
    def program(mode: Any) -> Op[Any]:
        try:
            return (
                yield from par(worker("a", ["x.py"], 0), worker("b", ["x.py"], 0), on_conflict=mode)
            )
        except MergeConflict as exc:
            state = yield from get(S)
            return exc.conflicts, exc.results, state.files.sorted()

    rec = Recorder()
    assert run(program, "merge", state=S(), on_event=rec).value == ("a", "b")
    assert [e.conflicts for e in rec.of(ConflictDetected)] == [{"files": ["x.py"]}]
    assert run(program, "raise", state=S()).value == ({"files": ["x.py"]}, ("a", "b"), ["x.py"])


def test_par_failure_cancels_siblings_and_reaches_the_parent() -> None:
    log: list[str] = []

    def ok() -> Op[None]:
        try:
            yield from sleep(100)
        finally:
            log.append("sibling closed")

    def bad() -> Op[None]:
        yield from sleep(1)
        raise RuntimeError("branch broke")

    def program() -> Op[str]:
        try:
            yield from par(ok(), bad())
        except RuntimeError as exc:
            return str(exc)
        return "no"

    rec = Recorder()
    assert run(program, clock=VirtualClock(), on_event=rec).value == "branch broke"
    assert log == ["sibling closed"]
    rec.check_protocol()


def test_par_under_trio() -> None:
    def program() -> Op[Any]:
        return (yield from par(timeout(10, sleep(0.01)), limit(Budget(), sleep(0.01))))

    result = run(program, backend="trio")
    assert result.value == (Success(None), Success(None))


# -- state, time, randomness ------------------------------------------------------------------


def test_state_effects_and_their_errors() -> None:
    def program() -> Op[Any]:
        s = yield from get(S)
        yield from update(files=Add("a"))
        yield from merge(S().apply({"files": Add("b"), "branch": Assign("y")}, Stamp("x", 9)))
        after_merge = (yield from get(S)).files.sorted()
        errors = []
        for bad in ({"files": Inc(1)}, {"nope": Inc(1)}):
            try:
                yield from update(**bad)
            except StateError as exc:
                errors.append(str(exc))
        yield from put(S())
        yield from update(branch=Assign("x"))
        final = yield from get(S)
        return s.files.sorted(), after_merge, errors, final.branch

    empty, merged, errors, final = run(program).value
    assert empty == [] and merged == ["a", "b"]
    assert errors == [
        "S.files is a GSet; it takes Add, not Inc",
        "S has no field 'nope' (fields: files, tokens, log, branch)",
    ]
    assert final.value == "x" and final.lamport == 12, (
        "the Lamport clock kept up with the merged state"
    )


def test_update_without_state_and_get_of_wrong_type() -> None:
    class T(_Model):
        n: GCounter = GCounter()

    def program() -> Op[list[str]]:
        errors = []
        try:
            yield from update(n=Inc(1))
        except StateError as exc:
            errors.append(str(exc))
        yield from put(S())
        try:
            yield from get(T)
        except StateError as exc:
            errors.append(str(exc))
        return errors

    assert run(program).value == [
        "update() needs a state: pass state= to the run, or put() one first",
        "get(T): the state is a S",
    ]


def test_now_random_uuid_come_from_the_interpreter() -> None:
    def program() -> Op[Any]:
        return (yield from now()), (yield from random()), (yield from uuid())

    clock = VirtualClock(start=1000.0)
    a = run(program, clock=clock, seed=7).value
    b = run(program, clock=clock, seed=7).value
    c = run(program, clock=clock, seed=8).value
    assert a == b and a[1:] != c[1:] and a[0] == 1000.0
    assert len(a[2]) == 36 and a[2][14] == "4"


def test_checkpoint_records_a_state_snapshot_and_emits() -> None:
    def program() -> Op[None]:
        yield from update(files=Add("a.py"))
        yield from checkpoint("before-verify")
        yield from emit("done", {"files": 1})

    rec = Recorder()
    result = run(program, state=S(), on_event=rec)
    entry = result.journal.entries(result.run_id)[0]  # type: ignore[union-attr]
    assert entry.kind == "checkpoint"
    assert '"files":{"items":["a.py"]}' in (entry.result_json or "")
    assert '"state_type":"tests.interpreters.runtime.test_live:S"' in (entry.result_json or "")
    assert [(e.name, e.address) for e in rec.of(CheckpointSaved)] == [("before-verify", "2")]
    assert [(e.name, e.data) for e in rec.of(Emitted)] == [("done", {"files": 1})]


def test_ask_waits_or_takes_an_answer() -> None:
    def program() -> Op[str]:
        name = yield from ask("Which branch?")
        return f"on {name}"

    rec = Recorder()
    waiting = run(program, on_event=rec)
    assert waiting.status == "waiting" and waiting.question == "Which branch?"
    with pytest.raises(RunNotFinished, match="waiting for an answer to: Which branch"):
        _ = waiting.value
    entry = waiting.journal.entries(waiting.run_id)[0]  # type: ignore[union-attr]
    assert entry.status == "started", "the question stays open in the journal"
    assert rec.finished() == {"1": "unresolved"}
    rec.check_protocol()
    assert run(program, answer=lambda q: "main").value == "on main"


# -- bad input --------------------------------------------------------------------------------


def test_yielding_a_non_effect_names_program_and_address() -> None:
    def program() -> Any:
        yield from emit("ok")
        yield infer("forgot from")

    result = run(program)
    assert result.status == "failed" and result.address == "2"
    assert isinstance(result.error, NotAnEffect)
    assert "test_yielding_a_non_effect_names_program_and_address.<locals>.program yielded" in str(
        result.error
    )
    assert "write `yield from infer(...)`" in str(result.error)
    with pytest.raises(RunFailed, match=r"failed at address 2: NotAnEffect"):
        _ = result.value


def test_non_effect_is_not_swallowed_by_the_programs_except() -> None:
    def program() -> Any:
        try:
            yield 42
        except Exception:
            return "swallowed"

    result = run(program)
    assert result.status == "failed" and isinstance(result.error, NotAnEffect)


@pytest.mark.parametrize(
    ("program", "message"),
    [
        (lambda: 3, "returned a int, not a generator"),
        ("not callable", "is not a program"),
    ],
)
def test_things_that_are_not_programs(program: Any, message: str) -> None:
    with pytest.raises(NotAProgram, match=message):
        run(program)


def test_async_function_is_not_a_program() -> None:
    async def program() -> None:
        return None

    with pytest.raises(NotAProgram, match="is an async function"):
        run(program)  # type: ignore[arg-type]  # the wrong input under test


def test_started_generator_is_not_a_program() -> None:
    def program() -> Op[None]:
        yield from emit("x")

    with pytest.raises(NotAProgram, match="already-started generator"):
        run(program())  # type: ignore[arg-type]


def test_unserializable_arguments_and_payloads_are_refused_with_where() -> None:
    def program(x: Any) -> Op[None]:
        yield from emit("x")

    with pytest.raises(
        NotSerializable, match=r"program: argument 1 cannot be recorded: \$: a object"
    ):
        run(program, object())
    with pytest.raises(NotSerializable, match=r"argument 'x'.*\$.k: nan is not allowed"):
        run(program, kwargs={"x": {"k": float("nan")}})

    def payload() -> Op[None]:
        yield from emit("ok")
        yield from tool("echo", {"text": {1: "int key"}})

    result = run(payload, tools=[echo])
    assert result.status == "failed" and result.address == "2"
    assert "the tool effect at address 2 cannot be recorded: $.args.text: mapping key 1" in str(
        result.error
    )


def test_unserializable_return_value_fails_the_run() -> None:
    def program() -> Op[object]:
        yield from emit("x")
        return object()

    result = run(program)
    assert result.status == "failed" and "return value at address 1 cannot be recorded" in str(
        result.error
    )


def test_duplicate_tool_names_are_refused() -> None:
    def echo2(text: str) -> str:
        return text

    echo2.__name__ = "echo"
    with pytest.raises(DuplicateTool, match="two tools are named 'echo'"):
        run(lambda: emit("x"), tools=[echo, echo2])


def test_tools_need_annotations_and_no_varargs() -> None:
    def loose(path):  # type: ignore[no-untyped-def]
        return path

    def star(*args: str) -> str:
        return ""

    with pytest.raises(TypeError, match="parameter 'path' has no type annotation"):
        run(lambda: emit("x"), tools=[loose])
    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):
        run(lambda: emit("x"), tools=[star])


def test_uncaught_exception_fails_the_run_and_closes_every_effect() -> None:
    def body() -> Op[None]:
        yield from emit("in scope")
        raise KeyError("lost")

    def program() -> Op[None]:
        yield from emit("start")
        yield from limit(Budget(), body())

    rec = Recorder()
    journal = MemoryJournal()
    result = run(program, on_event=rec, db=journal)
    assert result.status == "failed" and result.address == "2.1"
    assert isinstance(result.error, KeyError)
    run_record = journal.run(result.run_id)
    assert run_record.status == "failed"
    assert '"address":"2.1"' in (run_record.error_json or "")
    assert rec.finished() == {"1": "completed", "2.1": "completed", "2": "failed"}
    rec.check_protocol()


def test_infer_offering_unknown_tools_is_an_error_in_the_program() -> None:
    def program() -> Op[list[str]]:
        errors = []
        for tools in (("echo",), ("nope",)):
            try:
                yield from infer("x", tools=tools)
            except ModelError as exc:
                errors.append(str(exc))
        return errors

    result = run(program, model=ScriptedModel(["a"]), tools=[echo])
    assert result.value == [
        "infer() offers tool 'nope', but no tool of that name is bound (bound: echo)"
    ]


def test_interpreter_object_runs_without_a_journal() -> None:
    def program() -> Op[str]:
        return (yield from tool("echo", {"text": "x"})).output

    interp = LiveInterpreter(tools=[echo])
    result = interp.run_sync(program)
    assert result.value == "x" and result.journal is None


def test_overlapping_runs_put_the_ctrl_c_handler_back_as_it_was() -> None:
    import signal

    import anyio

    from interpreters import arun

    def waits(seconds: float) -> Op[None]:
        yield from sleep(seconds)

    async def both() -> None:
        async with anyio.create_task_group() as tg:
            # the first to start ends first: its handler must not outlive the second run
            tg.start_soon(lambda: arun(waits, 0.05, db=MemoryJournal()))
            await anyio.sleep(0.01)
            tg.start_soon(lambda: arun(waits, 0.2, db=MemoryJournal()))

    before = signal.getsignal(signal.SIGINT)
    anyio.run(both)
    assert signal.getsignal(signal.SIGINT) is before
