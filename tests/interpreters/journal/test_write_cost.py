"""What an effect's journal write costs: the work done for each entry is what that entry
needs, and the bytes written are the ones the journal's format has always had."""

from __future__ import annotations

import zlib
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpreters.journal import _content as content
from interpreters.journal._content import (
    COMPRESS_MIN,
    DICTIONARY,
    SHORT_MIN,
    Packer,
    _short_message,
    kept_body,
    stored_body,
)
from op import Infer, Message, Response, ToolCall, Usage
from state import canonical_json


def _counting_equality(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the times two messages are compared with pydantic's ``==``."""
    calls = [0]
    equal = Message.__eq__

    def counted(self: Message, other: Any) -> bool:
        calls[0] += 1
        return equal(self, other)

    monkeypatch.setattr(Message, "__eq__", counted)
    return calls


def test_a_new_conversation_is_told_apart_without_comparing_whole_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    packer = Packer(keep=True)
    for k in range(8):  # as many conversations as a packer keeps, each one message long
        packer.effect(Infer(messages=(Message.user(f"conversation {k}"),)))
    calls = _counting_equality(monkeypatch)
    for k in range(20):  # each infer a new conversation, as many runs' first calls are
        packer.effect(Infer(messages=(Message.user(f"another {k}"),)))
        assert packer.earlier == 0
    assert calls[0] == 0


def test_a_message_alike_in_text_only_is_not_taken_for_the_one_before() -> None:
    packer = Packer(keep=True)
    packer.effect(Infer(messages=(Message.user("same words"), Message.user("a"))))
    # the same text from another role: a conversation of its own
    packer.effect(Infer(messages=(Message.system("same words"), Message.user("a"))))
    assert packer.earlier == 0
    # an equal message (a new object) is the same history, however it was made
    packer.effect(
        Infer(messages=(Message.user("same words"), Message.user("a"), Message.user("b")))
    )
    assert packer.earlier == 2


def _as_before(text: str) -> bytes:
    """A short text compressed as the journal always did: a new compressor, the dictionary set."""
    new = zlib.compressobj(6, zlib.DEFLATED, 10, 2, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
    return new.compress(text.encode()) + new.flush()


def test_short_texts_are_the_bytes_a_new_compressor_writes() -> None:
    texts = [
        '{"model":"gpt-4.1-mini","stop_reason":"end_turn","text":"ok","tool_calls":[],"usage":'
        '{"cached_tokens":0,"cost_usd":5.6e-06,"input_tokens":10,"output_tokens":1,'
        '"price_source":"genai-prices 0.2.3: openai gpt-4.1-mini"}}',
        '[null,{"content":"' + "run 7 call 3 " * 10 + '","role":"user","tool_call_id":null,'
        '"tool_calls":[]}]',
        *(f'{{"error":null,"ok":true,"output":"{"line " * k}"}}' for k in range(27, 90, 7)),
    ]
    for text in texts * 3:  # the same text again gives the same bytes: nothing is carried over
        assert SHORT_MIN <= len(text) < COMPRESS_MIN
        kept = stored_body(text)
        assert kept == _as_before(text)
        assert kept_body(kept, "a text") == text


def test_a_shorter_text_is_kept_as_it_is_and_one_kept_compressed_before_still_reads() -> None:
    # a usage and a short message's chain node: compressing them cost more than they saved
    texts = [
        '{"cached_tokens":0,"cost_usd":5.6e-06,"input_tokens":10,"output_tokens":1}',
        '[null,{"content":"run 7 call 3","role":"user","tool_call_id":null,"tool_calls":[]}]',
        '{"cached_tokens":0,"cost_usd":5.6e-06,"input_tokens":10,"output_tokens":1,'
        '"price_source":"genai-prices 0.2.3: openai gpt-4.1-mini"}',
    ]
    for text in texts:
        assert len(text) < SHORT_MIN
        assert stored_body(text) is text
        # an earlier opdsl compressed every text of 64 characters or more: still read
        older = _as_before(text)
        assert isinstance(older, bytes) and len(older) < len(text)
        assert kept_body(older, "a text") == text


def test_a_result_is_journaled_as_the_bytes_it_always_was() -> None:
    usage = Usage(input_tokens=10, output_tokens=1, cost_usd=5.6e-06)
    answer = Response(
        text="ok",
        tool_calls=(ToolCall(id="c1", name="f", arguments={"b": 1, "a": [1.5, None]}),),
        usage=usage,
        model="m",
    )
    usage_text = '{"cached_tokens":0,"cost_usd":5.6e-06,"input_tokens":10,"output_tokens":1}'
    answer_text = (
        '{"model":"m","stop_reason":"end_turn","text":"ok","tool_calls":[{"arguments":'
        '{"a":[1.5,null],"b":1},"id":"c1","name":"f"}],"usage":' + usage_text + "}"
    )
    failed = Message(role="tool", content="error: boom", is_error=True)
    for _ in range(2):  # a type's fields are asked of pydantic once: the second time alike
        assert canonical_json(usage) == usage_text
        assert canonical_json(answer) == answer_text
        assert canonical_json(failed) == (
            '{"content":"error: boom","role":"tool","tool_call_id":null,"tool_calls":[]}'
        )
        assert canonical_json(usage.model_copy(update={"price_source": "p"})) == (
            usage_text[:-1] + ',"price_source":"p"}'
        )


_ROLES = st.sampled_from(["user", "assistant", "system", "tool"])
_CONTENT = st.one_of(st.text(max_size=300), st.text(max_size=20).map(lambda t: "error: " + t))


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(_ROLES, _CONTENT, st.none() | st.text(max_size=8), st.booleans()), max_size=4
    ),
    st.none() | st.text(max_size=12),
)
def test_an_infer_is_packed_as_the_generic_walk_packs_it(
    messages: list[tuple[str, str, str | None, bool]], model: str | None
) -> None:
    conversation = tuple(
        Message(role=role, content=content, tool_call_id=call_id, is_error=failed)  # type: ignore[arg-type]
        for role, content, call_id, failed in messages
    )
    # the commonest infer is written as text, and an infer written through the generic walk
    # (its params another mapping, equal in canonical form) must pack to the same bytes
    quick = Packer(keep=True).effect(Infer(messages=conversation, model=model))
    written = content._short_message
    content._short_message = lambda message: None  # every message through the walk too
    try:
        walked = Packer(keep=True).effect(
            Infer(messages=conversation, model=model, params=MappingProxyType({}))
        )
    finally:
        content._short_message = written
    assert quick == walked
    for message in conversation:
        short = _short_message(message)
        assert short is None or short == canonical_json(message)
