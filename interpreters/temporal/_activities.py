"""The activities: where a worker performs ``tool``, ``infer``, ``agent`` and ``checkpoint`` with
the tools, models, agents and workspace it was started with (keys stay on the worker).

Each activity rebuilds the effect from the text the workflow sent (packed: an ``infer``'s
messages are the head of their chain, whose nodes are in the call's new pieces, in what this
worker read lately, or in the content store; see :class:`EffectReader`), performs it with
opdsl's live handlers, and returns the result packed, with the worker's secrets replaced, so
no key reaches the history and a long output travels once, by reference. With no content
store, a result over Temporal's payload limit is an error that says so, not a task that fails
for ever. An error of the effect is returned as data (the program gets it, as
locally), not raised: Temporal retries only what failed for reasons of its own (a worker that
died). While an effect runs the activity heartbeats, so a worker's death is seen within the
heartbeat timeout, and a cancellation reaches the handler, which stops the effect (a tool's
process group is ended).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, final

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from interpreters._live import AgentBackend, LiveHandlers
from interpreters._loading import ProgramNotFound, load_program
from interpreters.journal._content import ContentError, Lookup, Packer, lookup, unpack_message
from interpreters.models._base import Model
from interpreters.runtime._clock import SystemClock
from interpreters.runtime._events import EventBus
from interpreters.runtime._frame import Call
from interpreters.runtime._redact import Redactor
from interpreters.runtime._replay import error_json
from interpreters.temporal._store import (
    DEFAULT_PAYLOAD_LIMIT,
    NO_STORE_HINT,
    ContentMissing,
    ContentStore,
    TemporalLimit,
    size_text,
)
from interpreters.temporal._types import (
    ACTIVITY,
    Admission,
    AdmitRequest,
    EffectCall,
    Outcome,
    tools_digest,
)
from interpreters.tools._bound import ToolLike, ToolRegistry
from interpreters.tools._workspace import Workspace
from op import Agent, Checkpoint, Fatal, Infer, Message, Output, Tool, default_state
from op.effects import LeafEffect
from state import canonical_json, to_jsonable

__all__ = ["Activities", "EffectReader", "effect_from_json"]

REFUSAL_SAID_AGAIN_SECONDS = 60.0
"""How often a worker says again that it still refuses a run whose MCP tools changed (a
refused effect is retried every 10 seconds as long as the run waits)."""


def effect_from_json(text: str) -> LeafEffect:
    """The effect an activity performs, from the canonical JSON the workflow sent."""
    return _effect(json.loads(text), None)


def _effect(data: Any, messages: tuple[Message, ...] | None) -> LeafEffect:
    kind = data.get("kind")
    if kind == Tool.kind:
        return Tool(name=str(data["name"]), args=dict(data.get("args") or {}))
    if kind == Infer.kind:
        tools = data.get("tools")
        if messages is None:
            messages = tuple(Message.model_validate(m) for m in data["messages"])
        output = data.get("output")
        return Infer(
            messages=messages,
            model=data.get("model"),
            tools="all" if tools == "all" else tuple(tools or ()),
            params=dict(data.get("params") or {}),
            output=None if output is None else Output.model_validate(output),
        )
    if kind == Agent.kind:
        return Agent(
            backend=str(data["backend"]),
            prompt=str(data["prompt"]),
            options=dict(data.get("options") or {}),
        )
    if kind == Checkpoint.kind:
        return Checkpoint(name=str(data["name"]))
    raise ApplicationError(f"an activity cannot perform a {kind!r} effect", non_retryable=True)


@final
class EffectReader:
    """The effects a worker is sent, rebuilt from their packed texts.

    An ``infer``'s messages are a chain (``journal._content``): the worker walks it back from
    its head through the nodes the call brought, the conversations it rebuilt lately (by head:
    the next call of the same conversation costs what it adds) and the content store, which
    holds every node a workflow sent (so another worker, or this one after a restart, finds
    them there).
    """

    def __init__(self, store: ContentStore | None, *, keep: int = 64) -> None:
        self.store = store
        self.keep = keep
        self._conversations: OrderedDict[str, tuple[Message, ...]] = OrderedDict()

    def read(self, call: EffectCall) -> LeafEffect:
        text = call.effect_json
        if '"$chain"' not in text and '"args":"' not in text:
            return effect_from_json(text)  # sent whole
        data = json.loads(text)
        get = lookup(call.pieces, self._stored)
        if data.get("kind") == "tool" and isinstance(data.get("args"), str):
            args = json.loads(get(data["args"]))
            if not isinstance(args, dict):
                raise ContentError(f"piece {data['args']} is not a tool's arguments")
            data["args"] = args
            return _effect(data, None)
        chain = data.get("messages")
        if data.get("kind") == "infer" and isinstance(chain, dict):
            return _effect(data, self._messages(chain, get))
        return _effect(data, None)

    def _stored(self, names: Iterable[str]) -> Mapping[str, str]:
        if self.store is None:
            return {}
        return {h: b.decode("utf-8", "surrogatepass") for h, b in self.store.get(names).items()}

    def _messages(self, chain: Mapping[str, Any], get: Lookup) -> tuple[Message, ...]:
        head, n = chain.get("$chain"), chain.get("n")
        if not isinstance(n, int) or n < 0:
            raise ContentError("a chain of messages without its length")
        fresh: list[Any] = []
        base: tuple[Message, ...] = ()
        h: Any = head
        while h is not None:
            known = self._conversations.get(h)
            if known is not None:
                self._conversations.move_to_end(h)
                base = known
                break
            if not isinstance(h, str) or len(fresh) >= n:
                raise ContentError(f"the chain of messages at {head} is not {n} long")
            node = json.loads(get(h))
            if not (isinstance(node, list) and len(node) == 2):
                raise ContentError(f"piece {h} is not a node of a message chain")
            fresh.append(node[1])
            h = node[0]
        fresh.reverse()
        start = len(base)
        messages = base + tuple(
            Message.model_validate(unpack_message(get, m, f"messages[{start + i}]"))
            for i, m in enumerate(fresh)
        )
        if len(messages) != n:
            raise ContentError(f"the chain of messages at {head} holds {len(messages)}, not {n}")
        if isinstance(head, str):
            self._conversations[head] = messages
            while len(self._conversations) > self.keep:
                self._conversations.popitem(last=False)
        return messages


@final
class Activities:
    """The activities of one worker. ``programs``: the only programs its workflows may run
    (``module:function``); a run naming another fails at once, before any effect. ``mcp``:
    the MCP tools among ``tools``, as listed (``MCPTools.recorded``), which a run admitted here
    goes with and an effect of a run that goes with others is not performed with
    (``_tools``)."""

    def __init__(
        self,
        *,
        programs: Iterable[str],
        tools: Iterable[ToolLike] = (),
        model: Model | None = None,
        agents: Mapping[str, AgentBackend] | None = None,
        workspace: Workspace | None = None,
        heartbeat_seconds: float = 2.0,
        store: ContentStore | None = None,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        mcp: Mapping[str, Any] | None = None,
        accept_changed_code: bool = False,
    ) -> None:
        self.programs = frozenset(programs)
        #: perform the effects of a run that refused a change of the MCP tools it depends on,
        #: with this worker's (the run goes on with them)
        self.accept_changed_code = accept_changed_code
        self.mcp: dict[str, Any] = dict(mcp or {})
        self.mcp_digest = tools_digest(self.mcp)
        self.handlers = LiveHandlers(
            model=model, tools=ToolRegistry(tools), agents=agents, workspace=workspace
        )
        self.heartbeat_seconds = heartbeat_seconds
        self.redact = Redactor.from_env()
        #: where content goes (None: it travels inline, under ``payload_limit``)
        self.store = store
        self.payload_limit = payload_limit
        self.reader = EffectReader(store)
        self._results = Packer(self.redact, keep=False)
        #: the runs this worker refused to take on, by run id: what it said and when (it says
        #: a refusal once, then at most once every ``REFUSAL_SAID_AGAIN_SECONDS``)
        self._refusals_said: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, to register on a worker."""
        return [self.admit, self.tool, self.infer, self.agent, self.checkpoint, self.restore]

    @activity.defn(name=ACTIVITY["admit"])
    async def admit(self, request: AdmitRequest) -> Admission:
        """Admit a run of ``request.program`` on this worker, or refuse it. A state type must be
        the program's declared one or come from the program's own module: a run's input
        never makes the worker import a module it was not given."""
        program = request.program
        if program not in self.programs:
            raise ApplicationError(
                f"this worker does not run {program}; it runs "
                f"{', '.join(sorted(self.programs)) or 'no program'} (opdsl worker --program)",
                type="ProgramNotAllowed",
                non_retryable=True,
            )
        try:
            fn = load_program(program)  # here, where an import error can be said plainly
        except ProgramNotFound as exc:
            raise ApplicationError(str(exc), type="ProgramNotFound", non_retryable=True) from None
        wanted = request.state_type
        if wanted is not None:
            declared = default_state(fn)
            same_module = wanted.partition(":")[0] == program.partition(":")[0]
            if not same_module and (declared is None or to_jsonable(type(declared)) != wanted):
                raise ApplicationError(
                    f"state type {wanted} is neither {program}'s declared state nor in its "
                    "module; this worker does not import it",
                    type="StateNotAllowed",
                    non_retryable=True,
                )
        registry = self.handlers.tools
        quick = [n for n in registry.names() if (t := registry.get(n)) is not None and t.quick]
        return Admission(
            quick_tools=quick,
            heartbeat_seconds=self.heartbeat_seconds,
            stored=self.store is not None,
            payload_limit=self.payload_limit,
            waiting_memo=True,
            mcp=self.mcp,
        )

    @activity.defn(name=ACTIVITY["tool"])
    async def tool(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["infer"])
    async def infer(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["agent"])
    async def agent(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["checkpoint"])
    async def checkpoint(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["restore"])
    async def restore(self, snapshot_json: str) -> None:
        await self.handlers.restore(json.loads(snapshot_json))

    def _other_tools(self, call: EffectCall) -> Outcome | None:
        """None if this worker offers the MCP tools the run goes with (or the run compares
        none); else what it offers, not performing the effect, or, where the run refused
        what this worker offers, the refusal, which Temporal retries until another worker
        takes the effect. (A workflow of before ``refusals`` refused any other tools.)"""
        wanted = call.tools
        if not isinstance(wanted, dict) or wanted.get("digest") == self.mcp_digest:
            self._refusals_said.pop(call.run_id, None)
            return None
        refused = wanted.get("refused")
        if isinstance(refused, str) and not self.accept_changed_code:
            refusals = wanted.get("refusals")
            if not isinstance(refusals, dict):
                self._refuse(call.run_id, refused)
            mine = refusals.get(self.mcp_digest)
            if isinstance(mine, str):
                self._refuse(call.run_id, mine)
        self._refusals_said.pop(call.run_id, None)
        return Outcome(
            tools_now=self.mcp,
            tools_accepted=isinstance(refused, str) and self.accept_changed_code,
        )

    def _refuse(self, run_id: str, why: str) -> NoReturn:
        """Fail the activity with ``why``, which Temporal retries (every 10 seconds at most)
        until a worker that can take the run on takes it. The error is benign: temporalio
        logs it at DEBUG, not as a warning with its traceback at each retry (its category
        changes no retry); the worker says it itself, in one line, once, then at most once
        every ``REFUSAL_SAID_AGAIN_SECONDS`` while the run waits."""
        now = time.monotonic()
        said = self._refusals_said.get(run_id)
        if said is None or said[0] != why or now - said[1] >= REFUSAL_SAID_AGAIN_SECONDS:
            self._refusals_said[run_id] = (why, now)
            self._refusals_said.move_to_end(run_id)
            while len(self._refusals_said) > 1024:  # runs ended while they waited
                self._refusals_said.popitem(last=False)
            _warn(
                f"{why}; this worker does not take it on: one started with "
                "--accept-changed-code (make_worker(accept_changed_code=True)) goes on with "
                "the tools its servers offer now"
            )
        raise ApplicationError(
            why, type="MCPToolsChanged", category=ApplicationErrorCategory.BENIGN
        )

    async def _perform(self, call: EffectCall) -> Outcome:
        other = self._other_tools(call)
        if other is not None:
            return other
        try:
            effect = self.reader.read(call)
        except (ValueError, ContentMissing) as exc:  # a ContentError is a ValueError
            # the store does not hold what the workflow sent, or it is not an effect: retrying
            # cannot mend it
            message = f"run {call.run_id}, address {call.address}: {exc}"
            return Outcome(error_json=error_json(ContentMissing(message)), fatal=True)
        info = Call(
            call.run_id,
            call.address,
            SystemClock(),
            EventBus([]),
            off_loop=True,
            model_calls=call.model_calls,
        )
        work = asyncio.ensure_future(self.handlers.perform(effect, info))
        try:
            while True:
                # heartbeat while the effect runs: a dead worker is noticed, and a cancellation
                # comes back with the heartbeat's answer; an effect done within half the
                # heartbeat timeout sends none (the server times the first from the start)
                done, _ = await asyncio.wait({work}, timeout=self.heartbeat_seconds / 2)
                if done:
                    break
                if activity.in_activity() and not activity.info().is_local:
                    activity.heartbeat(call.address)
            value = work.result()
        except asyncio.CancelledError:
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            raise
        except Exception as exc:
            text = self.redact(error_json(exc))
            return Outcome(error_json=text, fatal=isinstance(exc, Fatal))
        whole = canonical_json(value)
        if self.store is not None:
            packed = self._results.result(value, whole)
            return Outcome(result_json=packed.text, pieces=dict(packed.pieces))
        text = self.redact(whole)
        size = len(text.encode()) + 64
        if size > self.payload_limit:
            return Outcome(
                error_json=error_json(
                    TemporalLimit(
                        f"run {call.run_id}: the result of the {effect.kind} effect at address "
                        f"{call.address} is {size_text(size)}, over Temporal's payload limit of "
                        f"{size_text(self.payload_limit)} (limit.blobSize.error), so it cannot "
                        f"be sent back: {NO_STORE_HINT}; or have it return less"
                    )
                ),
                fatal=True,
            )
        return Outcome(result_json=text)


def _warn(line: str) -> None:
    sys.stderr.write(f"opdsl: warning: {line}\n")
