"""What the interpreters need of a model behind a network API, without its HTTP client:
:class:`RemoteModel` (the base of :class:`~interpreters.models.HttpModel`), the errors it
raises, its retry policy, its price table, and the default model's spec. Importing this
loads no HTTP library, so a run with a scripted model never does."""

from __future__ import annotations

import os
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from interpreters.models._prices import Prices
from interpreters.runtime._frame import Call
from op import ModelError, Response
from op.effects import ModelRequest

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "Prices",
    "ProviderError",
    "RemoteModel",
    "RetryPolicy",
    "count_setting",
    "default_model_spec",
    "seconds_setting",
]


def seconds_setting(name: str, raw: str) -> float:
    """A positive, finite number of seconds given as text, or a ValueError naming ``name``."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{name}={raw!r}: expected a positive number of seconds")
    return seconds


DEFAULT_MAX_TOKENS = 4096
"""The most tokens a model may write in one answer unless told otherwise: without a cap, a
small local model can write until its context is full (minutes, thousands of tokens)."""


def count_setting(name: str, raw: object) -> int:
    """A positive whole number given as text or a number, or a ValueError naming ``name``."""
    if isinstance(raw, bool):
        raw = "bad"
    try:
        value = int(str(raw))
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: expected a positive whole number")
    return value


class ProviderError(ModelError):
    """A model provider refused or failed a request."""

    def __init__(
        self, message: str, *, status: int | None = None, retryable: bool = False, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        #: the message without the provider, model and status in front
        self.detail = detail or message


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a request again."""

    max_retries: int = 2
    base: float = 0.5
    cap: float = 8.0

    def delay(self, attempt: int, headers: Mapping[str, str] | None) -> float:
        if headers is not None:
            for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
                raw = headers.get(name)
                if raw is None:
                    continue
                try:
                    seconds = float(raw) * scale
                except ValueError:
                    try:
                        when = parsedate_to_datetime(raw).timestamp()
                    except (TypeError, ValueError):
                        continue
                    seconds = when - time.time()
                if 0 < seconds <= 60:
                    return seconds
        backoff: float = min(self.base * 2**attempt, self.cap)
        return backoff * (1 - 0.25 * random.random())  # jitter


RETRY_STATUSES = frozenset({408, 409, 429})


def retryable(status: int, headers: Mapping[str, str], body: str) -> bool:
    forced = headers.get("x-should-retry")
    if forced in ("true", "false"):
        return forced == "true"
    if status == 429 and ("insufficient_quota" in body or "enforced_spend_limit_reached" in body):
        return False
    return status in RETRY_STATUSES or status >= 500


class RemoteModel(ABC):
    """A model behind a network API, as an interpreter sees it: which provider and model it
    is, where it is, how it retries and what it costs. :class:`HttpModel` is the one opdsl
    has; a check ``isinstance(model, RemoteModel)`` loads no HTTP library."""

    #: the provider's name, as a spec starts (``openai``, ``openai-compatible``, ...)
    provider: str
    #: the model's name, as the provider knows it
    model: str
    #: the spec as the user wrote it, its credentials redacted: errors and traces name it
    spec: str
    #: the server's URL, without credentials
    base_url: str
    retry: RetryPolicy
    prices: Prices

    @abstractmethod
    async def complete(self, request: ModelRequest, call: Call) -> Response: ...


DEFAULT_MODEL = "ollama:qwen3:8b"


def default_model_spec() -> str:
    """``$OPDSL_MODEL``, else ``ollama:qwen3:8b``."""
    return os.environ.get("OPDSL_MODEL") or DEFAULT_MODEL
