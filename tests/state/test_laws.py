"""CRDT laws, on canonical bytes: commutative, associative, idempotent, inflationary, and
convergent under any delivery order with duplicates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from state import (
    CRDT,
    GCounter,
    GSet,
    Log,
    LWWRegister,
    MVRegister,
    ORMap,
    ORSet,
    PNCounter,
    Stamp,
)

REPLICAS = ["r/1.1", "r/1.2", "r/1.3"]
ITEMS = st.sampled_from(["a", "b", "c", "d"])

# Each replica applies its own ops in order, with its own Lamport clock, and occasionally
# merges a state from another replica: realistic histories, not arbitrary JSON.
Op = tuple[str, Any]


def _ops(kinds: list[str]) -> st.SearchStrategy[list[tuple[int, str, Any]]]:
    return st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(kinds), st.one_of(ITEMS, st.integers(0, 5))),
        max_size=12,
    )


def _simulate(
    empty: CRDT, apply: Callable[[CRDT, str, Any, Stamp], CRDT], ops: list[tuple[int, str, Any]]
) -> list[CRDT]:
    states = [empty for _ in REPLICAS]
    clocks = [0, 0, 0]
    for who, kind, arg in ops:
        if kind == "sync":
            src = arg % 3 if isinstance(arg, int) else 0
            states[who] = states[who].merge(states[src])
            clocks[who] = max(clocks[who], states[who].max_lamport())
            continue
        clocks[who] = max(clocks[who], states[who].max_lamport()) + 1
        states[who] = apply(states[who], kind, arg, Stamp(REPLICAS[who], clocks[who]))
    return states


def _apply(state: CRDT, kind: str, arg: Any, stamp: Stamp) -> CRDT:
    match state, kind:
        case GCounter(), "inc":
            return state.inc(stamp, arg if isinstance(arg, int) else 1)
        case PNCounter(), "inc":
            return state.inc(stamp, arg if isinstance(arg, int) else 1)
        case PNCounter(), "dec":
            return state.dec(stamp, arg if isinstance(arg, int) else 1)
        case GSet(), "add":
            return state.add(str(arg))
        case ORSet(), "add":
            return state.add(str(arg), stamp)
        case ORSet(), "remove":
            return state.remove(str(arg))
        case LWWRegister() | MVRegister(), "assign":
            return state.assign(arg, stamp)
        case Log(), "append":
            return state.append(arg, stamp)
        case ORMap(), "add":
            return state.update(str(arg), lambda v: v.inc(stamp, 1), stamp)
        case ORMap(), "remove":
            return state.remove(str(arg))
    raise AssertionError((state, kind))


TYPES: list[tuple[str, Callable[[], CRDT], list[str]]] = [
    ("GCounter", GCounter, ["inc", "sync"]),
    ("PNCounter", PNCounter, ["inc", "dec", "sync"]),
    ("GSet", GSet[str], ["add", "sync"]),
    ("ORSet", ORSet[str], ["add", "remove", "sync"]),
    ("LWWRegister", LWWRegister[Any], ["assign", "sync"]),
    ("MVRegister", MVRegister[Any], ["assign", "sync"]),
    ("Log", Log[Any], ["append", "sync"]),
    ("ORMap", ORMap[GCounter], ["add", "remove", "sync"]),
]


def _b(x: CRDT) -> str:
    return x.canonical()


def _law_test(make: Callable[[], CRDT], kinds: list[str]) -> Callable[..., None]:
    @settings(max_examples=150, deadline=None)
    @given(ops=_ops(kinds), order=st.randoms(use_true_random=False))
    def law(ops: list[tuple[int, str, Any]], order: Any) -> None:
        a, b, c = _simulate(make(), _apply, ops)
        assert _b(a.merge(b)) == _b(b.merge(a)), "merge is not commutative"
        assert _b(a.merge(b).merge(c)) == _b(a.merge(b.merge(c))), "merge is not associative"
        assert _b(a.merge(a)) == _b(a), "merge is not idempotent"
        ab = a.merge(b)
        assert _b(a.merge(ab)) == _b(ab), "merge did not grow: a is not below a ⊔ b"
        # convergence: deliver the three states in any order, with duplicates
        deliveries = [a, b, c, a, c]
        order.shuffle(deliveries)
        acc = make()
        for s in deliveries:
            acc = acc.merge(s)
        assert _b(acc) == _b(a.merge(b).merge(c)), "replicas did not converge"
        # JSON round trip keeps the bytes
        assert _b(type(a).model_validate_json(a.model_dump_json())) == _b(a)

    return law


for _name, _make, _kinds in TYPES:
    globals()[f"test_laws_{_name}"] = _law_test(_make, _kinds)
