"""State-based CRDTs: values whose ``merge`` is commutative, associative and idempotent.

Every type here is a frozen pydantic model; updates return a new value. An update takes a
:class:`Stamp` (the writing replica's id and its Lamport time), which the interpreter
supplies, so programs never handle replica ids themselves.

The rules each type keeps:

- ``GCounter``: one slot per replica, merged by pointwise max; the value is the sum. Two
  writers that share a replica id lose increments, which is why replica ids come from branch
  addresses and a branch never reuses its parent's id.
- ``PNCounter``: two GCounters, increments and decrements.
- ``GSet``: union.
- ``ORSet``: add-wins observed-remove set without tombstones (ORSWOT): each element keeps the
  dots (replica, counter) of the adds that produced it, plus a version vector; a dot seen on
  one side only survives a merge unless the other side's clock already covers it (it was
  removed there).
- ``LWWRegister``: the write with the greatest (lamport, replica, canonical value) wins, a
  total order, so ties are settled the same way on every replica.
- ``MVRegister``: concurrent writes are all kept as siblings (even equal values), ``value`` is
  the LWW winner among them and ``values`` shows them all.
- ``ORMap``: string keys with observed-remove semantics over CRDT values merged per key.
- ``Log``: an append-only log of entries identified by (replica, seq), read in
  (lamport, replica, seq) order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

from state._canonical import canonical_json

__all__ = [
    "CRDT",
    "GCounter",
    "GSet",
    "LWWRegister",
    "Log",
    "LogEntry",
    "MVEntry",
    "MVRegister",
    "ORMap",
    "ORMapEntry",
    "ORSet",
    "PNCounter",
    "Stamp",
]

T = TypeVar("T")
H = TypeVar("H", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Stamp:
    """Who writes and when: a replica id and that replica's Lamport time for this write."""

    replica: str
    lamport: int


