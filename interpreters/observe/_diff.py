"""``opdsl diff RUN_A RUN_B``: where two runs part.

Two runs of one program (a fork and its parent, two replays of a program being edited) are
walked address by address; the first address where they asked for different effects, or got
different results, is where they part. The end states are compared field by field.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from interpreters.journal._base import Entry, RunRecord
from interpreters.journal._content import ContentError, lookup, unpack_texts

__all__ = ["RunDiff", "diff_runs"]


def _key(address: str) -> tuple[int, tuple[int, ...], str]:
    """An address's place in its run (``7.1.3`` after ``7.1``, before ``7.2``); one that is
    no address (a handed journal's ``x.y``, ``1..2``, 5,000 digits) goes last, by its text."""
    parts = address.split(".")
    if all(p.isascii() and p.isdigit() and len(p) <= 18 for p in parts):
        return (0, tuple(int(p) for p in parts), "")
    return (1, (), address)


def _pretty(text: str | None) -> str:
    if text is None:
        return "(nothing)"
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the stack
        return text


@dataclass
class RunDiff:
    """What differs between run ``a`` and run ``b``."""

    a: str
    b: str
    #: the first address where they part, and why ("effect", "result", "only in a", ...)
    address: str | None = None
    why: str | None = None
    a_entry: Entry | None = None
    b_entry: Entry | None = None
    same_before: int = 0
    #: top-level state fields whose end values differ: name -> (a's value, b's value)
    state: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def same(self) -> bool:
        return self.address is None and not self.state

    def as_json(self) -> dict[str, Any]:
        def entry(e: Entry | None) -> Any:
            if e is None:
                return None
            return {
                "kind": e.kind,
                "status": e.status,
                "effect": _data(e.effect_json),
                "result": None if e.result_json is None else _data(e.result_json),
                "error": None if e.error_json is None else _data(e.error_json),
            }

        return {
            "a": self.a,
            "b": self.b,
            "same": self.same,
            "same_effects_before": self.same_before,
            "parts_at": self.address,
            "why": self.why,
            "a_entry": entry(self.a_entry),
            "b_entry": entry(self.b_entry),
            "state": {k: {"a": va, "b": vb} for k, (va, vb) in self.state.items()},
        }

    def lines(self) -> list[str]:
        out = [f"--- {self.a}", f"+++ {self.b}"]
        if self.address is None:
            out.append(f"the same {self.same_before} effects, with the same results")
        else:
            out.append(
                f"the same up to address {self.address} ({self.same_before} effects before it)"
            )
            out.append(f"they part at address {self.address}: {self.why}")
            for name, e in (("a", self.a_entry), ("b", self.b_entry)):
                what = "(no effect here)" if e is None else f"{e.kind} ({e.status})"
                out.append(f"  {name}: {what}")
            a, b = self.a_entry, self.b_entry
            if self.why == "a different effect" and a is not None and b is not None:
                texts = (_pretty(a.effect_json), _pretty(b.effect_json))
            elif a is not None and b is not None:
                texts = (
                    _pretty(a.result_json or a.error_json),
                    _pretty(b.result_json or b.error_json),
                )
            else:
                texts = (
                    _pretty(None if a is None else a.effect_json),
                    _pretty(None if b is None else b.effect_json),
                )
            out += [
                "  " + line.rstrip("\n")
                for line in difflib.unified_diff(
                    texts[0].splitlines(), texts[1].splitlines(), self.a, self.b, lineterm="", n=2
                )
            ][2:]
        if self.state:
            out.append("the end states differ:")
            for name, (va, vb) in self.state.items():
                out.append(f"  {name}: {json.dumps(va)[:200]}  ->  {json.dumps(vb)[:200]}")
        elif self.address is not None:
            out.append("the end states are the same")
        return out


def _data(text: str) -> Any:
    """A recorded text as JSON data; one changed outside opdsl (not JSON, or nested deeper
    than the stack) as the text it is."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _fields(state_json: str | None) -> dict[str, Any]:
    if not state_json:
        return {}
    try:
        data = json.loads(state_json)
    except (ValueError, RecursionError):  # changed outside opdsl: shown as it is
        return {"state": state_json[:200]}
    return data if isinstance(data, dict) else {"state": data}


def diff_runs(
    a: RunRecord,
    a_entries: Sequence[Entry],
    b: RunRecord,
    b_entries: Sequence[Entry],
    content: Callable[[Iterable[str]], Mapping[str, str]] | None = None,
) -> RunDiff:
    """Compare two runs, effect by effect and then their end states. ``content``: the
    journal's pieces, to show the entries where the runs part whole (``journal._content``)."""
    out = RunDiff(a.run_id, b.run_id)
    left = {e.address: e for e in a_entries}
    right = {e.address: e for e in b_entries}
    for address in sorted(left.keys() | right.keys(), key=_key):
        x, y = left.get(address), right.get(address)
        why = None
        if x is None or y is None:
            why = f"only {a.run_id if y is None else b.run_id} has an effect here"
        elif x.effect_json != y.effect_json:
            why = "a different effect"
        elif (x.status, x.result_json, x.error_json) != (y.status, y.result_json, y.error_json):
            why = "the same effect, a different result"
        if why is not None:
            if content is not None:
                x, y = _whole(x, content), _whole(y, content)
            out.address, out.why, out.a_entry, out.b_entry = address, why, x, y
            break
        out.same_before += 1
    fa, fb = _fields(a.final_state_json), _fields(b.final_state_json)
    for name in sorted(fa.keys() | fb.keys()):
        if fa.get(name) != fb.get(name):
            out.state[name] = (fa.get(name), fb.get(name))
    return out


def _whole(e: Entry | None, content: Callable[[Iterable[str]], Mapping[str, str]]) -> Entry | None:
    """``e`` with its effect and result unpacked (as shown where two runs part)."""
    if e is None:
        return None
    try:
        effect, result = unpack_texts(e.kind, e.effect_json, e.result_json, lookup({}, content))
    except (ContentError, ValueError):
        return e
    return e.replace(effect_json=effect, result_json=result)
