"""What the Coder's ``propose`` work needs apart from effects: the functions a failure is about,
shown with their line numbers, and a model's answer read as a change to them.

A small model writes code far better than it calls tools or copies text exactly: asked for the
fixed line (or lines, or the whole function) in a ```` ```python ```` block, it answers in the form
it was trained on most. Where that block goes is found here, not asked of the model: the lines of
the shown code it resembles most, its stated line number only breaking ties. Everything here is
a pure function of its arguments, so a replayed run finds the same places.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cached_property, lru_cache

__all__ = ["Change", "Focus", "focus", "read_change"]

_WORD = re.compile(r"[A-Za-z_]\w*")
_BLOCK = re.compile(r"```[ \t]*+([\w+.#-]*+)[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
"""A fenced block: its tag, its code. The fence's spaces and tag are taken whole (``*+``):
given back a character at a time, a fence line without an end cost its length squared."""
_PYTHON = frozenset({"", "python", "py", "python3", "py3", "ipython"})
"""A fenced block's language tags that mean Python (none: a model's untagged block)."""
_INLINE = re.compile(r"`([^`\n]+)`")
_LINE_NUMBER = re.compile(r"\b[Ll]ines?\s+(\d{1,9})\b")
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)")
_NEWLINE = re.compile(r"(\r\n|\r|\n)")
_SIMILAR = 0.5
"""How like the lines it replaces (0 to 1, difflib's ratio) a block must be to be placed."""
_SLACK = 1e-9
"""Below the best by more than this, a bound is surely below it (sums round differently)."""
_PAIRS = 60_000
"""The most (block line, shown line) pairs an answer's block is weighed against: a block of
k lines against a function of n has about k*n."""
_COMPARED = 150_000
"""The most characters of lines compared with difflib to place one block (a tenth of a second or so)."""


@dataclass(frozen=True)
class Focus:
    """The functions of one file that a failure is about: where each is, by line (1-based,
    inclusive), and the file's text."""

    path: str
    text: str
    spans: tuple[tuple[str, int, int], ...]

    @cached_property
    def stripped(self) -> list[str]:
        """:attr:`lines` without their indentation or trailing spaces."""
        return [line.strip() for line in self.lines]

    @cached_property
    def lines(self) -> list[str]:
        """The file's lines as Python numbers them (not ``str.splitlines``, which also splits
        at a form feed or a ``\\x1c`` in a string)."""
        return _lines(self.text)[0]

    @cached_property
    def functions(self) -> list[tuple[str, int, int, int]]:
        """The functions within the shown spans, nested ones and methods included: name,
        first line (its first decorator's), def line and last line, in the file's order."""
        try:
            tree = _parse(self.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return []
        found = [
            (name, first, node.lineno, end)
            for name, nodes in _functions(tree).items()
            for node in nodes
            for first, end in [(_first_line(node), node.end_lineno or node.lineno)]
            if any(s <= first and end <= e for _, s, e in self.spans)
        ]
        return sorted(found, key=lambda f: f[1:])

    def shown(self) -> str:
        """The functions with their line numbers, in the file's order."""
        lines = self.lines
        return "\n...\n".join(
            "\n".join(f"{n:4d}| {lines[n - 1]}" for n in range(start, end + 1))
            for _, start, end in self.spans
        )


@dataclass(frozen=True, slots=True)
class Change:
    """Lines ``start``..``end`` of ``path`` become ``new``."""

    path: str
    start: int
    end: int
    new: tuple[str, ...]

    def applied(self, text: str) -> str:
        """``text`` with the change made; every other line as it was, its line ending
        included. The new lines end as the first replaced line did (or, that being a last
        line without an ending, as the file's first line does), the last as the last did (so
        a file without a final newline still has none)."""
        lines, ends = _lines(text)
        first = ends[self.start - 1] or next((e for e in ends if e), "\n")
        last = ends[self.end - 1]
        new = [f"{line}{first}" for line in self.new[:-1]] + [f"{self.new[-1]}{last}"]
        kept = [f"{line}{end}" for line, end in zip(lines, ends, strict=True)]
        return "".join([*kept[: self.start - 1], *new, *kept[self.end :]])

    def said(self, text: str) -> str:
        """The change in a line the model can read: what the lines were and what they became."""
        old = _lines(text)[0][self.start - 1 : self.end]
        where = f"line {self.start}" if self.start == self.end else f"lines {self.start}-{self.end}"
        if len(old) == 1 and len(self.new) == 1:
            return f"{where} `{old[0].strip()}` changed to `{self.new[0].strip()}`"
        return f"{where} of {self.path} rewritten ({len(self.new)} lines)"


def _functions(tree: ast.AST) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The functions defined in ``tree``, by name, in the file's order: found through the
    statements only (a def is a statement), not every node of every expression."""
    found: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.setdefault(node.name, []).append(node)
        for field in ("cases", "handlers", "finalbody", "orelse", "body"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                stack += reversed(children)
    return found


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _called(node: ast.AST) -> Iterable[str]:
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            if isinstance(call.func, ast.Name):
                yield call.func.id
            elif isinstance(call.func, ast.Attribute):
                yield call.func.attr


def focus(path: str, text: str, words: str, room: int) -> Focus | None:
    """The functions of ``text`` that ``words`` (a task and a failure's output) name, or whose
    names are made of words it holds, then the functions of the same file they call, breadth
    first, in at most ``room`` characters; None
    when the file does not parse or ``words`` names none of its functions."""
    try:
        tree = _parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # RecursionError: an expression nested too deep for the parser
    functions = _functions(tree)
    lines = _lines(text)[0]
    said = set(_WORD.findall(words))
    # the functions named, then those whose name is made of named words (``repr_list`` for a
    # task about ``repr`` of a ``list``: a method reached through ``getattr``)
    named = dict.fromkeys(w for w in _WORD.findall(words) if w in functions)
    queue = [*named] + sorted(
        n
        for n in functions
        if n not in named and "_" in n.strip("_") and set(n.strip("_").split("_")) <= said
    )
    seen: set[str] = set()
    spans: list[tuple[int, int, str]] = []  # start, end, name: disjoint, by start
    used = 0
    pending = deque(queue)
    while pending:
        name = pending.popleft()
        if name in seen:
            continue
        seen.add(name)
        for node in functions[name]:
            start = _first_line(node)
            end = node.end_lineno or node.lineno
            before = bisect_right(spans, (start, end, "\uffff")) - 1
            if before >= 0 and spans[before][0] <= start and end <= spans[before][1]:
                continue  # a function inside one already shown
            size = sum(len(line) + 7 for line in lines[start - 1 : end])
            if used + size > room:
                continue
            used += size
            # the functions shown that are inside this one (functions nest or are apart)
            low, high = (
                bisect_left(spans, (start, 0, "")),
                bisect_right(spans, (end, end, "\uffff")),
            )
            spans[low:high] = [s for s in spans[low:high] if not s[1] <= end]
            insort(spans, (start, end, name))
            pending += [c for c in _called(node) if c in functions and c not in seen]
    if not spans:
        return None
    return Focus(path, text, tuple((name, start, end) for start, end, name in spans))


def _indented(block: list[str], indent: str, anchor: int = 0) -> tuple[str, ...]:
    """``block`` moved so that its line ``anchor`` (the first, or the def line) is at
    ``indent``, the indentation of the line it replaces, its lines' indentation relative to
    one another kept, in the file's kind: tabs where ``indent`` is tabs (a level being the
    block's smallest step), else spaces (a tab in the block four). A line less indented than
    the anchor stays so (a block copied as the file has it may end less indented than it
    began, or hold a string's lines at the margin), not the least indented moved to
    ``indent``."""
    widths = [len(_indent(b).expandtabs(4)) for b in block]
    margin = min((w for w, b in zip(widths, block, strict=True) if b.strip()), default=0)
    base = widths[anchor] if block[anchor].strip() else margin
    steps = sorted({w - margin for w, b in zip(widths, block, strict=True) if b.strip()} - {0})
    step = steps[0] if steps else 4
    tabs = "\t" in indent and " " not in indent

    def moved(width: int) -> str:
        if tabs:
            return "\t" * max(0, len(indent) + width // step) + " " * (width % step)
        return indent + " " * width if width >= 0 else indent[: max(0, len(indent) + width)]

    return tuple(
        moved(w - base) + b.lstrip() if b.strip() else ""
        for w, b in zip(widths, block, strict=True)
    )


def read_change(reply: str, shown: Sequence[Focus]) -> Change | str:
    """The change a model's answer makes to the ``shown`` code, or what is wrong with the
    answer, in words for the model.

    The answer's last ```` ```python ```` block (``py``, ``python3`` or no tag alike; with none,
    its last block of another tag; with no block, its last inline code span that is a
    statement; an unclosed block runs to the answer's end) is placed on the shown lines it is most like:
    a block that starts with ``def NAME`` for a shown function replaces that function; any
    other block of k lines replaces the k shown lines nearest to it in text (at least half
    alike), the line number the answer names breaking ties. Indentation is the replaced
    lines', so a model that drops it loses nothing."""
    fenced = _BLOCK.findall(reply)
    blocks = [code for tag, code in fenced if tag.lower() in _PYTHON] or [c for _, c in fenced]
    blocks = blocks or _inline(reply)
    if not blocks:
        return "your answer held no ```python block with the fixed code"
    block = [line.rstrip() for line in _lines(blocks[-1].rstrip())[0]]
    while block and not block[0].strip():
        block.pop(0)
    if not block:
        return "the ```python block in your answer is empty"
    head = next((i for i, b in enumerate(block) if not b.lstrip().startswith(("@", "#"))), 0)
    named = _DEF.match(block[head])
    if named:
        decorated = any(b.lstrip()[:1] == "@" for b in block[:head])
        return _function(named[1], block, head, decorated, shown)
    said = [int(n) for n in _LINE_NUMBER.findall(reply.split("```", 1)[0])]
    stated = said[0] if said else None
    k = len(block)
    stripped = [b.strip() for b in block]
    windows = [
        (focus_, start)
        for focus_ in shown
        for _, first, last in focus_.spans
        for start in range(first, last - k + 2)
    ]
    if k * len(windows) > _PAIRS:
        return (
            f"the code in your answer ({k} lines) is too long to place among the lines shown; "
            "give only the lines that change, or the whole function from its def line"
        )

    def old(focus_: Focus, start: int) -> list[str]:
        return focus_.stripped[start - 1 : start - 1 + k]

    same = [s for f, s in windows if old(f, s) == stripped]
    if same and (stated is None or any(abs(s - stated) <= 2 for s in same)):
        return "the code in your answer is the same as the code shown: nothing changes"
    placed = _placed(windows, old, stripped, stated)
    if isinstance(placed, str):
        return placed
    best = placed
    if best is None or best[0] < _SIMILAR:
        return (
            "the code in your answer is not like any lines of the code shown; give the "
            "fixed line itself, as it should read in the file"
        )
    _, _, focus_, start = best
    new = _indented(block, _indent(focus_.lines[start - 1]))
    return _checked(Change(focus_.path, start, start + k - 1, new), focus_.text)


def _function(
    name: str, block: list[str], head: int, decorated: bool, shown: Sequence[Focus]
) -> Change | str:
    """``block``, a whole function ``name`` (its def on line ``head``), in place of the shown
    function of that name (a nested one or a method included) most like it, its decorators
    kept unless the block gives its own."""
    found = [(f, d) for f in shown for d in f.functions if d[0] == name]
    if not found:
        names = ", ".join(dict.fromkeys(n for f in shown for n, _, _ in f.spans))
        return (
            f"your answer defines {name}, which is not a function shown ({names}); give the "
            "fixed lines of the code shown"
        )
    mine = [b.strip() for b in block]

    def likeness(item: tuple[Focus, tuple[str, int, int, int]]) -> float:
        focus_, (_, first, _, end) = item
        return SequenceMatcher(None, focus_.stripped[first - 1 : end], mine).ratio()

    focus_, (_, first, line, end) = max(found, key=likeness) if len(found) > 1 else found[0]
    start = first if decorated else line
    new = _indented(block, _indent(focus_.lines[line - 1]), head)
    if list(new) == focus_.lines[start - 1 : end]:
        return f"your {name} is the same as the code shown: nothing changes"
    return _checked(Change(focus_.path, start, end, new), focus_.text)


def _placed(
    windows: list[tuple[Focus, int]],
    old: Callable[[Focus, int], list[str]],
    stripped: list[str],
    stated: int | None,
) -> tuple[float, int, Focus, int] | None | str:
    """The window most like ``stripped`` (mean difflib ratio of its lines, then nearest to
    ``stated``, then first), or None when none differs from it; a string when finding it
    would cost more than :data:`_COMPARED` characters compared.

    The winner is the one comparing every window would find: each line's ratio is at most
    its ``real_quick_ratio`` (from the two lengths), so the windows are compared in the order
    of that bound, and a window is given up as soon as its bound falls below the best found;
    they stop when no bound left can reach it."""
    k = len(stripped)
    sizes = [len(b) for b in stripped]

    def bound(was: list[str]) -> list[float]:
        return [
            2.0 * min(len(a), n) / (len(a) + n) if a or n else 1.0
            for a, n in zip(was, sizes, strict=True)
        ]

    order: list[tuple[float, int, list[str], list[float]]] = []
    for index, (focus_, start) in enumerate(windows):
        was = old(focus_, start)
        if was != stripped:
            bounds = bound(was)
            order.append((-sum(bounds) / k, index, was, bounds))
    order.sort(key=lambda o: o[:2])
    best: tuple[float, int, int] | None = None  # likeness, -distance, -index
    ratios: dict[tuple[str, str], float] = {}
    compared = 0
    for minus, index, was, bounds in order:
        if -minus < (best[0] if best else _SIMILAR) - _SLACK:
            break
        exact = 0.0
        rest = sum(bounds)
        for a, b, top in zip(was, stripped, bounds, strict=True):
            rest -= top
            ratio = ratios.get((a, b))
            if ratio is None:
                compared += len(a) + len(b)
                if compared > _COMPARED:
                    return (
                        "the code in your answer is too long to place among the lines shown; "
                        "give only the lines that change, or the whole function from its "
                        "def line"
                    )
                ratio = ratios[a, b] = SequenceMatcher(None, a, b).ratio()
            exact += ratio
            if (exact + max(rest, 0.0)) / k < (best[0] if best else _SIMILAR) - _SLACK:
                break
        else:
            start = windows[index][1]
            likeness = sum(ratios[a, b] for a, b in zip(was, stripped, strict=True)) / k
            distance = abs(start - stated) if stated is not None else 0
            if best is None or (likeness, -distance, -index) > best:
                best = (likeness, -distance, -index)
    if best is None:
        return None
    focus_, start = windows[-best[2]]
    return (best[0], best[1], focus_, start)


def _checked(change: Change, text: str) -> Change | str:
    """``change``, or why it is not worth trying: the file would not parse, or it would mean
    what it meant before (only spacing or comments differ)."""
    try:
        after = _parse(change.applied(text))
    except SyntaxError as exc:
        return f"the file would not parse with your change: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:
        return f"the file would not parse with your change: {exc}"
    except (RecursionError, MemoryError):
        return "the file would not parse with your change: it nests too deep for Python's parser"
    try:
        same = ast.dump(after) == _meaning(text)
    except RecursionError:  # a tree the parser takes but ast.dump's recursion cannot walk
        same = False  # so not known to mean the same: the tests decide
    if same:
        return f"{change.said(text)} changes only spacing or comments: the code means what it did"
    return change


@lru_cache(maxsize=8)
def _meaning(text: str) -> str:
    """``text``'s syntax tree, dumped (kept for the next answer about the same file)."""
    return ast.dump(_parse(text))


def _parse(text: str) -> ast.Module:
    """``text``'s syntax tree, as Python reads the file: a UTF-8 byte order mark at its start
    is not code (``ast.parse`` of a string calls it an invalid character)."""
    return ast.parse(text.removeprefix("\ufeff"))


def _inline(reply: str) -> list[str]:
    """The answer's last inline code span that is a Python statement of its own (``s =
    s.replace(...)``, not a bare name or value): a small model often gives its fix so, in the
    sentence that says it."""
    for span in reversed(_INLINE.findall(reply)):
        code = span.strip()
        try:  # a compound statement's head (``if x >= 0:``) stands for its line
            body = ast.parse(code + " pass" if code.endswith(":") else code).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if len(body) == 1 and not (
            isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Name | ast.Constant)
        ):
            return [code]
    return []


def _lines(text: str) -> tuple[list[str], list[str]]:
    """``text``'s lines as Python's parser counts them (split at ``\\r\\n``, ``\\r`` or
    ``\\n`` only) and the ending of each (``""`` for a last line without one)."""
    parts = _NEWLINE.split(text)
    lines, ends = parts[0::2], [*parts[1::2], ""]
    if lines[-1] == "":
        lines.pop()
        ends.pop()
    return lines, ends


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]