class CRDT(BaseModel):
    """Base of every CRDT: frozen, no extra fields, ``merge`` is the lattice join."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Short name used in error messages ("a GSet takes Add").
    crdt_name: ClassVar[str] = "CRDT"

    def merge(self, other: Self) -> Self:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def max_lamport(self) -> int:
        """The greatest Lamport time recorded in this value (0 when none)."""
        return 0

    def added_since(self, base: Self) -> frozenset[Any] | None:
        """Elements that this set-like value gained since ``base``; None for non-sets."""
        return None

    def canonical(self) -> str:
        """Canonical JSON of this value: equal values give equal bytes."""
        return canonical_json(self)

    def _check_same(self, other: object) -> None:
        if not isinstance(other, _origin(type(self))):
            raise TypeError(f"cannot merge a {type(other).__name__} into a {type(self).__name__}")


def _origin(cls: type[BaseModel]) -> type[BaseModel]:
    meta: dict[str, Any] = getattr(cls, "__pydantic_generic_metadata__", {}) or {}
    origin = meta.get("origin")
    return cast(type[BaseModel], origin) if origin is not None else cls


def _max_map(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for key, n in b.items():
        if n > out.get(key, 0):
            out[key] = n
    return out


class GCounter(CRDT):
    """A grow-only counter.

    Example:
        >>> a = GCounter().inc(Stamp("r/1", 1), 2)
        >>> b = GCounter().inc(Stamp("r/2", 1), 3)
        >>> a.merge(b).value, a.merge(b).merge(a).value
        (5, 5)
    """

    crdt_name: ClassVar[str] = "GCounter"
    counts: dict[str, int] = Field(default_factory=dict)

    @field_validator("counts")
    @classmethod
    def _no_empty_slots(cls, counts: dict[str, int]) -> dict[str, int]:
        if any(n < 0 for n in counts.values()):
            raise ValueError("GCounter slots cannot be negative")
        # a zero slot and a missing slot mean the same; keep one spelling for canonical bytes
        return {k: n for k, n in counts.items() if n}

    @property
    def value(self) -> int:
        return sum(self.counts.values())

    def inc(self, stamp: Stamp, n: int = 1) -> GCounter:
        if n < 0:
            raise ValueError(f"a GCounter only grows; cannot add {n} (use a PNCounter)")
        if n == 0:
            return self
        counts = dict(self.counts)
        counts[stamp.replica] = counts.get(stamp.replica, 0) + n
        return GCounter(counts=counts)

    def merge(self, other: GCounter) -> GCounter:
        self._check_same(other)
        return GCounter(counts=_max_map(self.counts, other.counts))


class PNCounter(CRDT):
    """A counter that goes up and down: two GCounters."""

    crdt_name: ClassVar[str] = "PNCounter"
    p: GCounter = Field(default_factory=GCounter)
    n: GCounter = Field(default_factory=GCounter)

    @property
    def value(self) -> int:
        return self.p.value - self.n.value

    def inc(self, stamp: Stamp, n: int = 1) -> PNCounter:
        if n < 0:
            return self.dec(stamp, -n)
        return PNCounter(p=self.p.inc(stamp, n), n=self.n)

    def dec(self, stamp: Stamp, n: int = 1) -> PNCounter:
        if n < 0:
            return self.inc(stamp, -n)
        return PNCounter(p=self.p, n=self.n.inc(stamp, n))

    def merge(self, other: PNCounter) -> PNCounter:
        self._check_same(other)
        return PNCounter(p=self.p.merge(other.p), n=self.n.merge(other.n))


class GSet(CRDT, Generic[H]):
    """A grow-only set.

    Example:
        >>> GSet[str](items=frozenset({"b"})).add("a").merge(GSet[str](items=frozenset({"c"}))).sorted()
        ['a', 'b', 'c']
    """

    crdt_name: ClassVar[str] = "GSet"
    items: frozenset[H] = Field(default_factory=frozenset)

    @property
    def value(self) -> frozenset[H]:
        return self.items

    def sorted(self) -> list[H]:
        return sorted(self.items, key=canonical_json)

    def __contains__(self, item: object) -> bool:
        return item in self.items

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: H) -> Self:
        return self.model_copy(update={"items": self.items | {item}})

    def merge(self, other: Self) -> Self:
        self._check_same(other)
        return self.model_copy(update={"items": self.items | other.items})

    def added_since(self, base: Self) -> frozenset[Any]:
        return self.items - base.items


Dot = tuple[str, int]


def _covered(dot: Dot, clock: dict[str, int]) -> bool:
    return dot[1] <= clock.get(dot[0], 0)


class ORSet(CRDT, Generic[H]):
    """An add-wins observed-remove set (ORSWOT: no tombstones, a version vector instead).

    Example:
        >>> s = ORSet[str]().add("x", Stamp("r/1", 1))
        >>> removed = s.remove("x")
        >>> readded = s.add("x", Stamp("r/2", 2))      # concurrent with the remove
        >>> sorted(removed.merge(readded).value)      # the concurrent add wins
        ['x']
    """

    crdt_name: ClassVar[str] = "ORSet"
    dots: frozenset[tuple[H, str, int]] = Field(default_factory=frozenset)
    clock: dict[str, int] = Field(default_factory=dict)

    @property
    def value(self) -> frozenset[H]:
        return frozenset(e for e, _, _ in self.dots)

    def sorted(self) -> list[H]:
        return sorted(self.value, key=canonical_json)

    def __contains__(self, item: object) -> bool:
        return any(e == item for e, _, _ in self.dots)

    def add(self, item: H, stamp: Stamp) -> Self:
        n = self.clock.get(stamp.replica, 0) + 1
        dots = frozenset(d for d in self.dots if d[0] != item) | {(item, stamp.replica, n)}
        return self.model_copy(update={"dots": dots, "clock": {**self.clock, stamp.replica: n}})

    def remove(self, item: H) -> Self:
        return self.model_copy(update={"dots": frozenset(d for d in self.dots if d[0] != item)})

    def merge(self, other: Self) -> Self:
        self._check_same(other)
        keep = self.dots & other.dots
        keep |= {d for d in self.dots - other.dots if not _covered((d[1], d[2]), other.clock)}
        keep |= {d for d in other.dots - self.dots if not _covered((d[1], d[2]), self.clock)}
        return self.model_copy(
            update={"dots": frozenset(keep), "clock": _max_map(self.clock, other.clock)}
        )

    def added_since(self, base: Self) -> frozenset[Any]:
        return self.value - base.value


def _lww_key(lamport: int, replica: str, value: Any) -> tuple[int, str, str]:
    return (lamport, replica, canonical_json(value))


class LWWRegister(CRDT, Generic[T]):
    """A last-writer-wins register ordered by (Lamport time, replica id, canonical value).

    Example:
        >>> a = LWWRegister[str]().assign("fix", Stamp("r/1", 1))
        >>> b = LWWRegister[str]().assign("feat", Stamp("r/2", 1))
        >>> a.merge(b).value == b.merge(a).value == "feat"   # tie on time: higher replica id
        True
    """

    crdt_name: ClassVar[str] = "LWWRegister"
    value: T | None = None
    lamport: int = 0
    replica: str = ""

    def assign(self, value: T, stamp: Stamp) -> Self:
        return self.model_copy(
            update={"value": value, "lamport": stamp.lamport, "replica": stamp.replica}
        )

    def merge(self, other: Self) -> Self:
        self._check_same(other)
        mine = _lww_key(self.lamport, self.replica, self.value)
        theirs = _lww_key(other.lamport, other.replica, other.value)
        return self if mine >= theirs else other

    def max_lamport(self) -> int:
        return self.lamport


class MVEntry(BaseModel, Generic[T]):
    """One sibling of a multi-value register: the dot that wrote it, its time and value."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    replica: str
    counter: int
    lamport: int
    value: T


