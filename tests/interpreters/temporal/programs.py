"""Programs for the Temporal tests (the workflow sandbox imports them again: they read nothing of
the process; the tools they call are in ``tools``). In-process test workers pass ``tests``
through the sandbox, since pytest's assertion rewriting cannot run inside it; the ``opdsl
worker`` processes import them in the sandbox."""

from __future__ import annotations

from op import Budget, Failure, Op, ask, checkpoint, limit, par, timeout, tool


def steps(n: int, seconds: float) -> Op[list[str]]:
    """``n`` slow tool calls one after another, a checkpoint after each."""
    out = []
    for i in range(n):
        r = yield from tool("slow", {"label": f"s{i}", "seconds": seconds})
        out.append(r.output)
        yield from checkpoint(f"step-{i}")
    return out


def cut_off(seconds: float) -> Op[list[str]]:
    """A timeout around a slow tool, then a par whose failing branch cuts its sibling off."""
    first = yield from timeout(seconds, tool("slow", {"label": "timed", "seconds": 30.0}))

    def fails() -> Op[str]:
        yield from tool("slow", {"label": "quick", "seconds": 0.1})
        raise KeyError("branch 2 gave up")

    try:
        yield from par(tool("slow", {"label": "sibling", "seconds": 30.0}), fails())
        second = "joined"
    except KeyError as exc:
        second = f"caught {exc}"
    return [type(first.failure()).__name__ if isinstance(first, Failure) else "finished", second]


def greet(name: str) -> Op[str]:
    """One tool call with an argument (the tests change it to show replay catches it)."""
    r = yield from tool("slow", {"label": f"hello {name}", "seconds": 0.0})
    return r.output


def asks_plan(goal: str) -> Op[str]:
    """The README's example: a checkpoint named ``plan``, then a tool call."""
    yield from checkpoint("plan")
    r = yield from tool("slow", {"label": f"planned {goal}", "seconds": 0.0})
    return r.output


def budgeted(seconds: float) -> Op[list[str]]:
    """A quick tool, a tool that returns a secret, and a ``seconds`` budget on workflow time."""
    count = yield from tool("word_count", {"text": "one two three"})
    secret = yield from tool("leak", {})
    spent = yield from limit(Budget(seconds=seconds), steps(10, 0.4))
    why = spent.failure().exceeded if isinstance(spent, Failure) else "finished"
    return [count.output, secret.output, why]


def asks_name() -> Op[str]:
    """Waits for an answer (the ``answer`` update)."""
    name = yield from ask("What is your name?")
    return f"hello {name}"


def scoped_steps(n: int) -> Op[int]:
    """``n`` tool calls one after another inside a ``timeout`` scope (where a run cannot
    continue as new)."""
    done = yield from timeout(600.0, steps(n, 0.0))
    return len(done.unwrap())
