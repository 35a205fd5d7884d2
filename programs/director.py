"""The director/implementor workflow: a state machine enforced in code, not by prompts.

::

    PLAN --APPROVE--> DRAFT --> BUFFER --> IMPLEMENT --(last step)--> VALIDATE --PASS--> DONE
                                  ^  |         |  ^ (next step)          |FAIL           |
                                  |  v         v  |                      v               |
                                  | PLAN     BUFFER (4 failed attempts, or blocked)      |
                                  +------------------------------------ BUFFER    PLAN <-+

A director (the run's model) plans with the user, drafts the tests and a summary, and
validates; an implementor carries out one small, fully specified step at a time, each tested
and committed. Every move between states is checked against one table (:data:`TRANSITIONS`)
and passes a checkpoint named after the state it enters (``plan``, ``draft``, ``buffer``,
``implement-step-N``, ``validate-run-K``, ``done``), so ``opdsl resume RUN --from
implement-step-3`` re-runs step 3 onwards.

Each file one role hands to the next is written by that role alone: the plan
(``handoff/plan.json``) by the workflow itself from the plan the user approved, the draft
(``handoff/draft.md``) by the drafter, the verdict (``handoff/validate.md``) by the validator.
Each is removed before its writer's turn, locked against every other turn, and taken only when
it holds what its writer's own ``write_file`` wrote. The tests, the handoff files and how the
tests run (the runner's configuration) are locked from the end of DRAFT; after every turn the
workflow asks the workspace whether a locked file changed (a command's change is put back and
fails the turn), and a step's test is judged by ``run_test`` (for pytest, by what pytest
reports, not by its exit status).

This module holds the machine, the run's state and the rules for the plan, the handoff files
and the validator's verdict; it is written only against ``op`` and ``state``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from op import (
    Append,
    Assign,
    Message,
    ModelError,
    Op,
    OpdslError,
    Response,
    ToolCall,
    ToolResult,
    agent,
    ask,
    checkpoint,
    emit,
    get,
    infer,
    program,
    tool,
    update,
)
from programs.loop import tool_loop
from state import CRDTModel, Log, LWWRegister, canonical_json

__all__ = [
    "STATES",
    "TRANSITIONS",
    "DirectorState",
    "IllegalTransition",
    "Plan",
    "PlanError",
    "PlanStep",
    "State",
    "Verdict",
    "VerdictError",
    "checkpoint_name",
    "enter",
    "parse_plan",
    "parse_verdict",
    "plan_hash",
]

State = Literal["PLAN", "DRAFT", "BUFFER", "IMPLEMENT", "VALIDATE", "DONE"]
Backend = Literal["model", "claude-code"]
"""Who does a role's work: the run's model (through ``infer``, with opdsl's tool loop) or
Claude Code (through the ``agent`` effect, its only tools opdsl's, served over MCP)."""
BACKENDS: tuple[Backend, ...] = ("model", "claude-code")
STATES: tuple[State, ...] = ("PLAN", "DRAFT", "BUFFER", "IMPLEMENT", "VALIDATE", "DONE")

TRANSITIONS: dict[State, frozenset[State]] = {
    "PLAN": frozenset({"DRAFT"}),  # the user answered APPROVE
    "DRAFT": frozenset({"BUFFER"}),  # the plan and the drafter's summary are valid
    "BUFFER": frozenset({"IMPLEMENT", "PLAN"}),  # run the implementor; or a plan defect
    "IMPLEMENT": frozenset({"IMPLEMENT", "BUFFER", "VALIDATE"}),
    "VALIDATE": frozenset({"BUFFER", "DONE"}),  # FAIL; PASS
    "DONE": frozenset({"PLAN"}),  # a new goal
}
"""Every move the workflow may make; any other is refused."""


class IllegalTransition(OpdslError):
    """A move the table does not allow."""


class PlanError(OpdslError):
    """A plan that is missing, malformed, or changed after it was locked."""


class VerdictError(OpdslError):
    """A validator's verdict that is missing, stale or contradicts itself."""


class DirectorState(CRDTModel):
    """What the workflow keeps: where it is, which step, what was tried, who implements."""

    fsm: LWWRegister[str] = LWWRegister(value="PLAN")
    #: the step the implementor is on (1-based)
    pointer: LWWRegister[int] = LWWRegister(value=1)
    #: failed attempts at the current step, and director fixes of it
    attempts: LWWRegister[int] = LWWRegister(value=0)
    fixes: LWWRegister[int] = LWWRegister(value=0)
    #: the plan's hash once DRAFT locked it
    plan_hash: LWWRegister[str] = LWWRegister()
    #: how many times the validator was asked
    validation_run: LWWRegister[int] = LWWRegister(value=0)
    #: ``backend:model``, chosen once per run
    implementor: LWWRegister[str] = LWWRegister()
    #: the run halted for the user after two director fixes of one step
    user_guided: LWWRegister[bool] = LWWRegister(value=False)
    #: every move, ``FROM -> TO``
    moves: Log[str] = Log()


def checkpoint_name(target: State, *, step: int = 0, run: int = 0) -> str:
    """The checkpoint a move into ``target`` passes: ``implement-step-N``, ``validate-run-K``,
    else the state's name in lower case."""
    if target == "IMPLEMENT":
        return f"implement-step-{step}"
    if target == "VALIDATE":
        return f"validate-run-{run}"
    return target.lower()


def enter(target: State) -> Op[DirectorState]:
    """Move the workflow to ``target`` (refused with :class:`IllegalTransition` unless the table
    allows it from where it is), then pass the checkpoint named after it."""
    if target not in TRANSITIONS:
        raise IllegalTransition(f"{target!r} is not a state of the workflow ({', '.join(STATES)})")
    s = yield from get(DirectorState)
    current = s.fsm.value or "PLAN"
    if target not in TRANSITIONS.get(current, frozenset()):  # type: ignore[call-overload]
        allowed = ", ".join(sorted(TRANSITIONS.get(current, frozenset()))) or "nothing"  # type: ignore[call-overload]
        raise IllegalTransition(
            f"the workflow is in {current} and cannot move to {target}; from {current} it may "
            f"move to {allowed}"
        )
    yield from update(fsm=Assign(target), moves=Append(f"{current} -> {target}"))
    if target == "VALIDATE":
        yield from update(validation_run=Assign((s.validation_run.value or 0) + 1))
    s = yield from get(DirectorState)
    yield from checkpoint(
        checkpoint_name(target, step=s.pointer.value or 1, run=s.validation_run.value or 0)
    )
    return s


# -- the plan ---------------------------------------------------------------------------------


class PlanStep(BaseModel):
    """One step: what it must achieve, the files it touches, the command that tests it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal: str = Field(min_length=1)
    files: list[str] = Field(min_length=1)
    test: str = Field(min_length=1)


class Plan(BaseModel):
    """The numbered steps that make the goal true."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal: str = Field(min_length=1)
    steps: list[PlanStep] = Field(min_length=1)

    def render(self) -> str:
        """The plan as the user reads it."""
        lines = [f"Goal: {self.goal}"]
        for i, step in enumerate(self.steps, start=1):
            lines.append(f"{i}. {step.goal}")
            lines.append(f"   files: {', '.join(step.files)}")
            lines.append(f"   test: {step.test}")
        return "\n".join(lines)


_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.S)


def parse_plan(text: str) -> Plan:
    """The plan in a model's answer: a JSON object ``{"goal": ..., "steps": [{"goal", "files",
    "test"}, ...]}``, bare or in a fenced block. What is wrong is said, with where."""
    fenced = _FENCE.search(text)
    body = (fenced.group(1) if fenced else text).strip()
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise PlanError(f"the plan is not JSON: {exc}") from None
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the plan"
        raise PlanError(f"the plan is malformed at {where}: {first['msg']}") from None


def plan_hash(plan: Plan) -> str:
    """The plan's fingerprint (sha256 of its canonical JSON): what DRAFT locks."""
    return hashlib.sha256(canonical_json(plan.model_dump()).encode()).hexdigest()


# -- the validator's verdict ------------------------------------------------------------------


class Verdict(BaseModel):
    """``PASS run=K`` or ``FAIL step=N run=K``."""

    model_config = ConfigDict(frozen=True)

    passed: bool
    run: int
    step: int | None = None


_VERDICT = re.compile(r"^\s*(PASS|FAIL)\b(.*)$", re.M)


def parse_verdict(text: str | None, *, run: int, steps: int) -> Verdict:
    """The verdict in ``handoff/validate.md``. Refused when missing, when it names another
    validation run (stale), when it names no step or a step the plan does not have (FAIL),
    or when it says both PASS and FAIL."""
    if text is None or not text.strip():
        raise VerdictError("handoff/validate.md is missing or empty: the validator gave no verdict")
    found = _VERDICT.findall(text)
    if not found:
        raise VerdictError(
            "handoff/validate.md holds no verdict line (PASS run=K or FAIL step=N run=K)"
        )
    kinds = {k for k, _ in found}
    if len(kinds) > 1:
        raise VerdictError("handoff/validate.md says both PASS and FAIL")
    kind, rest = found[-1]
    fields = dict(re.findall(r"(\w+)=(\d+)", rest))
    if "run" not in fields:
        raise VerdictError(f"the verdict {kind!r} names no run (run={run} expected)")
    if int(fields["run"]) != run:
        raise VerdictError(
            f"the verdict is stale: it is for validation run {fields['run']}, this is run {run}"
        )
    if kind == "PASS":
        return Verdict(passed=True, run=run)
    step = int(fields.get("step", 0))
    if not 1 <= step <= steps:
        raise VerdictError(f"FAIL names step {step or 'none'}; the plan has steps 1 to {steps}")
    return Verdict(passed=False, run=run, step=step)


# -- the workflow -----------------------------------------------------------------------------

IMPLEMENTOR_TOOLS = ("read_file", "write_file", "run", "delete_path", "finish_step", "blocked")
"""Exactly the tools an implementor gets (the workspace's, confined to it, and two of this
module's that end its turn)."""
DRAFTER_TOOLS = ("read_file", "write_file", "list_files", "run")
VALIDATOR_TOOLS = ("read_file", "list_files", "run", "write_file")

AUTHOR = "agent-implementor <agent@localhost>"
PLAN_FILE = "handoff/plan.json"
DRAFT_FILE = "handoff/draft.md"
VERDICT_FILE = "handoff/validate.md"
HANDOFF_FILES = (PLAN_FILE, DRAFT_FILE, VERDICT_FILE)
"""What one role hands to the next: each written by one writer only (the workflow, the
drafter, the validator)."""


_AUTHOR = re.compile(r"\s*([^<>]+?)\s*<([^<>\s]+@[^<>\s]+)>\s*")


def check_author(author: str) -> None:
    """Refuse a commit identity that is not ``Name <email@host>``, before anything changes."""
    if not isinstance(author, str) or _AUTHOR.fullmatch(author) is None:
        raise OpdslError(f"author={author!r} should look like Name <email@host>")


def finish_step(summary: str) -> str:
    """Say the step is done (the program then runs its test): what you changed, in a line."""
    return summary


def blocked(reason: str) -> str:
    """Say the step cannot be done as specified, and why (the director revises it)."""
    return reason


TOOLS = [finish_step, blocked]
"""The two tools of this module to bind beside the workspace's (``--tools
programs.director:TOOLS``)."""


def _offer(tools: tuple[str, ...]) -> str:
    return "You have exactly these tools: " + ", ".join(tools) + "."


PLANNER = (
    "You are the director of a small software change. Write a plan as one JSON object: "
    '{"goal": "...", "steps": [{"goal": "...", "files": ["..."], "test": "a shell command"}]}. '
    "Each step is small and fully specified; its test command passes only when it is done "
    "(a pytest command, such as python -m pytest -q tests/test_x.py, is judged by what pytest "
    "reports). Answer with the JSON alone."
)
DRAFTER = (
    "You are the drafter. Write the tests the plan's steps need (files whose names hold 'test'), "
    f"then a summary for the implementor in {DRAFT_FILE}. Do not implement the steps. "
    + _offer(DRAFTER_TOOLS)
)
IMPLEMENTOR = (
    "You are the implementor. Carry out exactly one step of a plan in the workspace; the tests "
    "are locked. When the step is done call finish_step; if it cannot be done as specified "
    "call blocked. " + _offer(IMPLEMENTOR_TOOLS)
)
REACH = "You are being checked before work starts. Answer with the word READY."
UNBLOCKER = (
    "You are the director. A step of the plan failed. Answer with the step revised, as one "
    'JSON object {"goal": "...", "files": ["..."], "test": "..."}, so that it can be done.'
)
VALIDATOR = (
    "You are the validator. Check that the whole change meets the plan's goal, run the tests, "
    f"and write your verdict in {VERDICT_FILE}: a line 'PASS run=K' or 'FAIL step=N run=K', K "
    "the validation run you are given. " + _offer(VALIDATOR_TOOLS)
)


class DirectorResult(BaseModel):
    """How the workflow ended."""

    done: bool
    commits: list[str] = []
    validation_runs: int = 0
    plan: Plan | None = None


class _TurnEnded(Exception):
    """The implementor called finish_step or blocked: its turn is over."""

    def __init__(self, tool: str, text: str) -> None:
        super().__init__(text)
        self.tool = tool
        self.text = text


def _ok(result: ToolResult, what: str) -> str:
    if not result.ok:
        raise OpdslError(f"{what}: {result.error}")
    return str(result.output)


class _Called(BaseModel):
    """One tool call a role made, and how it went."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    output: str


def _work(
    system: str,
    brief: str,
    tools: tuple[str, ...],
    backend: Backend,
    params: Mapping[str, Any],
    *,
    stop: tuple[str, ...] = (),
) -> Op[list[_Called]]:
    """A role's turn with ``tools``: on the run's model, opdsl's tool loop; on an agent
    backend, one fresh session whose only tools are these. Returns the calls made, up to and
    including the first one named in ``stop`` (which ends the turn). An agent's turn that
    fails raises its :class:`~op.ModelError`."""
    called: list[_Called] = []
    if backend == "model":

        def note(call: ToolCall, result: ToolResult) -> None:
            text = str(result.output) if result.ok else str(result.error)
            called.append(
                _Called(name=call.name, arguments=call.arguments, ok=result.ok, output=text)
            )
            if call.name in stop:
                raise _TurnEnded(call.name, str(result.output or call.arguments))

        options = dict(params)
        model = options.pop("model", None)
        with contextlib.suppress(_TurnEnded):
            yield from tool_loop(
                [Message.system(system), Message.user(brief)],
                tools=tools,
                model=None if model is None else str(model),
                on_result=note,
                params=options,
                max_steps=30,
            )
        return called
    record = yield from agent(
        backend,
        brief,
        tools=list(tools),
        system_prompt=system,
        max_turns=30,
        **_agent_params(params),
    )
    for t in record.tool_calls:
        name = str(t.get("name"))
        args = t.get("input")
        called.append(
            _Called(
                name=name,
                arguments=args if isinstance(args, dict) else {},
                ok=t.get("status") == "ok",
                output=str(t.get("output") or ""),
            )
        )
        if name in stop and called[-1].ok:
            break
    return called


def _agent_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """What an agent backend takes of the run's parameters: its model."""
    return {"model": str(params["model"])} if params.get("model") else {}


def _answer(messages: list[Message], backend: Backend, params: Mapping[str, Any]) -> Op[str]:
    """A role's answer in words (no tools), appended to ``messages`` as the assistant's."""
    if backend == "model":
        reply: Response = yield from infer(messages, **dict(params))
        messages.append(reply.as_message())
        return reply.text
    conversation = "\n\n".join(f"[{m.role}]\n{m.content}" for m in messages[1:])
    record = yield from agent(
        backend,
        conversation,
        tools=[],
        system_prompt=messages[0].content,
        max_turns=1,
        **_agent_params(params),
    )
    messages.append(Message(role="assistant", content=record.text))
    return record.text


def _ask_plan(goal: str, roles: Backend, params: Mapping[str, Any]) -> Op[Plan]:
    """PLAN: the director writes a plan; the user reads it and answers APPROVE or says what to
    change. The workflow does not leave PLAN without APPROVE."""
    messages = [Message.system(PLANNER), Message.user(f"Goal: {goal}")]
    while True:
        text = yield from _answer(messages, roles, params)
        try:
            plan = parse_plan(text)
        except PlanError as exc:
            messages.append(Message.user(f"{exc}. Answer with the plan's JSON alone."))
            continue
        answer = yield from ask(
            f"{plan.render()}\n\nAnswer APPROVE to start, or say what to change."
        )
        if answer.strip() == "APPROVE":
            return plan
        messages.append(Message.user(f"Change the plan: {answer}"))


def _written(called: list[_Called], path: str) -> str | None:
    """What a role's own ``write_file`` calls last wrote to ``path`` (None: nothing)."""
    content = None
    for c in called:
        where = c.arguments.get("path")
        named = isinstance(where, str) and posixpath.normpath(where) == path
        if c.name == "write_file" and c.ok and named:
            text = c.arguments.get("content")
            content = text if isinstance(text, str) else None
    return content


def _clear(path: str) -> Op[None]:
    """Before its writer's turn: ``path`` unlocked and removed, so that what is there after
    the turn can only be that turn's."""
    _ok((yield from tool("unlock_files", {"patterns": [path]})), f"unlocking {path}")
    gone = yield from tool("delete_path", {"path": path})
    if not gone.ok and "does not exist" not in str(gone.error):
        raise OpdslError(f"cannot remove {path} before its writer's turn: {gone.error}")


def _lock(paths: list[str], *, runner: bool = False) -> Op[None]:
    """Lock ``paths`` (``runner``: and how tests run) against every turn."""
    _ok((yield from tool("lock_files", {"patterns": paths, "runner": runner})), "locking")


def _broken() -> Op[str]:
    """What the last turn changed among the locked files ("" when nothing): the workspace
    put each back; the turn that did it is not trusted."""
    checked = yield from tool("check_locks", {})
    return "" if checked.ok else str(checked.error)


def _handed(called: list[_Called], path: str, who: str) -> Op[str | None]:
    """The file ``path`` as ``who`` handed it over: what its own write_file wrote, and what
    the file holds. None when it wrote nothing; an error when the two differ."""
    own = _written(called, path)
    if own is None:
        return None
    there = yield from tool("read_file", {"path": path})
    if not there.ok or str(there.output) != own:
        raise OpdslError(
            f"{path} is not what the {who} wrote with write_file: it was changed after its write"
        )
    return own


def _draft(plan: Plan, roles: Backend, params: Mapping[str, Any]) -> Op[tuple[list[str], str]]:
    """DRAFT: the drafter writes the tests and its summary; returns the test files written and
    the summary. The plan and the verdict are locked against it; the summary is taken only as
    the drafter's own write_file wrote it."""
    yield from _clear(DRAFT_FILE)
    called = yield from _work(DRAFTER, plan.render(), DRAFTER_TOOLS, roles, params)
    broken = yield from _broken()
    if broken:
        raise PlanError(f"the drafter changed what it may not: {broken}")
    written = [
        str(c.arguments.get("path", ""))
        for c in called
        if c.name == "write_file"
        and c.ok
        and "test" in str(c.arguments.get("path", "")).rsplit("/", 1)[-1]
    ]
    try:
        summary = yield from _handed(called, DRAFT_FILE, "drafter")
    except OpdslError as exc:
        raise PlanError(str(exc)) from None
    if summary is None or not summary.strip():
        raise PlanError(f"the drafter wrote no summary in {DRAFT_FILE}; DRAFT cannot end")
    return sorted(set(written)), summary


def _locked_plan(expected: str) -> Op[Plan]:
    """The plan as the workspace holds it, checked against the hash DRAFT locked."""
    text = yield from tool("read_file", {"path": PLAN_FILE})
    if not text.ok:
        raise PlanError(f"{PLAN_FILE} is gone: {text.error}")
    plan = parse_plan(str(text.output))
    if plan_hash(plan) != expected:
        raise PlanError(
            f"{PLAN_FILE} changed after it was locked (its hash is no longer {expected[:12]})"
        )
    return plan


def _implement(
    step: PlanStep,
    number: int,
    summary: str,
    failure: str,
    guidance: str,
    backend: Backend,
    params: Mapping[str, Any],
    author: str = AUTHOR,
) -> Op[tuple[str, str]]:
    """One attempt at one step by a fresh implementor (a new conversation; on an agent
    backend, a new process): ("passed", commit or note), ("failed", why) or
    ("blocked", why)."""
    brief = (
        f"Step {number}: {step.goal}\nFiles: {', '.join(step.files)}\nTest: {step.test}\n\n"
        f"The drafter's summary:\n{summary}"
    )
    if failure:
        brief += f"\n\nThe last attempt failed:\n{failure}"
    if guidance:
        brief += f"\n\nGuidance from the user:\n{guidance}"
    try:
        called = yield from _work(
            IMPLEMENTOR, brief, IMPLEMENTOR_TOOLS, backend, params, stop=("finish_step", "blocked")
        )
    except ModelError as exc:
        yield from _broken()  # what the cut-off turn changed is put back, and forgotten
        return "failed", f"the implementor's turn failed: {exc}"
    broken = yield from _broken()
    if broken:
        return "failed", f"the implementor changed what it may not: {broken}"
    ended = [c for c in called if c.name in ("finish_step", "blocked") and c.ok]
    if not ended:
        return "failed", "the implementor stopped without calling finish_step or blocked"
    if ended[0].name == "blocked":
        return "blocked", ended[0].output or str(ended[0].arguments)
    tested = yield from tool("run_test", {"command": shlex.split(step.test)})
    broken = yield from _broken()
    if not tested.ok:
        return "failed", f"the step's test failed:\n{tested.error or tested.output}"
    if broken:
        return "failed", f"the step's test changed what it may not: {broken}"
    yield from tool("git_add", {"paths": []})
    commit = yield from tool(
        "git_commit", {"message": f"step {number}: {step.goal}", "author": author}
    )
    if not commit.ok:  # reported, never blocking
        yield from emit("commit_failed", {"step": number, "error": commit.error})
        return "passed", ""
    return "passed", str(commit.output)


def _revise(step: PlanStep, why: str, roles: Backend, params: Mapping[str, Any]) -> Op[PlanStep]:
    """BUFFER: the director (an unblocker) revises a step that failed."""
    messages = [Message.system(UNBLOCKER), Message.user(f"{step.model_dump_json()}\n\n{why}")]
    for _ in range(3):
        text = yield from _answer(messages, roles, params)
        try:
            body = _FENCE.search(text)
            return PlanStep.model_validate_json((body.group(1) if body else text).strip())
        except ValidationError as exc:
            messages.append(Message.user(f"Not a step: {exc.errors()[0]['msg']}"))
    return step


def _validate(run: int, plan: Plan, roles: Backend, params: Mapping[str, Any]) -> Op[Verdict]:
    """VALIDATE: the validator checks the whole result and writes its verdict, which must be
    there, be for this run and agree with itself (asked again twice, then the run fails)."""
    note = f"Validation run {run}.\n\n{plan.render()}"
    for _ in range(3):
        # the verdict is the validator's alone: removed before its turn, locked after it,
        # taken only as its own write_file wrote it
        yield from _clear(VERDICT_FILE)
        called = yield from _work(VALIDATOR, note, VALIDATOR_TOOLS, roles, params)
        yield from _lock([VERDICT_FILE])
        broken = yield from _broken()
        try:
            if broken:
                raise VerdictError(f"the validator's turn changed what it may not: {broken}")
            try:
                own = yield from _handed(called, VERDICT_FILE, "validator")
            except OpdslError as exc:
                raise VerdictError(str(exc)) from None
            return parse_verdict(own, run=run, steps=len(plan.steps))
        except VerdictError as exc:
            note = f"Validation run {run}. Your verdict was refused: {exc}.\n\n{plan.render()}"
    raise VerdictError(f"no valid verdict for validation run {run} after three tries")


@program(state=DirectorState)
def director(
    goal: str,
    mode: Literal["progressive", "direct"] = "progressive",
    model: str | None = None,
    max_attempts: int = 4,
    max_fixes: int = 2,
    max_tokens: int = 4096,
    implementor: Backend = "model",
    roles: Backend = "model",
    ask_next: bool = False,
    author: str = AUTHOR,
) -> Op[DirectorResult]:
    """Take ``goal`` from a plan the user approves to validated, committed steps.

    Run it with a workspace (``--workspace REPO``, a git repository), the run's model, and
    this module's :data:`TOOLS`. ``mode``: progressive runs every remaining step before
    validating; direct validates after each step. ``implementor``: who carries out the
    steps, the run's model or ``claude-code``; ``roles``: who plans, drafts, revises and
    validates. ``model``: the model name the implementor uses (default: the backend's own).
    Both backends are chosen here, once, and recorded in the run's state; an agent backend
    that cannot run is refused before anything changes. ``ask_next``: at DONE, ask the user
    for the next goal (DONE -> PLAN) until they answer END. ``author``: who the steps'
    commits are by (``Name <email>``; unsigned, hooks off, whatever the repository says).
    """
    check_author(author)
    for name, value in (("implementor", implementor), ("roles", roles)):
        if value not in BACKENDS:
            raise OpdslError(f"{name}={value!r} is not a backend ({', '.join(BACKENDS)})")
    for backend in sorted({implementor, roles} - {"model"}):
        yield from agent(backend, "", probe=True)  # refused here, before any change
    if implementor != "model" and roles == "model":
        # the roles' model is met at PLAN, before any change; the implementor's only at
        # IMPLEMENT, so it is asked once now: its CLI, its login and its model must answer
        try:
            yield from agent(
                implementor,
                "Answer with the word READY.",
                tools=[],
                system_prompt=REACH,
                max_turns=1,
                **({"model": model} if model else {}),
            )
        except ModelError as exc:
            raise OpdslError(
                f"the implementor backend {implementor} cannot be reached: {exc}"
            ) from None
    params: dict[str, Any] = {"max_tokens": max_tokens}
    yield from update(implementor=Assign(f"{implementor}:{model or 'default'}"))
    commits: list[str] = []
    locked: list[str] = []
    while True:
        plan = yield from _ask_plan(goal, roles, params)
        yield from update(plan_hash=Assign(plan_hash(plan)), pointer=Assign(1))
        yield from enter("DRAFT")
        # what the last goal locked is lifted; the plan is the workflow's, the verdict the
        # validator's: both locked against the drafter
        _ok(
            (yield from tool("unlock_files", {"patterns": locked, "runner": True})),
            "unlocking the last goal's files",
        )
        yield from _clear(VERDICT_FILE)
        yield from _clear(PLAN_FILE)
        written = yield from tool(
            "write_file", {"path": PLAN_FILE, "content": plan.model_dump_json(indent=2)}
        )
        _ok(written, f"writing {PLAN_FILE}")
        yield from _lock([PLAN_FILE, VERDICT_FILE])
        tests, summary = yield from _draft(plan, roles, params)
        yield from enter("BUFFER")
        locked = [*tests, *HANDOFF_FILES]
        try:
            result = yield from _steps(
                plan,
                summary,
                locked,
                commits,
                mode,
                (implementor, roles),
                {**params, **({"model": model} if model else {})},
                params,
                max_attempts=max_attempts,
                max_fixes=max_fixes,
                author=author,
            )
        except PlanError as defect:
            # the locked plan changed: back to PLAN, saying what happened
            yield from emit("plan_defect", {"error": str(defect)})
            s = yield from get(DirectorState)
            if s.fsm.value != "BUFFER":  # met between two steps (progressive): via BUFFER
                yield from enter("BUFFER")
            yield from enter("PLAN")
            goal = f"{goal}\n\n(The previous plan was abandoned: {defect})"
            continue
        if not ask_next:
            return result
        answer = yield from ask(
            f"Done: {plan.goal} ({len(commits)} commits so far). Give the next goal, or answer "
            "END to finish."
        )
        if answer.strip() == "END":
            return result
        yield from enter("PLAN")
        goal = answer.strip()


def _try_step(
    step: PlanStep,
    pointer: int,
    summary: str,
    guidance: str,
    locked: list[str],
    commits: list[str],
    implementor: Backend,
    params: Mapping[str, Any],
    *,
    author: str,
    max_attempts: int,
) -> Op[tuple[str, str]]:
    """IMPLEMENT: up to ``max_attempts`` fresh implementors at one step, each told why the
    last failed; a ``blocked`` ends the tries at once. ("passed", "") or the last outcome and
    why it failed; each failed attempt is counted in ``attempts``."""
    failure, outcome = "", "failed"
    for _ in range(max_attempts):
        yield from _lock(locked, runner=True)  # again: locks live as long as a process
        outcome, detail = yield from _implement(
            step, pointer, summary, failure, guidance, implementor, params, author
        )
        if outcome == "passed":
            if detail:
                commits.append(detail)
            return "passed", ""
        s = yield from get(DirectorState)
        yield from update(attempts=Assign((s.attempts.value or 0) + 1))
        failure = detail
        if outcome == "blocked":
            break
    return outcome, failure


def _failed_to_buffer(max_fixes: int) -> Op[bool]:
    """A step that failed (its attempts spent, or blocked) goes to BUFFER and counts as one
    more round for the director to fix; True when that is more than ``max_fixes`` rounds: the
    workflow halts for the user (``user_guided``)."""
    yield from enter("BUFFER")
    s = yield from get(DirectorState)
    fixes = (s.fixes.value or 0) + 1
    yield from update(fixes=Assign(fixes), attempts=Assign(0))
    if fixes > max_fixes:
        yield from update(user_guided=Assign(True))
        return True
    return False


def _steps(
    plan: Plan,
    summary: str,
    locked: list[str],
    commits: list[str],
    mode: str,
    backends: tuple[Backend, Backend],
    implementor_params: dict[str, Any],
    params: dict[str, Any],
    *,
    max_attempts: int,
    max_fixes: int,
    author: str,
) -> Op[DirectorResult]:
    """From BUFFER: implement the steps, validate, until the validator says PASS (DONE)."""
    implementor, roles = backends
    steps = list(plan.steps)
    guidance = ""
    while True:
        s = yield from get(DirectorState)
        pointer = s.pointer.value or 1
        # the plan is checked before the implementor starts: one edited since DRAFT locked
        # it is a plan defect, and the workflow goes back to PLAN from where it is
        yield from _locked_plan(s.plan_hash.value or "")
        yield from enter("IMPLEMENT")
        outcome, failure = yield from _try_step(
            steps[pointer - 1],
            pointer,
            summary,
            guidance,
            locked,
            commits,
            implementor,
            implementor_params,
            author=author,
            max_attempts=max_attempts,
        )
        if outcome != "passed":
            if (yield from _failed_to_buffer(max_fixes)):
                guidance = yield from ask(
                    f"Step {pointer} ({steps[pointer - 1].goal}) still fails after {max_fixes} "
                    f"revisions:\n{failure}\n\nWhat should the implementor do?"
                )
            else:
                steps[pointer - 1] = yield from _revise(steps[pointer - 1], failure, roles, params)
            continue
        guidance = ""
        yield from update(pointer=Assign(pointer + 1), attempts=Assign(0), fixes=Assign(0))
        if mode == "progressive" and pointer < len(steps):
            continue
        yield from enter("VALIDATE")
        s = yield from get(DirectorState)
        run = s.validation_run.value or 1
        verdict = yield from _validate(run, plan, roles, params)
        if verdict.passed and pointer >= len(steps):
            yield from enter("DONE")
            return DirectorResult(done=True, commits=commits, validation_runs=run, plan=plan)
        yield from enter("BUFFER")
        if not verdict.passed and verdict.step is not None:
            yield from update(pointer=Assign(verdict.step))
            steps[verdict.step - 1] = yield from _revise(
                steps[verdict.step - 1],
                f"The validator failed this step (validation run {verdict.run}).",
                roles,
                params,
            )


# -- the workflow directed from outside (a Claude Code session, over MCP) ---------------------

MOVES = (
    "status",
    "to",
    "handoff_draft",
    "handoff_verdict",
    "revise_step",
    "run_implementor",
    "abandon",
)
"""What a director outside the run may ask of :func:`directed`, one move per answer."""


class _Refused(OpdslError):
    """A move the workflow does not take now; nothing was changed."""


@program(state=DirectorState)
def directed(
    mode: Literal["progressive", "direct"] = "progressive",
    implementor: Backend = "model",
    model: str | None = None,
    max_attempts: int = 4,
    max_fixes: int = 2,
    max_tokens: int = 4096,
    author: str = AUTHOR,
) -> Op[str]:
    """The same workflow with its director outside the run: a person's Claude Code session
    plans with them, drafts and validates (through its subagents), and moves the machine one
    step at a time through ``opdsl mcp director``. Each move is the answer to the run's
    ``ask`` (a JSON object, ``{"move": NAME, ...}``, one of :data:`MOVES`), and the next
    question is the move's reply, so every move is an effect of this one durable run: it can
    be closed at any point and resumed where it was. Every move is checked against the same
    table and rules as :func:`director`; one refused says ``REFUSED: why`` and changes
    nothing. The implementor (``implementor``, ``model``) is chosen here, once."""
    check_author(author)
    if implementor not in BACKENDS:
        raise OpdslError(f"implementor={implementor!r} is not a backend ({', '.join(BACKENDS)})")
    if implementor != "model":
        yield from agent(implementor, "", probe=True)  # refused here, before any change
    yield from update(implementor=Assign(f"{implementor}:{model or 'default'}"))
    baseline = _ok(
        (yield from tool("snapshot_files", {"name": "director/baseline"})), "snapshotting"
    )
    w = _Directed(mode, implementor, model, max_attempts, max_fixes, max_tokens, author)
    reply = yield from w.status()
    while True:
        raw = yield from ask(reply)
        try:
            move = json.loads(raw)
            if not isinstance(move, dict) or move.get("move") not in MOVES:
                raise _Refused(f'a move is a JSON object {{"move": one of {", ".join(MOVES)}}}')
            if move["move"] == "abandon":
                restored = yield from tool("restore_files", {"tree": baseline})
                yield from emit("abandoned", {"restored": restored.ok, "error": restored.error})
                return "ABANDONED: the files are as they were when the workflow started"
            reply = yield from w.perform(move)
        except ValueError:
            reply = "REFUSED: a move is JSON"
        except (_Refused, IllegalTransition, PlanError, VerdictError) as exc:
            reply = f"REFUSED: {exc}"


class _Directed:
    """What :func:`directed` keeps between moves (rebuilt by replay, as any program's locals)."""

    def __init__(
        self,
        mode: str,
        implementor: Backend,
        model: str | None,
        max_attempts: int,
        max_fixes: int,
        max_tokens: int,
        author: str,
    ) -> None:
        self.mode = mode
        self.implementor: Backend = implementor
        # on the model backend the run's own model implements (``model`` only names it)
        self.params: dict[str, Any] = {
            "max_tokens": max_tokens,
            **({"model": model} if model and implementor != "model" else {}),
        }
        self.max_attempts = max_attempts
        self.max_fixes = max_fixes
        self.author = author
        self.plan: Plan | None = None
        self.steps: list[PlanStep] = []
        self.summary: str | None = None
        self.tests: list[str] = []
        self.locked: list[str] = []
        self.commits: list[str] = []
        #: what BUFFER waits for before the implementor runs again: "" (nothing), "fix" (the
        #: director revises the failed step) or "guidance" (the user says what to do)
        self.need = ""

    def status(self) -> Op[str]:
        s = yield from get(DirectorState)
        fsm = s.fsm.value or "PLAN"
        moves = sorted(TRANSITIONS[fsm])  # type: ignore[index]
        steps = len(self.steps)
        fields = [
            f"state={fsm}",
            f"step={s.pointer.value or 1}/{steps}",
            f"attempts={s.attempts.value or 0}",
            f"fixes={s.fixes.value or 0}",
            f"validation_run={s.validation_run.value or 0}",
            f"plan_hash={(s.plan_hash.value or '-')[:12]}",
            f"implementor={s.implementor.value}",
            f"mode={self.mode}",
            f"user_guided={str(bool(s.user_guided.value)).lower()}",
            f"next={','.join(moves)}",
        ]
        if self.need:
            fields.append(f"needs={self.need}")
        return " ".join(fields)

    def perform(self, move: dict[str, Any]) -> Op[str]:
        name = move["move"]
        if name == "status":
            return (yield from self.status())
        s = yield from get(DirectorState)
        fsm = s.fsm.value or "PLAN"
        if name == "to":
            return (yield from self.to(fsm, str(move.get("state", "")), move))
        if name == "handoff_draft":
            return (yield from self.handoff_draft(fsm, move))
        if name == "handoff_verdict":
            return (yield from self.handoff_verdict(fsm, s, move))
        if name == "revise_step":
            return (yield from self.revise_step(fsm, s, move))
        return (yield from self.run_implementor(fsm, move))

    # -- fsm_to ------------------------------------------------------------------------------

    def to(self, fsm: str, target: str, move: dict[str, Any]) -> Op[str]:
        if target not in STATES:
            raise _Refused(f"{target!r} is not a state of the workflow ({', '.join(STATES)})")
        if target not in TRANSITIONS[fsm]:  # type: ignore[index]
            allowed = ", ".join(sorted(TRANSITIONS[fsm]))  # type: ignore[index]
            raise _Refused(
                f"the workflow is in {fsm} and cannot move to {target}; from {fsm} it may "
                f"move to {allowed}"
            )
        if target == "IMPLEMENT":
            raise _Refused("only run_implementor() moves the workflow into IMPLEMENT")
        if fsm == "IMPLEMENT":
            raise _Refused("the implementor is at work; its run_implementor() moves on")
        if target == "DRAFT":
            return (yield from self._draft(move))
        if target == "BUFFER" and fsm == "DRAFT":
            return (yield from self._buffer())
        if fsm == "VALIDATE":
            return (yield from self._judged(target))
        if target == "PLAN":
            if fsm == "BUFFER" and not str(move.get("reason", "")).strip():
                raise _Refused("BUFFER -> PLAN is for a plan defect: say it (reason=...)")
            yield from enter("PLAN")
            self.need = ""
            return (yield from self.status())
        raise _Refused(f"{fsm} -> {target} is not a move a director makes")  # pragma: no cover

    def _draft(self, move: dict[str, Any]) -> Op[str]:
        raw = move.get("plan")
        if raw is None:
            raise _Refused("PLAN -> DRAFT takes the plan the user approved (plan={goal, steps})")
        text = raw if isinstance(raw, str) else json.dumps(raw)
        plan = parse_plan(text)  # refused, as a PlanError, before anything changes
        _ok(
            (yield from tool("unlock_files", {"patterns": self.locked, "runner": True})),
            "unlocking the last goal's files",
        )
        for path in (VERDICT_FILE, PLAN_FILE, DRAFT_FILE):
            yield from _clear(path)
        written = yield from tool(
            "write_file", {"path": PLAN_FILE, "content": plan.model_dump_json(indent=2)}
        )
        _ok(written, f"writing {PLAN_FILE}")
        yield from _lock([PLAN_FILE, VERDICT_FILE])
        yield from update(plan_hash=Assign(plan_hash(plan)), pointer=Assign(1))
        yield from update(attempts=Assign(0), fixes=Assign(0), user_guided=Assign(False))
        yield from enter("DRAFT")
        self.plan, self.steps, self.summary, self.tests = plan, list(plan.steps), None, []
        self.need = ""
        return (yield from self.status())

    def _buffer(self) -> Op[str]:
        s = yield from get(DirectorState)
        if self.summary is None:
            raise _Refused(
                f"the drafter handed over no summary ({DRAFT_FILE}): call handoff_draft first"
            )
        yield from _locked_plan(s.plan_hash.value or "")
        there = yield from tool("read_file", {"path": DRAFT_FILE})
        if not there.ok or str(there.output) != self.summary:
            raise _Refused(f"{DRAFT_FILE} is not what the drafter handed over")
        self.locked = [*self.tests, *HANDOFF_FILES]
        yield from _lock(self.locked, runner=True)
        yield from enter("BUFFER")
        return (yield from self.status())

    def _judged(self, target: str) -> Op[str]:
        s = yield from get(DirectorState)
        text = yield from tool("read_file", {"path": VERDICT_FILE})
        verdict = parse_verdict(
            str(text.output) if text.ok else None,
            run=s.validation_run.value or 0,
            steps=len(self.steps),
        )
        left = (s.pointer.value or 1) <= len(self.steps)
        if target == "DONE" and not verdict.passed:
            raise VerdictError(f"the verdict is FAIL step={verdict.step}: VALIDATE goes to BUFFER")
        if target == "DONE" and left:
            raise _Refused("steps are left: a PASS in direct mode goes to BUFFER")
        if target == "BUFFER" and verdict.passed and not left:
            raise VerdictError("the verdict is PASS and every step is done: VALIDATE goes to DONE")
        yield from enter(target)  # type: ignore[arg-type]
        if not verdict.passed and verdict.step is not None:
            yield from update(pointer=Assign(verdict.step))
            self.need = "fix"
        return (yield from self.status())

    # -- the roles' hand-overs ---------------------------------------------------------------

    def handoff_draft(self, fsm: str, move: dict[str, Any]) -> Op[str]:
        if fsm != "DRAFT":
            raise _Refused(f"the drafter hands over in DRAFT; the workflow is in {fsm}")
        summary = move.get("summary")
        tests = move.get("tests")
        if not isinstance(summary, str) or not summary.strip():
            raise _Refused("handoff_draft needs the drafter's summary for the implementor")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise _Refused("handoff_draft needs the test files the drafter wrote (tests=[...])")
        for test in tests:
            found = yield from tool("read_file", {"path": test})
            if not found.ok:
                raise _Refused(f"the drafter's test {test} cannot be read: {found.error}")
        _ok((yield from tool("write_file", {"path": DRAFT_FILE, "content": summary})), "writing")
        self.summary, self.tests = summary, sorted(set(tests))
        return f"OK {DRAFT_FILE} written; the tests {', '.join(self.tests)} lock at BUFFER"

    def handoff_verdict(self, fsm: str, s: DirectorState, move: dict[str, Any]) -> Op[str]:
        if fsm != "VALIDATE":
            raise _Refused(f"the validator hands over in VALIDATE; the workflow is in {fsm}")
        text = move.get("verdict")
        run = s.validation_run.value or 0
        verdict = parse_verdict(
            text if isinstance(text, str) else None, run=run, steps=len(self.steps)
        )
        yield from _clear(VERDICT_FILE)
        _ok((yield from tool("write_file", {"path": VERDICT_FILE, "content": text})), "writing")
        yield from _lock([VERDICT_FILE])
        kind = "PASS" if verdict.passed else f"FAIL step={verdict.step}"
        return f"OK {VERDICT_FILE}: {kind} run={run}"

    def revise_step(self, fsm: str, s: DirectorState, move: dict[str, Any]) -> Op[str]:
        if fsm != "BUFFER" or self.need != "fix":
            raise _Refused("a step is revised in BUFFER after it failed (the director's fix)")
        try:
            step = PlanStep.model_validate(move.get("step"))
        except ValidationError as exc:
            raise _Refused(f"not a step: {exc.errors()[0]['msg']}") from None
        pointer = s.pointer.value or 1
        self.steps[pointer - 1] = step
        self.need = ""
        yield from emit("step_revised", {"step": pointer, "goal": step.goal})
        return (yield from self.status())

    # -- run_implementor ---------------------------------------------------------------------

    def run_implementor(self, fsm: str, move: dict[str, Any]) -> Op[str]:
        """BUFFER -> IMPLEMENT: the remaining steps (progressive) or the one at the pointer
        (direct); one HANDOFF line when the implementor is done."""
        if fsm != "BUFFER":
            raise _Refused(f"run_implementor() starts from BUFFER; the workflow is in {fsm}")
        guidance = str(move.get("guidance") or "")
        if self.need == "fix":
            raise _Refused("the step failed: revise it first (revise_step), a director fix")
        if self.need == "guidance" and not guidance.strip():
            raise _Refused("halted for the user (user_guided=true): pass their guidance=...")
        if self.implementor != "model":
            try:  # its CLI must still start: else refused here, before any change
                yield from agent(self.implementor, "", probe=True)
            except ModelError as exc:
                raise _Refused(f"the implementor backend cannot run: {exc}") from None
        while True:
            s = yield from get(DirectorState)
            pointer = s.pointer.value or 1
            try:
                yield from _locked_plan(s.plan_hash.value or "")
            except PlanError as defect:
                yield from emit("plan_defect", {"error": str(defect)})
                if s.fsm.value != "BUFFER":
                    yield from enter("BUFFER")
                yield from enter("PLAN")
                self.need = ""
                return f"HANDOFF state=PLAN reason={defect}"
            yield from enter("IMPLEMENT")
            outcome, failure = yield from _try_step(
                self.steps[pointer - 1],
                pointer,
                self.summary or "",
                guidance,
                self.locked,
                self.commits,
                self.implementor,
                self.params,
                author=self.author,
                max_attempts=self.max_attempts,
            )
            if outcome != "passed":
                halted = yield from _failed_to_buffer(self.max_fixes)
                self.need = "guidance" if halted else "fix"
                said = failure.strip().splitlines()[0][:300] if failure.strip() else outcome
                return (
                    f"HANDOFF state=BUFFER step={pointer} outcome={outcome} "
                    f"user_guided={str(halted).lower()} reason={said}"
                )
            guidance, self.need = "", ""
            yield from update(pointer=Assign(pointer + 1), attempts=Assign(0), fixes=Assign(0))
            if self.mode == "progressive" and pointer < len(self.steps):
                continue
            s = yield from enter("VALIDATE")
            return (
                f"HANDOFF state=VALIDATE run={s.validation_run.value} step={pointer} "
                f"commits={len(self.commits)}"
            )