class MVRegister(CRDT, Generic[T]):
    """A multi-value register: concurrent writes are kept side by side until overwritten.

    Example:
        >>> a = MVRegister[int]().assign(23, Stamp("r/1", 1))
        >>> b = MVRegister[int]().assign(23, Stamp("r/2", 1))
        >>> a.merge(b).values    # equal concurrent values stay two siblings
        (23, 23)
    """

    crdt_name: ClassVar[str] = "MVRegister"
    entries: tuple[MVEntry[T], ...] = ()
    clock: dict[str, int] = Field(default_factory=dict)

    @property
    def values(self) -> tuple[T, ...]:
        return tuple(e.value for e in self.entries)

    @property
    def value(self) -> T | None:
        """The deterministic winner among the siblings (greatest LWW key), None if unset."""
        if not self.entries:
            return None
        return max(self.entries, key=lambda e: _lww_key(e.lamport, e.replica, e.value)).value

    @property
    def conflicted(self) -> bool:
        return len(self.entries) > 1

    def assign(self, value: T, stamp: Stamp) -> Self:
        n = self.clock.get(stamp.replica, 0) + 1
        entry = MVEntry[Any](replica=stamp.replica, counter=n, lamport=stamp.lamport, value=value)
        return self.model_copy(
            update={"entries": (entry,), "clock": {**self.clock, stamp.replica: n}}
        )

    def merge(self, other: Self) -> Self:
        self._check_same(other)
        mine = {(e.replica, e.counter): e for e in self.entries}
        theirs = {(e.replica, e.counter): e for e in other.entries}
        keep: dict[Dot, MVEntry[T]] = {}
        for dot, e in mine.items():
            if dot in theirs or not _covered(dot, other.clock):
                keep[dot] = e
        for dot, e in theirs.items():
            if dot not in mine and not _covered(dot, self.clock):
                keep[dot] = e
        entries = tuple(keep[d] for d in sorted(keep))
        return self.model_copy(
            update={"entries": entries, "clock": _max_map(self.clock, other.clock)}
        )

    def max_lamport(self) -> int:
        return max((e.lamport for e in self.entries), default=0)


V = TypeVar("V", bound=CRDT)


