"""The program ``bench/check.py`` records and checks: importable by its name, as ``opdsl check``
imports the program a journal names."""

from __future__ import annotations

from op import Op, checkpoint, emit, now, tool

EFFECTS = 100


def lookup(sku: str, n: int) -> str:
    """The one tool of the program: a price from its arguments."""
    return f"{sku}:{n * 7 % 101}"


def order(customer: int) -> Op[int]:
    """100 effects: two checkpoints, then tools, emits and clock reads taking turns."""
    yield from checkpoint("start")
    total = 0
    for i in range(EFFECTS - 2):
        match i % 3:
            case 0:
                r = yield from tool("lookup", {"sku": f"c{customer}-{i}", "n": i})
                total += len(r.output)
            case 1:
                yield from emit("line", {"customer": customer, "i": i, "total": total})
            case _:
                yield from now()
    yield from checkpoint("done")
    return total
