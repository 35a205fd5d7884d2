"""What if a stored run had used another model: priced without calling it (``cost``), or forked
at a checkpoint with the model swapped and run for real (``whatif``), side by side with the
original, which is never changed.

Pricing a run under another model prices the token counts its model calls recorded at that
model's price, call by call (a price can depend on the prompt's length). The other model's
tokenizer counts differently, so the figure is an estimate, and says so.

A fork may also be given another system prompt (``system_prompt``): every model call the fork
makes after its checkpoint is sent that text as its system message, in place of the system
messages the program wrote (or before its messages, when it wrote none). The journal keeps
each ``infer`` as the program asked for it; the prompt the model was sent is the fork's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, final

from interpreters.journal import Entry, Journal, RunRecord
from interpreters.models._base import CallInfo, Model, resolve_model
from interpreters.models._remote import RemoteModel
from interpreters.observe._diff import RunDiff, diff_runs
from interpreters.runtime._driver import RunResult
from op import Infer, Message, OpdslError, Response, Usage
from op.effects import ModelRequest

__all__ = [
    "TOKENIZER_CAVEAT",
    "RunCost",
    "SystemPrompted",
    "WhatIf",
    "cost_of",
    "priced_model",
    "whatif",
]

TOKENIZER_CAVEAT = (
    "the token counts are those the recorded models reported; another model's tokenizer "
    "counts the same text otherwise, so a price under it is an estimate"
)


@final
@dataclass(frozen=True)
class RunCost:
    """A run's model calls (from ``after``, an address, when given): how many, their tokens,
    what they cost as recorded, and what they would cost at ``priced_as``'s price."""

    run_id: str
    program: str
    calls: int
    usage: Usage
    recorded_usd: float | None
    recorded_models: tuple[str, ...]
    priced_as: str | None = None
    priced_usd: float | None = None
    unpriced_calls: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "program": self.program,
            "calls": self.calls,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "cache_write_tokens": self.usage.cache_write_tokens,
            "recorded_usd": self.recorded_usd,
            "recorded_models": list(self.recorded_models),
            "priced_as": self.priced_as,
            "priced_usd": self.priced_usd,
        }


def priced_model(spec: str) -> RemoteModel:
    """The model ``spec`` names, to price by (it is not called)."""
    try:
        model = resolve_model(spec)
    except ValueError as exc:  # a wrong spec: the user's to fix
        raise OpdslError(f"--model {spec}: {exc}") from None
    if not isinstance(model, RemoteModel):
        raise OpdslError(f"--model {spec}: not a model with a price (a provider's model spec)")
    return model


@final
class SystemPrompted:
    """``inner``, sent ``prompt`` as the system message of every request: the request's own
    system messages are left out, and ``prompt`` goes first.

    Example:
        >>> from interpreters.models import ScriptedModel
        >>> SystemPrompted(ScriptedModel(["hi"]), "Be brief.").with_prompt(
        ...     (Message.system("Be long."), Message.user("Hello"))
        ... )[0].content
        'Be brief.'
    """

    def __init__(self, inner: Model, prompt: str) -> None:
        self.inner = inner
        self.prompt = prompt
        # what a trace says of the model: the inner one's
        self.provider: object = getattr(inner, "provider", None)
        self.model: object = getattr(inner, "model", None)

    def with_prompt(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        return (Message.system(self.prompt), *(m for m in messages if m.role != "system"))

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
        sent = request.model_copy(update={"messages": self.with_prompt(request.messages)})
        return await self.inner.complete(sent, call)


def _usage(entry: Entry) -> Usage:
    try:
        return Usage.model_validate_json(entry.usage_json or "{}")
    except ValueError:
        return Usage()


def _answered_by(entry: Entry) -> str | None:
    try:
        data = json.loads(entry.result_json or "null")
    except ValueError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) and model else None


