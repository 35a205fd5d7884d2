"""An answer's body as opdsl reads it: decoded as it arrives (gzip, deflate), and never more
than a cap of decoded bytes, whichever transport carried it."""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["ERROR_BODY", "AnswerTooLarge", "Decoded", "UnreadableAnswer"]


class AnswerTooLarge(Exception):
    """An answer went past the most bytes its reader takes."""


class UnreadableAnswer(Exception):
    """An answer's body is in an encoding opdsl cannot read within its cap, or is broken."""


ERROR_BODY = 64 * 1024
"""The most bytes of an error answer read: its message is in its first bytes; the rest of it
is not read (its connection is closed)."""


class Decoded:
    """An answer's body decoded as it arrives (its ``content-encoding``: gzip, deflate, or
    several in turn), never more than ``limit`` decoded bytes in all: a piece that would
    decode past the cap raises :class:`AnswerTooLarge` having made at most one byte over it,
    however small the piece (a few KiB of gzip can hold gigabytes); with ``cut``, the answer is
    cut at the cap instead and :attr:`full` is set. An encoding that cannot be decoded so (br,
    zstd: opdsl asks for none), or a broken one, raises :class:`UnreadableAnswer`."""

    __slots__ = ("_cut", "_left", "_names", "_stages", "_unsure", "full")

    def __init__(self, encoding: bytes, limit: int, *, cut: bool = False) -> None:
        self._cut = cut
        #: the cap was reached (``cut``): what comes after it is dropped
        self.full = False
        self._stages: list[Any] = []  # zlib decompressors, in the order they are undone
        self._names: list[str] = []
        #: per stage, while a deflate stage's form (zlib's, or raw) is not yet known: the
        #: bytes fed so far, to feed again as raw deflate (some servers send it so)
        self._unsure: list[bytes | None] = []
        for coding in reversed([c.strip().lower() for c in encoding.split(b",")]):
            if coding in (b"", b"identity"):
                continue
            if coding in (b"gzip", b"x-gzip"):
                self._stages.append(zlib.decompressobj(zlib.MAX_WBITS | 16))
                self._unsure.append(None)
                self._names.append("gzip")
            elif coding == b"deflate":
                self._stages.append(zlib.decompressobj())
                self._unsure.append(b"")
                self._names.append("deflate")
            else:
                name = coding.decode("latin-1")[:40]
                raise UnreadableAnswer(
                    f"the answer is encoded as {name!r}, which opdsl did not ask for and cannot "
                    "read within its size cap"
                )
        #: the decoded bytes each stage may still make (the last one's are the answer's)
        self._left = [limit] * max(1, len(self._stages))

    def feed(self, data: bytes) -> bytes:
        """The decoded bytes of the next piece of the body."""
        if not self._stages:
            return self._count(0, data)
        for i in range(len(self._stages)):
            if not data:
                break
            data = self._inflate(i, data)
        return data

    def end(self) -> bytes:
        """What is left in the decoders once the body has ended."""
        data = b""
        for i, stage in enumerate(self._stages):
            if data:
                data = self._inflate(i, data)
            data += self._count(i, stage.flush())
        return data

    def _inflate(self, i: int, data: bytes) -> bytes:
        unsure = self._unsure[i]
        try:
            out: bytes = self._stages[i].decompress(data, self._left[i] + 1)
        except zlib.error as exc:
            if unsure is None:
                raise UnreadableAnswer(
                    f"the answer's {self._names[i]} encoding is broken ({exc})"
                ) from None
            self._stages[i] = zlib.decompressobj(-zlib.MAX_WBITS)
            self._unsure[i] = None
            return self._inflate(i, unsure + data)
        if unsure is not None:
            # a zlib header passed its check, or the bytes so far already decoded
            self._unsure[i] = None if out or len(unsure) + len(data) >= 2 else unsure + data
        return self._count(i, out)

    def _count(self, i: int, out: bytes) -> bytes:
        self._left[i] -= len(out)
        if self._left[i] < 0:
            if not self._cut:
                raise AnswerTooLarge()
            out, self._left[i], self.full = out[: len(out) + self._left[i]], 0, True
        return out
