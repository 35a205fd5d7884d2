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
from collections.abc import Iterable, Mapping
from typing import final

__all__ = ["REDACTED", "SECRET_MARKERS", "Redactor", "looks_secret"]

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
REDACTED = "[redacted]"
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"']+:)([^\s@/\"']+)(@)")
_MIN_LENGTH = 6  # shorter values would redact ordinary words


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
            secrets += [m.group(2) for m in _URL_PASSWORD.finditer(value)]
        return cls(secrets)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if "@" in text and "://" in text:
            text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
        return text

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self(text)