def cost_of(
    record: RunRecord,
    entries: Iterable[Entry],
    model: RemoteModel | None = None,
    *,
    after_seq: int | None = None,
) -> RunCost:
    """The cost of a run's model calls (those after the entry numbered ``after_seq``, when
    given), as recorded and, with ``model``, at its price."""
    calls, total, recorded, unknown = 0, Usage(), 0.0, False
    priced, unpriced = 0.0, 0
    models: set[str] = set()
    for e in entries:
        if e.kind != Infer.kind or e.status != "completed":
            continue
        if after_seq is not None and e.seq <= after_seq:
            continue
        calls += 1
        usage = _usage(e)
        total = total + usage.model_copy(update={"cost_usd": None, "price_source": None})
        if usage.cost_usd is None:
            unknown = True
        else:
            recorded += usage.cost_usd
        answered = _answered_by(e)
        if answered is not None:
            models.add(answered)
        if model is not None:
            bare = usage.model_copy(update={"cost_usd": None, "price_source": None})
            cost = model.prices.priced(
                model.model, bare, provider=model.provider, base_url=model.base_url
            ).cost_usd
            if cost is None:
                unpriced += 1
            else:
                priced += cost
    return RunCost(
        run_id=record.run_id,
        program=record.program,
        calls=calls,
        usage=total.model_copy(update={"cost_usd": None}),
        recorded_usd=None if unknown else recorded,
        recorded_models=tuple(sorted(models)),
        priced_as=None if model is None else model.spec,
        priced_usd=None if model is None or unpriced else priced,
        unpriced_calls=unpriced,
    )


@final
@dataclass
class WhatIf:
    """A run and its fork with another model: the fork's result, where they part, and what
    each cost."""

    original: RunRecord
    fork: RunResult[Any] | None
    diff: RunDiff | None
    cost_before: RunCost
    cost_after: RunCost
    from_checkpoint: str | None = None
    #: the fork as its journal holds it (how it ended, its result)
    forked: RunRecord | None = None

    @property
    def ended_the_same(self) -> bool | None:
        """Whether the fork ended as the original did, with the same result (None: a dry
        run, nothing was run)."""
        if self.forked is None:
            return None
        a, b = self.original, self.forked
        return a.status == b.status and a.result_json == b.result_json


def whatif(
    run_id: str,
    *,
    db: str | Journal | None,
    model: str,
    from_checkpoint: str | None = None,
    dry_run: bool = False,
    accept_changed_code: bool = False,
    resume_kwargs: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> WhatIf:
    """Fork run ``run_id`` at ``from_checkpoint`` (None: its first checkpoint) with ``model``
    (and, given ``system_prompt``, that text as the system message of each of its model calls)
    and run the fork for real; or, ``dry_run``, price the original's model calls after the
    checkpoint at ``model``'s price without calling it. The original is never changed."""
    from interpreters._resume import checkpoint_labels, find_checkpoint, resume
    from interpreters.journal import open_journal

    journal = open_journal(db, create=False)
    record = journal.run(run_id)
    entries = journal.entries(run_id)
    if from_checkpoint is None:
        labels = checkpoint_labels(entries)
        if not labels:
            raise OpdslError(
                f"run {run_id} passed no checkpoint to fork from; a what-if forks the run at one"
            )
        from_checkpoint = labels[0][0]
    cp = find_checkpoint(entries, from_checkpoint)
    if dry_run and system_prompt is not None:
        raise OpdslError(
            "a dry run prices the calls as recorded, with the prompt they had; another system "
            "prompt needs a fork that runs"
        )
    priced = priced_model(model) if dry_run else _maybe_priced(model)
    before = cost_of(record, entries, priced, after_seq=cp.seq)
    if dry_run:
        return WhatIf(record, None, None, before, before, from_checkpoint)
    fork = resume(
        run_id,
        db=journal,
        from_checkpoint=from_checkpoint,
        model=model if system_prompt is None else SystemPrompted(_model(model), system_prompt),
        accept_changed_code=accept_changed_code,
        **dict(resume_kwargs or {}),
    )
    forked = journal.run(fork.run_id)
    fork_entries = journal.entries(fork.run_id)
    found = diff_runs(record, entries, forked, fork_entries, journal.content)
    # the fork numbers its entries afresh: its copy of the checkpoint is found by address
    at = next((e.seq for e in fork_entries if e.address == cp.address), cp.seq)
    after = cost_of(forked, fork_entries, after_seq=at)
    return WhatIf(record, fork, found, before, after, from_checkpoint, forked)


def _model(spec: str) -> Model:
    try:
        found = resolve_model(spec)
    except ValueError as exc:  # a wrong spec: the user's to fix
        raise OpdslError(f"--model {spec}: {exc}") from None
    assert found is not None
    return found


def _maybe_priced(spec: str) -> RemoteModel | None:
    try:
        return priced_model(spec)
    except (OpdslError, ValueError):
        return None