class ORMapEntry(BaseModel, Generic[V]):
    """One write to a key of an :class:`ORMap`: the dot that made it and the value it left."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    key: str
    replica: str
    counter: int
    value: V


class ORMap(CRDT, Generic[V]):
    """A map from string keys to CRDT values; keys are observed-remove, values merge per key.

    Each write to a key is kept under its own dot (replica, counter) together with the value it
    left; the dots follow the add-wins rule of :class:`ORSet`, and a key's value is the merge
    of the values under its surviving dots. A write replaces the dots it observed.

    Gotcha: a key removed on one replica while another concurrently updates it survives with
    the updating replica's value, which includes what it had seen before the remove (riak_dt's
    "reset-remove" caveat for embedded counters).
    """

    crdt_name: ClassVar[str] = "ORMap"
    entries: tuple[ORMapEntry[V], ...] = ()
    clock: dict[str, int] = Field(default_factory=dict)

    def value_type(self) -> type[V]:
        args = type(self).__pydantic_generic_metadata__["args"]
        if not args:
            raise TypeError("an ORMap needs its value type, for example ORMap[GCounter]()")
        return cast(type[V], args[0])

    def get(self, key: str) -> V:
        """The value at ``key``, or an empty one."""
        found = [e.value for e in self.entries if e.key == key]
        if not found:
            return self.value_type()()
        value = found[0]
        for other in found[1:]:
            value = value.merge(other)
        return value

    def keys(self) -> list[str]:
        return sorted({e.key for e in self.entries})

    def update(self, key: str, change: Callable[[V], V], stamp: Stamp) -> Self:
        n = self.clock.get(stamp.replica, 0) + 1
        entry = ORMapEntry[Any](
            key=key, replica=stamp.replica, counter=n, value=change(self.get(key))
        )
        kept = tuple(e for e in self.entries if e.key != key)
        return self.model_copy(
            update={
                "entries": _sorted_map((*kept, entry)),
                "clock": {**self.clock, stamp.replica: n},
            }
        )

    def remove(self, key: str) -> Self:
        return self.model_copy(update={"entries": tuple(e for e in self.entries if e.key != key)})

    def merge(self, other: Self) -> Self:
        self._check_same(other)
        mine = {(e.key, e.replica, e.counter): e for e in self.entries}
        theirs = {(e.key, e.replica, e.counter): e for e in other.entries}
        keep: list[ORMapEntry[V]] = []
        for dot, e in mine.items():
            if dot in theirs:
                t = theirs[dot]
                keep.append(e if canonical_json(e) >= canonical_json(t) else t)
            elif not _covered((dot[1], dot[2]), other.clock):
                keep.append(e)
        for dot, e in theirs.items():
            if dot not in mine and not _covered((dot[1], dot[2]), self.clock):
                keep.append(e)
        return self.model_copy(
            update={"entries": _sorted_map(keep), "clock": _max_map(self.clock, other.clock)}
        )

    def max_lamport(self) -> int:
        return max((e.value.max_lamport() for e in self.entries), default=0)


def _sorted_map(entries: Iterable[ORMapEntry[V]]) -> tuple[ORMapEntry[V], ...]:
    return tuple(sorted(entries, key=lambda e: (e.key, e.replica, e.counter)))


class LogEntry(BaseModel, Generic[T]):
    """One entry of a :class:`Log`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    lamport: int
    replica: str
    seq: int
    payload: T


class Log(CRDT, Generic[T]):
    """An append-only log; merge is the union of entries, read in causal order.

    Example:
        >>> a = Log[str]().append("E1", Stamp("r/1", 1))
        >>> b = Log[str]().append("E2", Stamp("r/2", 2))
        >>> a.merge(b).items == b.merge(a).items == ("E1", "E2")
        True
    """

    crdt_name: ClassVar[str] = "Log"
    entries: tuple[LogEntry[T], ...] = ()

    @property
    def items(self) -> tuple[T, ...]:
        return tuple(e.payload for e in self.entries)

    @property
    def value(self) -> tuple[T, ...]:
        return self.items

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, payload: T, stamp: Stamp) -> Self:
        seq = 1 + max((e.seq for e in self.entries if e.replica == stamp.replica), default=0)
        entry = LogEntry[Any](
            lamport=stamp.lamport, replica=stamp.replica, seq=seq, payload=payload
        )
        return self.model_copy(update={"entries": _sorted_log((*self.entries, entry))})

    def merge(self, other: Self) -> Self:
        self._check_same(other)
        if not other.entries:
            return self
        return self.model_copy(update={"entries": _sorted_log((*self.entries, *other.entries))})

    def max_lamport(self) -> int:
        return max((e.lamport for e in self.entries), default=0)


def _sorted_log(entries: Iterable[LogEntry[T]]) -> tuple[LogEntry[T], ...]:
    by_id: dict[tuple[str, int], LogEntry[T]] = {}
    for e in entries:
        key = (e.replica, e.seq)
        old = by_id.get(key)
        # the same (replica, seq) twice is a misuse; keep the greater so merge stays commutative
        if old is None or canonical_json(e) > canonical_json(old):
            by_id[key] = e
    return tuple(sorted(by_id.values(), key=lambda e: (e.lamport, e.replica, e.seq)))
