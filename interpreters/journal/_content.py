"""Content stored once: the journal's pieces, and the packed form of entries that refer to them.

An agent's conversation grows by a message or two a turn, and every ``infer`` carries all of
it. Journaled whole, the record grows with the square of the conversation. Packed, each piece
of content is written once, in the journal's content table under the SHA-256 of its text, and
every entry that holds it refers to it:

- an ``infer``'s ``messages`` become a chain: node ``k`` is the text ``[PREV, MESSAGE]`` (PREV
  the hash of node ``k - 1``, or ``null``), and the entry keeps the last node's hash and the
  count, ``{"$chain": HEAD, "n": N}``; the next ``infer`` of the same conversation adds only its
  new nodes;
- a long string where the value types hold text (a message's ``content``, a tool result's
  ``output``, a response's ``text``) becomes ``{"$ref": HASH}``, its text stored as a JSON
  string; a long object where they hold arguments (a tool call's ``arguments``, a ``tool``
  effect's ``args``) becomes the string ``HASH``, its text stored as a JSON object.

Each rule replaces a value by one of another JSON type than the value can have there, so a
packed text is never mistaken for a whole one, and an entry written whole (by an opdsl before
this format, or because it is short) reads as it always did. Packing is a function of the
whole canonical text: the same effect packs to the same bytes in every process, and two
packed texts are equal exactly when the whole texts are (up to SHA-256), so replay compares
packed texts and unpacks only to show a divergence.

Secrets are replaced in every piece before it is hashed, so what the journal holds under a
hash is what the hash says; a packed text is written with a mark in each place a reference
goes, cleaned, and the references are put in after, so no secret can change a hash.

Nothing here does I/O: a journal stores the pieces; :class:`Packer` (one per run) makes them,
and keeps each conversation's chain so that an ``infer`` costs what it adds.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import is_
from types import MappingProxyType
from typing import Any, Final, NamedTuple, final

from op import Infer, Message, Response, Tool, ToolResult
from state import canonical_json, dump_jsonable, to_jsonable

__all__ = [
    "COMPRESS_MIN",
    "DICTIONARY",
    "PIECE_MIN",
    "SHORT_MIN",
    "ContentError",
    "Packed",
    "Packer",
    "digest",
    "is_digest",
    "kept_body",
    "piece_key",
    "stored_body",
    "new_messages",
    "piece_refs",
    "refs_of",
    "unpack_effect",
    "unpack_message",
    "unpack_result",
]

PIECE_MIN: Final = 256
"""The shortest text (in canonical JSON characters) stored as a piece of its own: shorter
values are cheaper inline than their reference. Part of the format: packing must give the same
bytes in every version, or replays of older journals would compare unequal (they still pass:
an unequal packed text is compared whole before it is called a divergence)."""

_HEX = re.compile(r"[0-9a-f]{64}")
_STR = json.encoder.encode_basestring
_MARK = "\x01"  # canonical JSON never holds a raw control character: a reference goes here
# the value standing for a mark until the text is written (a program's string equal to it is
# refused, never mistaken for a reference: the marks would not match the references' count)
_MARK_VALUE = _MARK + "opdsl:reference" + "\x02"


class ContentError(ValueError):
    """A packed text refers to a piece that is missing, or whose text is not what it says."""


COMPRESS_MIN: Final = 512
"""A text this long or longer is kept compressed with zlib's whole window (as git keeps its
objects) when that makes it smaller: tool results, files and long answers."""

SHORT_MIN: Final = 160
"""A text this long or longer (and shorter than :data:`COMPRESS_MIN`) is kept compressed with
:data:`DICTIONARY` when that makes it smaller: an entry's result, a chain node. A shorter one
(a usage, a short message's node) is kept as it is: compressing it costs more time, a few
microseconds on every model call, than the tens of bytes it saves are worth. A reader takes
either (bytes always mean compressed), so the threshold is not part of the format."""

DICTIONARY: Final = (
    b'{"error":{"message":"","type":""},"ok":false,"output":null}'
    b'{"args":{},"kind":"tool","name":"'
    b'{"kind":"agent","backend":"","prompt":"'
    b'"stop_reason":"tool_use","text":"'
    b'{"content":"","role":"user","tool_call_id":null,"tool_calls":[]}'
    b'{"content":"","role":"system","tool_call_id":null,"tool_calls":[]}'
    b'{"kind":"infer","messages":{"$chain":"'
    b'","n":'
    b'},"model":null,"output":null,"params":{},"tools":["'
    b'{"cached_tokens":0,"cost_usd":null,"input_tokens":0,"output_tokens":0}'
    b'{"model":"","stop_reason":"end_turn","text":"","tool_calls":[{"arguments":{'
    b'},"id":"call_'
    b'","name":"'
    b'"}],"usage":{"cached_tokens":0,"cost_usd":null,"input_tokens":0,"output_tokens":0}}'
    b'{"content":"","role":"assistant","tool_call_id":null,"tool_calls":[{"arguments":{"'
    b'{"content":{"$ref":"'
    b'"},"role":"tool","tool_call_id":"call_'
    b'","tool_calls":[]}]'
    b'{"error":null,"ok":true,"output":{"$ref":"'
    b'"}}'
)
"""What opdsl's short texts are made of (the keys and common values of its effects, results
and messages), zlib's preset dictionary for them. Part of the format: a stream made with it
names it by its Adler-32, and a reader that lacks it refuses the stream, never misreads it."""

_COMPRESSED_MAX: Final = 64 * 2**20
"""The longest text kept compressed (a longer one is kept as text): a compressed text that
would unpack to more is refused unread (a handed file's compression bomb)."""


_SHORT_ZLIB = zlib.compressobj(6, zlib.DEFLATED, 10, 2, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
"""The short texts' compressor, :data:`DICTIONARY` set and nothing written: each short text is
compressed by a copy of it, which writes the bytes a new one would (setting the dictionary
costs more than the copy, and every entry has a few short texts)."""


def stored_body(body: str) -> str | bytes:
    """A text (a piece, an entry's effect or result) as a journal keeps it: itself, or (long
    enough, and smaller so) its UTF-8 compressed with zlib, short texts with
    :data:`DICTIONARY`; bytes always mean compressed. :func:`kept_body` undoes it."""
    size = len(body)
    if size < SHORT_MIN or size > _COMPRESSED_MAX:
        return body
    raw = body.encode("utf-8", "surrogatepass")
    if size < COMPRESS_MIN:  # a 1 KB window: quick to set up, and the dictionary fits
        short = _SHORT_ZLIB.copy()
        packed = short.compress(raw) + short.flush()
    else:
        packed = zlib.compress(raw, 6)
    return packed if len(packed) < len(raw) else body


def kept_body(kept: object, what: str) -> str:
    """The text as a journal kept it (:func:`stored_body`); ContentError naming ``what`` (``piece
    HASH``, ``its effect``) for anything else, a compressed text that is corrupt, cut short, not
    UTF-8 or one that unpacks to more than any text is kept compressed."""
    if isinstance(kept, str):
        return kept
    if not isinstance(kept, bytes):
        raise ContentError(f"{what} is a {type(kept).__name__}, not a text")
    unpack = zlib.decompressobj(zdict=DICTIONARY)
    try:
        raw = unpack.decompress(kept, _COMPRESSED_MAX + 1)
    except zlib.error as exc:
        raise ContentError(f"{what} is not a compressed text: {exc}") from None
    if len(raw) > _COMPRESSED_MAX or unpack.unconsumed_tail:
        raise ContentError(
            f"{what} unpacks to more than {_COMPRESSED_MAX // 2**20} MiB, more than "
            "any text is kept compressed"
        )
    if not unpack.eof:
        raise ContentError(f"{what} is a compressed text that was cut short")
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ContentError(f"{what} does not unpack to UTF-8 text: {exc}") from None


def piece_key(name: str) -> bytes:
    """A piece's name as a journal keys it: its 32 bytes, not 64 hex characters (``name`` is
    a digest: see :func:`is_digest`)."""
    return bytes.fromhex(name)


def digest(body: str) -> str:
    """The SHA-256 of a piece's text, in hex: its name in the content table."""
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def is_digest(value: object) -> bool:
    return isinstance(value, str) and _HEX.fullmatch(value) is not None


_NO_PIECES: Mapping[str, str] = MappingProxyType({})


class Packed(NamedTuple):
    """A text as journaled and the pieces it needs that may not be stored yet (a tuple: one
    is made for every journaled effect and result)."""

    text: str
    pieces: Mapping[str, str] = _NO_PIECES


class _Writer:
    """Builds one packed text: values with marks where references go, then cleaned, then the
    references put in (see the module docstring)."""

    __slots__ = ("clean", "pieces", "refs")

    def __init__(self, clean: Callable[[str], str], pieces: dict[str, str]) -> None:
        self.clean = clean
        self.pieces = pieces
        self.refs: list[str] = []

    def piece(self, body_text: str) -> str:
        body = self.clean(body_text)
        h = digest(body)
        self.pieces[h] = body
        return h

    def ref(self, value_text: str) -> str:
        """A mark standing for ``value_text`` (a reference, written after cleaning)."""
        self.refs.append(value_text)
        return _MARK_VALUE

    def text(self, data: Any) -> str:
        """``data`` (holding marks) as packed text: cleaned, then the references put in."""
        return self.written(dump_jsonable(data))

    def written(self, dumped: str) -> str:
        """:meth:`text` of data already written as canonical JSON (``dumped``)."""
        return _filled(self.clean, dumped, self.refs)


_MARK_JSON = json.dumps(_MARK_VALUE)  # how dump_jsonable writes a mark's value


def _filled(clean: Callable[[str], str], dumped: str, refs: Sequence[str]) -> str:
    """``dumped`` (canonical JSON holding a mark for each of ``refs``) cleaned, then the
    references put in; the commonest ``infer`` and a short message's chain node (one of each
    a call) are filled without a :class:`_Writer`."""
    cleaned = clean(dumped.replace(_MARK_JSON, _MARK))
    if not refs:
        return cleaned
    parts = cleaned.split(_MARK)
    if len(parts) != len(refs) + 1:
        raise ContentError(
            f"a value holds the text {_MARK_VALUE!r}, which the journal keeps for itself"
        )
    if len(refs) == 1:
        return parts[0] + refs[0] + parts[1]
    out = [parts[0]]
    for ref, part in zip(refs, parts[1:], strict=True):
        out += (ref, part)
    return "".join(out)


def _text_value(w: _Writer, text: str) -> Any:
    """A string field: itself, or a mark for ``{"$ref": HASH}`` when it is long."""
    if len(text) < PIECE_MIN - 2:
        return text
    body = _STR(text)
    return w.ref('{"$ref":"' + w.piece(body) + '"}')


def _object_value(w: _Writer, data: Any) -> Any:
    """An object field: itself, or a mark for the string ``HASH`` when its text is long."""
    if not data:
        return data
    body = dump_jsonable(data)
    if len(body) < PIECE_MIN:
        return data
    return w.ref('"' + w.piece(body) + '"')


def _pack_calls(w: _Writer, calls: list[Any]) -> None:
    for call in calls:
        if isinstance(call, dict) and isinstance(call.get("arguments"), dict):
            call["arguments"] = _object_value(w, call["arguments"])


@final
class _Conversation:
    """One conversation's chain as far as it has been packed: the messages (the very objects
    the program passed) and the hash after each."""

    __slots__ = ("extended", "heads", "messages")

    def __init__(self) -> None:
        self.messages: tuple[Message, ...] = ()
        self.heads: list[str | None] = [None]
        #: whether a later call went on from it (one that never did is a one-off's)
        self.extended = False


@final
class Packer:
    """Packs one run's effects and results (see the module docstring).

    ``clean`` replaces secrets (the run's redactor). ``keep``: pieces made are kept until a
    journal takes them with :meth:`take` (a run with no journal keeps none).

    Example:
        >>> from op import Infer, Message
        >>> p = Packer(keep=True)
        >>> first = p.effect(Infer(messages=(Message.user("hi"),)))
        >>> first.text[:38], len(first.pieces)
        ('{"kind":"infer","messages":{"$chain":"', 1)
        >>> second = p.effect(Infer(messages=(Message.user("hi"), Message.user("and you?"))))
        >>> len(second.pieces), len(p.take())
        (1, 2)
    """

    __slots__ = ("_clean", "_conversations", "earlier", "keep", "made")

    # a text this short holds no piece, whatever it is (the hot path asks before anything)
    SHORT: Final = PIECE_MIN

    _RECENT: Final = 8  # conversations kept: a program may interleave a few (roles, branches)
    # of them, those no call has gone on from yet: a program asking one-off questions (a map
    # over items) would otherwise keep its last eight prompts, a few objects each, alive in
    # every run at once, for Python's collector to walk again and again
    _ONE_OFFS: Final = 2

    def __init__(self, clean: Callable[[str], str] | None = None, *, keep: bool = True) -> None:
        self._clean: Callable[[str], str] = clean if clean is not None else _same
        self.keep = keep
        #: the pieces made that :meth:`take` has not taken yet
        self.made: dict[str, str] = {}
        self._conversations: list[_Conversation] = []
        #: how many of the last packed ``infer``'s messages its conversation had before
        self.earlier = 0

    def take(self) -> Mapping[str, str]:
        """The pieces made since the last call (a journal stores them before the entry)."""
        if not self.made:
            return _NO_PIECES
        kept, self.made = self.made, {}
        return kept

    def pending(self, h: str) -> str | None:
        """A piece made and not yet taken, or None."""
        return self.made.get(h)

    def _made(self, pieces: dict[str, str]) -> Mapping[str, str]:
        if not pieces:
            return _NO_PIECES
        if self.keep:
            self.made.update(pieces)
        return pieces

    # -- effects ------------------------------------------------------------------------------

    def effect(self, effect: Any, whole: str | None = None) -> Packed:
        """The packed text of ``effect`` (``whole``: its canonical text, when known)."""
        if type(effect) is Infer:
            return self._infer(effect)
        if type(effect) is Tool and effect.args:
            text = whole if whole is not None else canonical_json(effect)
            if len(text) < PIECE_MIN:
                return Packed(self._clean(text))
            pieces: dict[str, str] = {}
            w = _Writer(self._clean, pieces)
            data = to_jsonable(effect)
            data["args"] = _object_value(w, data["args"])
            return Packed(w.text(data), self._made(pieces))
        text = whole if whole is not None else canonical_json(effect)
        return Packed(self._clean(text))

    def _infer(self, effect: Infer) -> Packed:
        pieces: dict[str, str] = {}
        head, n = self._chain(effect.messages, pieces)
        model, params, tools = effect.model, effect.params, effect.tools
        if (
            effect.output is None
            and type(params) is dict
            and not params
            and tools == ()
            and (model is None or type(model) is str)
        ):
            # the commonest infer (no tools, params or output), written as text: the bytes
            # the dict below is written as
            ref = '{"$chain":' + ("null" if head is None else f'"{head}"') + f',"n":{n}}}'
            shown = "null" if model is None else _STR(model)
            dumped = '{"kind":"infer","messages":' + _MARK_JSON + ',"model":' + shown
            text = _filled(self._clean, dumped + ',"params":{},"tools":[]}', (ref,))
            return Packed(text, self._made(pieces))
        data = to_jsonable(
            {"kind": "infer", "model": effect.model, "params": effect.params, "tools": effect.tools}
        )
        if effect.output is not None:  # left out while None, as in the canonical form
            data["output"] = to_jsonable(effect.output)
        w = _Writer(self._clean, pieces)
        data["messages"] = w.ref(
            '{"$chain":' + ("null" if head is None else f'"{head}"') + f',"n":{n}}}'
        )
        return Packed(w.text(data), self._made(pieces))

    def _chain(
        self, messages: tuple[Message, ...], pieces: dict[str, str]
    ) -> tuple[str | None, int]:
        """The head of ``messages``' chain, adding the nodes not made before to ``pieces``."""
        conv, start = self._longest(messages)
        self.earlier = start
        heads = conv.heads
        del heads[start + 1 :]
        head = heads[start]
        clean = self._clean
        for message in messages[start:]:
            ref = "null" if head is None else f'"{head}"'
            short = _short_message(message)
            if short is not None:  # written as text: the bytes the node below is written as
                body = clean(_filled(clean, "[" + _MARK_JSON + "," + short + "]", (ref,)))
                head = digest(body)
                pieces[head] = body  # what _Writer.piece does
            else:
                w = _Writer(clean, pieces)
                prev = w.ref(ref)
                head = w.piece(w.text([prev, _packed_message(w, message)]))
            heads.append(head)
        conv.messages = messages
        return head, len(messages)

    def _longest(self, messages: tuple[Message, ...]) -> tuple[_Conversation, int]:
        """The known conversation ``messages`` extends furthest, and how far (moved to the
        front); a new one when none shares its first message."""
        best: _Conversation | None = None
        best_n = 0
        first = messages[0].content if messages else None
        for conv in self._conversations:
            known = conv.messages
            n = len(known)
            if n <= best_n:
                continue
            if (
                len(messages) >= n
                and messages[n - 1] is known[n - 1]
                and all(map(is_, messages, known))
            ):
                best, best_n = conv, n  # the common case: the very same history, grown
                continue
            if known[0].content != first:
                continue  # not even its first message is this one's (a new conversation)
            k = _common(known, messages)
            if k > best_n:
                best, best_n = conv, k
        convs = self._conversations
        if best is None:
            best = _Conversation()
            convs.insert(0, best)
            # one more one-off: the oldest past the cap goes (newest first; there was none
            # past it before, as each new one is followed by this)
            kept = 0
            for i, conv in enumerate(convs):
                if not conv.extended:
                    kept += 1
                    if kept > self._ONE_OFFS:
                        del convs[i]
                        break
        else:
            convs.remove(best)
            best.extended = True
            convs.insert(0, best)
        del convs[self._RECENT :]
        return best, best_n

    # -- results ------------------------------------------------------------------------------

    def result(self, value: Any, whole: str) -> Packed:
        """The packed text of a result whose canonical text is ``whole``."""
        if len(whole) < PIECE_MIN or type(value) not in (ToolResult, Response):
            return Packed(self._clean(whole))
        pieces: dict[str, str] = {}
        w = _Writer(self._clean, pieces)
        data = json.loads(whole)
        if type(value) is ToolResult:
            data["output"] = _text_value(w, data["output"])
        else:
            data["text"] = _text_value(w, data["text"])
            _pack_calls(w, data["tool_calls"])
        return Packed(w.text(data), self._made(pieces))


def _same(text: str) -> str:
    return text


def _common(a: Sequence[Message], b: Sequence[Message]) -> int:
    """How many messages ``a`` and ``b`` begin with alike. Two messages whose texts differ
    are told apart by their texts (pydantic's ``==`` costs a few microseconds, and an
    ``infer`` that starts a conversation is compared with every one kept)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x is not y and (x.content != y.content or not _alike(x, y)):
            break
        n += 1
    return n


def _alike(x: Message, y: Message) -> bool:
    """Whether two messages are journaled alike: ``==``, and their tool calls' arguments
    written the same (``==`` takes ``1``, ``1.0`` and ``True`` for one value, which the
    journal writes apart: a chain node of one would stand for the other)."""
    if x != y:
        return False
    return all(
        canonical_json(c.arguments) == canonical_json(d.arguments)
        for c, d in zip(x.tool_calls, y.tool_calls, strict=True)
    )


_MESSAGE_FIELDS = tuple(Message.model_fields) == (
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "is_error",
)
"""Whether a message has the fields :func:`_short_message` writes (a field added sends every
message to the generic walk)."""


def _short_message(message: Message) -> str | None:
    """The canonical text of a message that holds no piece (a short text, no tool calls, an
    ``is_error`` its text implies), written field by field; None for any other."""
    if not _MESSAGE_FIELDS or type(message) is not Message or message.tool_calls:
        return None
    # as objects: a value made without validation is the walk's to judge
    content: object = message.content
    role: object = message.role
    call_id: object = message.tool_call_id
    if type(content) is not str or len(content) >= PIECE_MIN - 2 or type(role) is not str:
        return None
    # is_error is left out while it is what the text says (Message.__canonical_implied__)
    if message.is_error is not (role == "tool" and content.startswith("error: ")):
        return None
    if call_id is None:
        shown = "null"
    elif type(call_id) is str:
        shown = _STR(call_id)
    else:
        return None
    return (
        '{"content":'
        + _STR(content)
        + ',"role":'
        + _STR(role)
        + ',"tool_call_id":'
        + shown
        + ',"tool_calls":[]}'
    )


def _packed_message(w: _Writer, message: Message) -> Any:
    data = to_jsonable(message)
    data["content"] = _text_value(w, data["content"])
    _pack_calls(w, data["tool_calls"])
    return data


# -- reading packed texts back ----------------------------------------------------------------

Lookup = Callable[[str], str]
"""A piece's text by its hash (raises :class:`ContentError` when it has none)."""


def _piece(get: Lookup, h: Any, where: str) -> Any:
    if not is_digest(h):
        raise ContentError(f"{where}: {str(h)[:70]!r} is not a reference to a piece")
    body = get(h)
    return read_json(body, f"{where}: its piece")


def _text_of(get: Lookup, value: Any, where: str) -> Any:
    if isinstance(value, dict):
        text = _piece(get, value.get("$ref"), where)
        if not isinstance(text, str):
            raise ContentError(f"{where}: piece {value.get('$ref')} is not a string")
        return text
    return value


def _object_of(get: Lookup, value: Any, where: str) -> Any:
    if isinstance(value, str):
        data = _piece(get, value, where)
        if not isinstance(data, dict):
            raise ContentError(f"{where}: piece {value} is not an object")
        return data
    return value


def _calls(get: Lookup, calls: Any, where: str) -> None:
    if isinstance(calls, list):
        for i, call in enumerate(calls):
            if isinstance(call, dict) and "arguments" in call:
                call["arguments"] = _object_of(get, call["arguments"], f"{where}[{i}].arguments")


def unpack_message(get: Lookup, data: Any, where: str) -> Any:
    """A chain node's message (its JSON value) with its pieces put back (``where``: for
    errors)."""
    if isinstance(data, dict):
        if "content" in data:
            data["content"] = _text_of(get, data["content"], f"{where}.content")
        _calls(get, data.get("tool_calls"), f"{where}.tool_calls")
    return data


def chain_nodes(
    get: Lookup, head: str | None, stop: Callable[[str], bool] | None = None
) -> Iterator[tuple[str, Any]]:
    """The nodes of a chain from ``head`` back to its first (or to one ``stop`` accepts, left
    out), as (hash, packed message)."""
    seen: set[str] = set()
    h: Any = head
    while h is not None:
        if stop is not None and stop(h):
            return
        if h in seen:
            raise ContentError(f"the chain at {h} loops")
        seen.add(h)
        node = _piece(get, h, "a message chain")
        if not (isinstance(node, list) and len(node) == 2):
            raise ContentError(f"piece {h} is not a node of a message chain")
        yield h, node[1]
        h = node[0]


def _messages(get: Lookup, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        return value
    head, n = value.get("$chain"), value.get("n")
    if head is not None and not is_digest(head):
        raise ContentError(f"{where}: {str(head)[:70]!r} is not a reference to a chain")
    nodes = [m for _, m in chain_nodes(get, head)]
    if len(nodes) != n:
        raise ContentError(f"{where}: the chain holds {len(nodes)} messages, not {n}")
    nodes.reverse()
    return [unpack_message(get, m, f"{where}[{i}]") for i, m in enumerate(nodes)]


def unpack_effect(text: str, get: Lookup) -> str:
    """The whole canonical text of a journaled effect (a text written whole is returned as
    it is)."""
    if '"$chain"' not in text and '"args":"' not in text:
        return text  # written whole
    data = read_json(text, "its effect")
    if not isinstance(data, dict):
        return text
    kind = data.get("kind")
    if kind == Infer.kind and isinstance(data.get("messages"), dict):
        data["messages"] = _messages(get, data["messages"], "messages")
    elif kind == Tool.kind and isinstance(data.get("args"), str):
        data["args"] = _object_of(get, data["args"], "args")
    else:
        return text
    return dump_jsonable(data)


def unpack_texts(
    kind: str, effect_text: str, result_text: str | None, get: Lookup
) -> tuple[str, str | None]:
    """An entry's effect and result texts, whole (what ``Journal.whole`` and ``diff`` show)."""
    return unpack_effect(effect_text, get), unpack_result(kind, result_text, get)


def unpack_result(kind: str, text: str | None, get: Lookup) -> str | None:
    """The whole canonical text of a journaled result."""
    if text is None or len(text) < 40 or '"$ref"' not in text and not _HEX.search(text):
        return text
    data = read_json(text, "its result")
    if not isinstance(data, dict):
        return text
    if kind == Tool.kind:
        data["output"] = _text_of(get, data.get("output"), "output")
    elif kind == Infer.kind:
        data["text"] = _text_of(get, data.get("text"), "text")
        _calls(get, data.get("tool_calls"), "tool_calls")
    else:
        return text
    return dump_jsonable(data)


def refs_of(kind: str, effect_text: str, result_text: str | None) -> set[str]:
    """The pieces an entry refers to directly (a chain by its head only): only references
    where a packed text puts them, never a string that merely looks like a hash."""
    out: set[str] = set()
    if kind == Infer.kind and '"$chain"' in effect_text:
        chain = _loaded(effect_text).get("messages")
        if isinstance(chain, dict) and is_digest(chain.get("$chain")):
            out.add(chain["$chain"])
    elif kind == Tool.kind and '"args":"' in effect_text:
        _ref_in(_loaded(effect_text).get("args"), str, out)
    if result_text and len(result_text) >= 40:
        if kind == Tool.kind and '"$ref"' in result_text:
            _ref_in(_loaded(result_text).get("output"), dict, out)
        elif kind == Infer.kind:
            data = _loaded(result_text)
            _ref_in(data.get("text"), dict, out)
            _calls_refs(data.get("tool_calls"), out)
    return out


def piece_refs(body: str) -> set[str]:
    """The pieces a piece refers to: a chain node's previous node and its message's pieces
    (a text or an object piece refers to none)."""
    out: set[str] = set()
    if not body.startswith("["):
        return out
    node = read_json(body, "a piece")
    if isinstance(node, list) and len(node) == 2:
        if is_digest(node[0]):
            out.add(node[0])
        message = node[1]
        if isinstance(message, dict):
            _ref_in(message.get("content"), dict, out)
            _calls_refs(message.get("tool_calls"), out)
    return out


def _loaded(text: str) -> dict[str, Any]:
    data = read_json(text, "a recorded text")
    return data if isinstance(data, dict) else {}


def _ref_in(value: Any, shape: type, out: set[str]) -> None:
    """The reference ``value`` is, if it has the shape one takes there."""
    ref = value.get("$ref") if shape is dict and isinstance(value, dict) else value
    if (shape is str or ref is not value) and isinstance(ref, str) and is_digest(ref):
        out.add(ref)


def _calls_refs(calls: Any, out: set[str]) -> None:
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, dict):
                _ref_in(call.get("arguments"), str, out)


def new_messages(get: Lookup, effect_text: str, seen: set[str]) -> tuple[list[Any], int] | None:
    """An ``infer`` entry's messages not in a chain seen before (``seen``: node hashes, grown
    here), oldest first, whole, and the conversation's length; None for an effect written
    whole. What a reader shows of a long conversation: each message once."""
    if '"$chain"' not in effect_text:
        return None
    data = read_json(effect_text, "its effect")
    value = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(value, dict):
        return None
    head = value.get("$chain")
    n = value.get("n")
    fresh = list(chain_nodes(get, head if is_digest(head) else None, seen.__contains__))
    seen.update(h for h, _ in fresh)
    fresh.reverse()
    return [unpack_message(get, m, "messages") for _, m in fresh], n if isinstance(n, int) else 0


def lookup(
    pieces: Mapping[str, str], more: Callable[[Iterable[str]], Mapping[str, str]] | None = None
) -> Lookup:
    """A :data:`Lookup` over ``pieces`` (and ``more``, asked for what they lack)."""

    def get(h: str) -> str:
        body = pieces.get(h)
        if body is None and more is not None:
            body = more((h,)).get(h)
        if body is None:
            raise ContentError(f"piece {h} is missing from the journal")
        return body

    return get


@final
class Reader:
    """Reads one run's entries back for people and tools (show, report, tail, traces): each
    ``infer`` with the messages its conversation did not have before (``earlier`` counts the
    others), so reading a run costs what it holds, not the square of its conversation.

    ``content``: the journal's pieces by hash (``Journal.content``).
    """

    __slots__ = ("_get", "_seen")

    def __init__(self, content: Callable[[Iterable[str]], Mapping[str, str]]) -> None:
        cache: dict[str, str] = {}

        def more(hashes: Iterable[str]) -> Mapping[str, str]:
            found = content(hashes)
            cache.update(found)
            return found

        self._get = lookup(cache, more)
        self._seen: set[str] = set()

    def effect(self, kind: str, text: str) -> Any:
        """An entry's effect as JSON data (an ``infer``'s messages: the new ones)."""
        if kind == Infer.kind:
            fresh = new_messages(self._get, text, self._seen)
            if fresh is not None:
                data = read_json(text, "its effect")
                messages, n = fresh
                data["messages"] = messages
                if n > len(messages):
                    data["earlier"] = n - len(messages)
                return data
        return read_json(unpack_effect(text, self._get), "its effect")

    def effect_text(self, kind: str, text: str) -> str:
        """:meth:`effect` as canonical JSON text."""
        if kind == Infer.kind or len(text) >= 40:
            return dump_jsonable(self.effect(kind, text))
        return text

    def result(self, kind: str, text: str | None) -> Any:
        """An entry's result as JSON data, whole (None when it has none)."""
        whole = unpack_result(kind, text, self._get)
        return None if whole is None else read_json(whole, "its result")

    def result_text(self, kind: str, text: str | None) -> str | None:
        """An entry's result as its whole canonical text."""
        return unpack_result(kind, text, self._get)


def read_json(text: str, what: str) -> Any:
    """``text`` read as JSON; ContentError naming ``what`` (``its effect``) when a file changed
    outside opdsl holds something else, or JSON nested deeper than Python's stack."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ContentError(f"{what} is not JSON: {exc}") from None
    except RecursionError:
        raise ContentError(f"{what} is JSON nested too deeply to read") from None
