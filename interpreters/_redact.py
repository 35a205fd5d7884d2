"""Secrets never leave: one redactor for everything a run writes (journal, events, exports,
errors, command output).

A secret is the value of an environment variable whose name looks secret (it holds KEY,
TOKEN, SECRET, PASSWORD or CREDENTIAL, or is named by the caller), and the password of any
URL that carries credentials (``postgres://admin:hunter2@db/prod``), wherever it appears.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import final

__all__ = ["REDACTED", "SECRET_MARKERS", "Redactor", "looks_secret", "without_passwords"]

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
REDACTED = "[redacted]"
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_WORD = re.compile(r"[^\s\"']+")
_USER_END = re.compile(r"[:/@]")
_PATH_START = re.compile(r"[/?#]")
_MIN_LENGTH = 6  # shorter values would redact ordinary words


def _urls(text: str, start: int, end: int) -> Iterator[int]:
    """Where each ``://`` of ``text[start:end]`` that follows a scheme's character lies."""
    i = text.find("://", start, end)
    while i >= 0:
        if i > start and text[i - 1] in _SCHEME_CHARS:
            yield i
        i = text.find("://", i + 3, end)


def _running_spans(text: str) -> Iterator[tuple[int, int]]:
    """Where the passwords of URLs in running text lie: in each word (no space or quote) that
    holds one, from after its first ``scheme://user:`` to the word's last ``@`` (a password
    may hold a ``/``, a ``:`` or an ``@``). Each character is looked at a bounded number of
    times, whatever the text holds (a pattern that backtracks took seconds on 100 KB of a
    tool's hostile output)."""
    for word in _WORD.finditer(text):
        start, end = word.span()
        at = text.rfind("@", start, end)
        if at < 0:
            continue
        for i in _urls(text, start, at):
            user_end = _USER_END.search(text, i + 3, at + 1)
            if user_end is None or user_end.group() != ":" or user_end.end() >= at:
                continue
            path = _PATH_START.search(text, user_end.end(), at)
            if path is not None and text[user_end.end() : path.start()].isdigit():
                continue  # a host's port, then its path (``host:3000/u?mail=a@b``): no password
            yield user_end.end(), at
            break


def _password_spans(value: str) -> list[tuple[int, int]]:
    """Where the passwords of the URLs in ``value``, a whole value (an environment variable's),
    lie: each from after ``scheme://user:`` to the last ``@`` before the next URL, whatever it
    holds (a ``/``, a space, a tab, an ``@``), so a URL that does not parse hides it too."""
    starts = [*_urls(value, 0, len(value)), len(value)]
    spans = []
    for start, end in zip(starts, starts[1:], strict=False):
        user = start + 3
        at = value.rfind("@", user, end)
        colon = value.find(":", user, at) if at >= 0 else -1
        if colon >= 0:
            spans.append((colon + 1, at))
    return spans


def without_passwords(value: str) -> str:
    """``value``, a whole value (an environment variable's), with the password of each URL in
    it redacted, however malformed the URL.

    Example:
        >>> without_passwords("http://me:pa/ss word@proxy:3128")
        'http://me:[redacted]@proxy:3128'
    """
    return _replaced(value, _password_spans(value))


def _replaced(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with each of ``spans`` (in order, apart) replaced by :data:`REDACTED`."""
    parts: list[str] = []
    kept = 0
    for start, end in spans:
        parts += (text[kept:start], REDACTED)
        kept = end
    return "".join(parts) + text[kept:]


def looks_secret(name: str, extra: Iterable[str] = ()) -> bool:
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) or name in extra


@final
class Redactor:
    """Replaces secrets in text with ``[redacted]``.

    Example:
        >>> r = Redactor.from_env({"API_TOKEN": "tok-123456", "DATABASE_URL": "postgres://u:pw-98765@db/x"})
        >>> r("token tok-123456, url postgres://u:pw-98765@db/x")
        'token [redacted], url postgres://u:[redacted]@db/x'
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # longest first, so a secret that contains another is replaced whole
        self.secrets = sorted({s for s in secrets if len(s) >= _MIN_LENGTH}, key=len, reverse=True)
        # how each secret looks inside JSON text (escaped quotes, backslashes, unicode)
        escaped = {json.dumps(s)[1:-1] for s in self.secrets} - set(self.secrets)
        self.secrets += sorted(escaped, key=len, reverse=True)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, extra_names: Iterable[str] = ()
    ) -> Redactor:
        env = os.environ if environ is None else environ
        extra = tuple(extra_names)
        secrets = [v for n, v in env.items() if looks_secret(n, extra)]
        for value in env.values():  # credentials inside URLs, whatever the variable's name
            secrets += [value[start:end] for start, end in _password_spans(value)]
        return cls(secrets)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if "@" in text and "://" in text:
            text = _replaced(text, _running_spans(text))
        return text

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self(text)
