"""What an effect's journal write costs: the work done for each entry is what that entry
needs, and the bytes written are the ones the journal's format has always had."""

from __future__ import annotations

from typing import Any

import pytest

from interpreters.journal._content import (
    Packer,
)
from op import Infer, Message


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
