"""Programs every interpreter must agree on: each touches a different corner of the language."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interpreters import CallInfo, ScriptedModel, ToolLike, read_only
from interpreters.models.kit import CallInfo as Call
from op import (
    Add,
    Agent,
    Append,
    Assign,
    Budget,
    Failure,
    Inc,
    Message,
    ModelError,
    Op,
    Remove,
    Response,
    ToolCall,
    TurnRecord,
    Usage,
    agent,
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
from op.effects import ModelRequest
from programs.loop import tool_loop
from state import CRDTModel, GCounter, GSet, Log, LWWRegister, ORSet, Stamp


class Notes(CRDTModel):
    seen: GSet[str] = GSet()
    tags: ORSet[str] = ORSet()
    count: GCounter = GCounter()
    log: Log[str] = Log()
    owner: LWWRegister[str] = LWWRegister()


# -- tools, a model and an agent whose answers depend only on what they are asked ----------------


@read_only
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


def record(note: str, call: CallInfo) -> str:
    """A tool with a side effect (dry runs skip it)."""
    return f"recorded {note} at {call.address}"


TOOLS: list[ToolLike] = [lookup, record]


def _answer(request: ModelRequest) -> Response:
    last = request.messages[-1]
    if request.tools and last.role == "user":
        return Response(
            tool_calls=(ToolCall(id="t1", name="lookup", arguments={"key": last.content[:8]}),),
            usage=Usage(input_tokens=10, output_tokens=2),
        )
    return Response(
        text=f"re: {last.content[:40]}",
        usage=Usage(input_tokens=10, output_tokens=5, cost_usd=0.001),
    )


def model() -> ScriptedModel:
    return ScriptedModel(_answer)


async def echo_agent(effect: Agent, call: Call) -> TurnRecord:
    return TurnRecord(
        backend=effect.backend, text=f"did: {effect.prompt}", turns=1, usage=Usage(input_tokens=3)
    )


AGENTS = {"echo": echo_agent}


# -- the programs -------------------------------------------------------------------------------


def linear(topic: str) -> Op[str]:
    yield from checkpoint("start")
    found = yield from tool("lookup", {"key": topic})
    reply = yield from infer(f"Summarize {found.output}")
    yield from emit("summarized", {"topic": topic, "chars": len(reply.text)})
    yield from checkpoint("end")
    return reply.text


def loop_checkpoints(n: int) -> Op[list[str]]:
    out = []
    for i in range(n):
        yield from checkpoint("step")  # the same name each time: step, step#2, ...
        r = yield from tool("record", {"note": f"n{i}"})
        out.append(r.output)
    return out


def nested_scopes() -> Op[Any]:
    def inner(tag: str) -> Op[str]:
        yield from checkpoint(f"in-{tag}")
        reply = yield from infer(f"inner {tag}")
        return reply.text

    def branch(tag: str) -> Op[Any]:
        return (yield from timeout(60, limit(Budget(model_calls=5), inner(tag))))

    return (yield from par(branch("a"), branch("b")))


def caught_program_error() -> Op[str]:
    yield from checkpoint("start")
    r = yield from tool("lookup", {"key": "x"})
    try:
        if r.ok:
            raise ValueError("program's own error")
    except ValueError as exc:
        yield from emit("caught", str(exc))
    yield from checkpoint("after")
    return "recovered"


def caught_handler_error() -> Op[str]:
    yield from checkpoint("start")
    try:
        yield from infer("x", tools=["no-such-tool"])
    except ModelError as exc:
        yield from emit("handler error", str(exc)[:30])
        note = yield from tool("record", {"note": "after error"})
        return note.output
    return "unreachable"


def uncaught() -> Op[None]:
    yield from checkpoint("start")
    yield from tool("lookup", {"key": "k"})
    raise RuntimeError("this program fails on purpose")


def asks() -> Op[str]:
    name = yield from ask("What is your name?")
    yield from checkpoint("after-ask")
    reply = yield from infer(f"Greet {name}")
    return reply.text


def state_ops() -> Op[dict[str, Any]]:
    yield from update(seen=Add("a"), count=Inc(2), log=Append("first"), owner=Assign("me"))
    yield from checkpoint("mid")
    yield from update(tags=Add("x"), seen=Add("b"))
    yield from update(tags=Remove("x"))
    yield from merge(Notes().apply({"seen": Add("z")}, Stamp("other", 50)))
    s = yield from get(Notes)
    yield from put(s.apply({"count": Inc(1)}, Stamp("r", 60)))
    s = yield from get(Notes)
    return {
        "seen": s.seen.sorted(),
        "count": s.count.value,
        "log": list(s.log.items),
        "tags": s.tags.sorted(),
    }


def par_state() -> Op[Any]:
    def worker(name: str, files: list[str]) -> Op[str]:
        for f in files:
            yield from update(seen=Add(f), count=Inc(1), log=Append(f"{name}:{f}"))
            yield from tool("record", {"note": f})
        return name

    yield from checkpoint("fork")
    names = yield from par(
        worker("a", ["x", "shared"]), worker("b", ["shared", "y"]), worker("c", [])
    )
    s = yield from get(Notes)
    yield from checkpoint("joined")
    return {
        "names": list(names),
        "seen": s.seen.sorted(),
        "count": s.count.value,
        "log": sorted(s.log.items),
    }


def budget_runs_out() -> Op[str]:
    def chatty() -> Op[str]:
        for i in range(10):
            yield from checkpoint("turn")
            yield from infer(f"turn {i}")
        return "all turns"

    outcome = yield from limit(Budget(model_calls=3), chatty())
    if isinstance(outcome, Failure):
        return f"stopped: {outcome.failure().exceeded} after {outcome.failure().spent.model_calls}"
    return outcome.unwrap()


def timeout_fires() -> Op[list[str]]:
    yield from checkpoint("start")
    slow = yield from timeout(5, sleep(3600))
    yield from checkpoint("after-slow")
    fast = yield from timeout(5, sleep(1))
    return [type(slow).__name__, type(fast).__name__]


def time_and_randomness() -> Op[list[Any]]:
    t = yield from now()
    yield from checkpoint("drawn")
    r = yield from random()
    u = yield from uuid()
    yield from sleep(2)
    t2 = yield from now()
    return [t2 - t, round(r, 12), u]


def deep_nesting() -> Op[Any]:
    def leaf(i: int) -> Op[int]:
        yield from update(count=Inc(i))
        yield from checkpoint(f"leaf-{i}")
        return i * 10

    def middle(i: int) -> Op[Any]:
        return (yield from limit(Budget(tool_calls=5), par(leaf(i), leaf(i + 1))))

    both = yield from par(middle(1), middle(3))
    s = yield from get(Notes)
    return [str(x) for x in both] + [str(s.count.value)]


def delegates() -> Op[str]:
    yield from checkpoint("start")
    turn = yield from agent("echo", "fix the tests")
    yield from checkpoint("after-agent")
    return turn.text


def model_tool_loop() -> Op[str]:
    yield from checkpoint("start")
    reply, history = yield from tool_loop(
        [Message.user("find things")], tools=["lookup"], max_steps=4
    )
    yield from checkpoint("done")
    return f"{reply.text} ({len(history)} messages)"


def emits_data() -> Op[None]:
    yield from emit("plain")
    yield from checkpoint("c")
    yield from emit("structured", {"list": [1, 2.5, None], "nested": {"ok": True}})
    yield from emit(Usage(input_tokens=1))


@dataclass
class Case:
    name: str
    program: Any
    args: tuple[Any, ...] = ()
    state: type[CRDTModel] | None = None
    answers: dict[str, str] = field(default_factory=dict)
    dry_same: bool = True  # the dry run returns the same value as the live run


CASES = [
    Case("linear", linear, ("topic",)),
    Case("loop_checkpoints", loop_checkpoints, (3,), dry_same=False),
    Case("nested_scopes", nested_scopes),
    Case("caught_program_error", caught_program_error),
    Case("caught_handler_error", caught_handler_error, dry_same=False),
    Case("uncaught", uncaught),
    Case("asks", asks, answers={"What is your name?": "Ada"}, dry_same=False),
    Case("state_ops", state_ops, state=Notes),
    Case("par_state", par_state, state=Notes, dry_same=False),
    Case("budget_runs_out", budget_runs_out),
    Case("timeout_fires", timeout_fires),
    Case("time_and_randomness", time_and_randomness, dry_same=False),
    Case("deep_nesting", deep_nesting, state=Notes),
    Case("delegates", delegates, dry_same=False),
    Case("model_tool_loop", model_tool_loop),
    Case("emits_data", emits_data),
]
