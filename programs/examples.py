"""A small example program: fix a file with a model under a budget, then review in parallel.

It is what ``opdsl demo`` runs offline with a scripted model, and what the README's
quickstart grows into.
"""

from __future__ import annotations

from op import (
    Add,
    Append,
    Budget,
    Failure,
    Inc,
    Message,
    Op,
    checkpoint,
    emit,
    get,
    infer,
    limit,
    par,
    tool,
    update,
)
from programs.loop import tool_loop
from state import CRDTModel, GCounter, GSet, Log

__all__ = ["EditState", "fix_file", "review"]


class EditState(CRDTModel):
    """What the program tracks: files it changed, tokens spent, notes from reviewers."""

    files_modified: GSet[str] = GSet()
    tokens: GCounter = GCounter()
    notes: Log[str] = Log()


SYSTEM = (
    "You fix files. Read the file with read_file, write the corrected whole file with "
    "write_file, then answer with one line saying what you changed."
)


def fix_file(path: str, task: str) -> Op[str]:
    """Fix ``path`` as ``task`` says, within a budget; then two reviewers look in parallel."""
    yield from checkpoint("before-fix")
    outcome = yield from limit(Budget(tokens=20_000, model_calls=6), _fix(path, task))
    if isinstance(outcome, Failure):
        exhausted = outcome.failure()
        yield from emit("budget_exhausted", exhausted)
        return f"gave up: the {exhausted.exceeded} budget ran out"
    summary = outcome.unwrap()
    yield from checkpoint("before-review")
    verdicts = yield from par(review(path, "correctness"), review(path, "style"))
    state = yield from get(EditState)
    yield from emit("reviewed", {"verdicts": list(verdicts), "notes": list(state.notes.items)})
    return summary


def _fix(path: str, task: str) -> Op[str]:
    messages = [Message.system(SYSTEM), Message.user(f"{task}\nThe file is {path}.")]
    reply, history = yield from tool_loop(messages, tools=["read_file", "write_file"], max_steps=5)
    for m in history:
        for call in m.tool_calls:
            if call.name == "write_file":
                yield from update(files_modified=Add(call.arguments.get("path", path)))
    yield from update(tokens=Inc(reply.usage.total_tokens))
    return reply.text


def review(path: str, aspect: str) -> Op[str]:
    """One reviewer: read the file, ask the model for a one-line verdict, note it."""
    text = (yield from tool("read_file", {"path": path})).output
    reply = yield from infer(f"Review this file for {aspect}. One line.\n\n{text}")
    yield from update(notes=Append(f"{aspect}: {reply.text}"), tokens=Inc(reply.usage.total_tokens))
    return reply.text
