"""What each CRDT means, beyond the laws (laws alone pass a wrong OR-Set)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from state import (
    Add,
    Append,
    Assign,
    At,
    CRDTModel,
    Dec,
    GCounter,
    GSet,
    Inc,
    Log,
    LWWRegister,
    MVRegister,
    ORMap,
    ORSet,
    PNCounter,
    Remove,
    Stamp,
    StateError,
)


def test_gcounter_shared_replica_id_loses_an_increment() -> None:
    # the reason replica ids come from branch addresses: two writers on one id lose counts
    a = GCounter().inc(Stamp("r", 1), 1)
    b = GCounter().inc(Stamp("r", 1), 1)
    assert a.merge(b).value == 1
    c = GCounter().inc(Stamp("r/1.1", 1), 1)
    d = GCounter().inc(Stamp("r/1.2", 1), 1)
    assert c.merge(d).value == 2


def test_gcounter_refuses_to_shrink() -> None:
    with pytest.raises(ValueError, match="PNCounter"):
        GCounter().inc(Stamp("r", 1), -1)


def test_pncounter_goes_both_ways() -> None:
    s = PNCounter().inc(Stamp("r", 1), 5).dec(Stamp("r", 2), 2)
    t = PNCounter().dec(Stamp("r/2", 1), 1)
    assert s.merge(t).value == 2


def test_lww_tie_is_broken_by_replica_then_value() -> None:
    a = LWWRegister[str]().assign("fix", Stamp("r/1", 3))
    b = LWWRegister[str]().assign("feat", Stamp("r/2", 3))
    assert a.merge(b).value == "feat" and b.merge(a).value == "feat"
    later = LWWRegister[str]().assign("old-replica-later", Stamp("r/0", 4))
    assert a.merge(b).merge(later).value == "old-replica-later"


def test_mvregister_keeps_concurrent_siblings_and_overwrites_seen_ones() -> None:
    a = MVRegister[int]().assign(23, Stamp("r/1", 1))
    b = MVRegister[int]().assign(23, Stamp("r/2", 1))
    both = a.merge(b)
    assert both.values == (23, 23) and both.conflicted
    resolved = both.assign(7, Stamp("r/1", 2))
    assert resolved.merge(b).values == (7,)
    assert not resolved.merge(both).conflicted


def test_orset_concurrent_add_wins_over_remove() -> None:
    base = ORSet[str]().add("x", Stamp("r", 1))
    removed = base.remove("x")
    readded = base.add("x", Stamp("r/2", 2))
    assert "x" in removed.merge(readded)
    assert "x" in readded.merge(removed)


def test_orset_remove_of_seen_add_sticks() -> None:
    a = ORSet[str]().add("x", Stamp("r/1", 1))
    b = a.merge(ORSet[str]()).remove("x")
    assert "x" not in a.merge(b)


def test_log_orders_by_lamport_then_replica_and_dedups() -> None:
    a = Log[str]().append("E2", Stamp("r/1", 2))
    b = Log[str]().append("E1", Stamp("r/2", 1)).append("E3", Stamp("r/2", 3))
    merged = a.merge(b)
    assert merged.items == ("E1", "E2", "E3")
    assert merged.merge(a).merge(b).items == merged.items  # a subgraph's full state is no duplicate


def test_ormap_counters_merge_per_key_and_keys_observed_remove() -> None:
    m = ORMap[GCounter]().update("a.py", lambda c: c.inc(Stamp("r/1", 1), 2), Stamp("r/1", 1))
    n = ORMap[GCounter]().update("a.py", lambda c: c.inc(Stamp("r/2", 1), 3), Stamp("r/2", 1))
    assert m.merge(n).get("a.py").value == 5
    gone = m.merge(n).remove("a.py")
    assert gone.merge(m).keys() == [] and gone.merge(n).keys() == []


def test_ormap_remove_concurrent_with_an_update_stays_associative() -> None:
    # found by the law tests: a value merged from two writers must not outlive the remove
    # of one of them differently depending on merge order
    s1, s3 = Stamp("r/1.1", 1), Stamp("r/1.3", 1)
    a = ORMap[GCounter]().update("c", lambda v: v.inc(s1, 1), s1)
    b = ORMap[GCounter]().merge(a)
    c = ORMap[GCounter]().update("c", lambda v: v.inc(s3, 1), s3)
    a = a.remove("c")
    left, right = a.merge(b).merge(c), a.merge(b.merge(c))
    assert left.canonical() == right.canonical()
    assert left.get("c").value == 1


class ORSetMachine(RuleBasedStateMachine):
    """Two replicas against a reference model of add-wins semantics."""

    def __init__(self) -> None:
        super().__init__()
        self.replicas = [ORSet[str](), ORSet[str]()]
        self.clock = [0, 0]
        self.count = [0, 0]
        # reference: for each element, the set of adds (replica, n) not yet observed-removed
        self.adds: list[dict[str, set[tuple[int, int]]]] = [{}, {}]

    @rule(who=st.integers(0, 1), item=st.sampled_from("abc"))
    def add(self, who: int, item: str) -> None:
        self.clock[who] += 1
        self.count[who] += 1  # the ORSet's dot counter for this replica: its number of adds
        self.replicas[who] = self.replicas[who].add(item, Stamp(f"r/{who}", self.clock[who]))
        self.adds[who][item] = {(who, self.count[who])}

    @rule(who=st.integers(0, 1), item=st.sampled_from("abc"))
    def remove(self, who: int, item: str) -> None:
        self.replicas[who] = self.replicas[who].remove(item)
        self.adds[who].pop(item, None)

    @rule(dst=st.integers(0, 1))
    def sync(self, dst: int) -> None:
        src = 1 - dst
        before = self.replicas[dst]
        self.replicas[dst] = self.replicas[dst].merge(self.replicas[src])
        # inflation: what dst knew is below what it knows now
        assert before.merge(self.replicas[dst]).canonical() == self.replicas[dst].canonical()
        self.clock[dst] = max(self.clock)

    @invariant()
    def value_is_elements_with_live_adds(self) -> None:
        for r in self.replicas:
            assert r.value == frozenset(e for e, _, _ in r.dots)

    @invariant()
    def merged_contains_every_unremoved_local_add(self) -> None:
        merged = self.replicas[0].merge(self.replicas[1])
        for who in (0, 1):
            for item, dots in self.adds[who].items():
                # an add that no other replica has observed must survive the merge (add wins)
                other = self.replicas[1 - who]
                unseen = any(n > other.clock.get(f"r/{w}", 0) for w, n in dots)
                if unseen:
                    assert item in merged


TestORSet = ORSetMachine.TestCase
TestORSet.settings = settings(max_examples=80, stateful_step_count=20, deadline=None)


class GCounterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.replicas = [GCounter(), GCounter(), GCounter()]
        self.total = 0

    @rule(who=st.integers(0, 2), n=st.integers(0, 4))
    def inc(self, who: int, n: int) -> None:
        self.replicas[who] = self.replicas[who].inc(Stamp(f"r/{who}", 1), n)
        self.total += n

    @rule(src=st.integers(0, 2), dst=st.integers(0, 2))
    def sync(self, src: int, dst: int) -> None:
        self.replicas[dst] = self.replicas[dst].merge(self.replicas[src])

    @invariant()
    def full_merge_counts_every_increment(self) -> None:
        merged = self.replicas[0].merge(self.replicas[1]).merge(self.replicas[2])
        assert merged.value == self.total


TestGCounter = GCounterMachine.TestCase
TestGCounter.settings = settings(max_examples=60, stateful_step_count=20, deadline=None)


class CodeState(CRDTModel):
    files_modified: GSet[str] = GSet()
    errors: Log[str] = Log()
    tokens: GCounter = GCounter()
    budget: PNCounter = PNCounter()
    branch: LWWRegister[str] = LWWRegister()
    owner: MVRegister[str] = MVRegister()
    tags: ORSet[str] = ORSet()
    per_file: ORMap[GCounter] = ORMap[GCounter]()


def test_model_fields_start_empty_and_ops_apply() -> None:
    s = CodeState()
    s = s.apply(
        {
            "files_modified": Add("a.py"),
            "errors": Append("boom"),
            "tokens": Inc(120),
            "budget": Dec(3),
            "branch": Assign("main"),
            "owner": Assign("me"),
            "tags": Add("x"),
            "per_file": At("a.py", Inc(2)),
        },
        Stamp("r", 1),
    )
    assert s.files_modified.sorted() == ["a.py"]
    assert s.errors.items == ("boom",)
    assert (s.tokens.value, s.budget.value, s.branch.value, s.owner.value) == (
        120,
        -3,
        "main",
        "me",
    )
    assert s.per_file.get("a.py").value == 2
    s = s.apply({"tags": Remove("x"), "per_file": Remove("a.py")}, Stamp("r", 2))
    assert "x" not in s.tags and s.per_file.keys() == []
    assert CodeState.model_validate_json(s.model_dump_json()).canonical() == s.canonical()


def test_model_refuses_a_non_crdt_field_at_definition() -> None:
    with pytest.raises(TypeError, match=r"Bad\.name: str is not a CRDT.*LWWRegister\[str\]"):

        class Bad(CRDTModel):
            name: str


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({"nope": Inc(1)}, "has no field 'nope'"),
        ({"files_modified": Inc(1)}, "CodeState.files_modified is a GSet; it takes Add, not Inc"),
        ({"tokens": Inc(-1)}, "only grows"),
        ({"branch": Add("x")}, "takes Assign"),
        ({"per_file": At("a", Add("x"))}, r"per_file\['a'\] is a GCounter"),
        ({"tokens": "increment"}, "not str"),
    ],
)
def test_model_rejects_operations_that_do_not_fit(ops: dict[str, Any], message: str) -> None:
    with pytest.raises(StateError, match=message):
        CodeState().apply(ops, Stamp("r", 1))


def test_model_merge_is_field_by_field_and_refuses_other_types() -> None:
    a = CodeState().apply({"files_modified": Add("a"), "tokens": Inc(1)}, Stamp("r/1", 1))
    b = CodeState().apply({"files_modified": Add("b"), "tokens": Inc(2)}, Stamp("r/2", 1))
    m = a.merge(b)
    assert m.files_modified.sorted() == ["a", "b"] and m.tokens.value == 3

    class Other(CRDTModel):
        tokens: GCounter = GCounter()

    with pytest.raises(TypeError, match="cannot merge"):
        a.merge(Other())  # type: ignore[arg-type]


def test_conflicts_are_paths_two_branches_both_added() -> None:
    base = CodeState().apply({"files_modified": Add("shared.py")}, Stamp("r", 1))
    a = base.apply({"files_modified": Add("x.py"), "tags": Add("t")}, Stamp("r/1.1", 2))
    b = base.apply({"files_modified": Add("x.py")}, Stamp("r/1.2", 2))
    c = base.apply({"files_modified": Add("y.py"), "tags": Add("t")}, Stamp("r/1.3", 2))
    assert a.conflicts_since(base, [b, c]) == {"files_modified": ["x.py"], "tags": ["t"]}


def test_canonical_bytes_do_not_depend_on_hash_seed() -> None:
    code = (
        "from state import GSet, ORSet, Stamp\n"
        "s = GSet[str](items=frozenset(f'f{i}' for i in range(50)))\n"
        "o = ORSet[str]()\n"
        "for i in range(30): o = o.add(f'e{i}', Stamp('r', i + 1))\n"
        "print(s.canonical() + o.canonical())\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outs) == 1
