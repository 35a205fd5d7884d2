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

This module holds the machine, the run's state and the rules for the plan and the
validator's verdict; it is written only against ``op`` and ``state``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from op import Append, Assign, Op, OpdslError, checkpoint, get, update
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
