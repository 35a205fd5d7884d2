"""What travels between a client, the workflow and the activities: plain dataclasses of strings
and numbers (Temporal's JSON converter carries them), so nothing in a history is Python-only.

Effects and results travel as the text the journal writes, packed (``journal._content``):
each piece of content once, in ``pieces``, which the payload codec (``_store``) keeps in the
content store and names by hash, so a history holds what is new at each step and never the
whole conversation again. A result's secrets are replaced on the worker.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIVITY",
    "AdmitRequest",
    "Admission",
    "Carried",
    "EffectCall",
    "Outcome",
    "RunInput",
    "RunOutcome",
    "WORKFLOW",
    "activity_id",
    "tools_digest",
]

WORKFLOW = "opdsl.run"
"""The workflow type every opdsl program runs as."""

ACTIVITY = {
    "admit": "opdsl.admit",
    "tool": "opdsl.tool",
    "infer": "opdsl.infer",
    "agent": "opdsl.agent",
    "checkpoint": "opdsl.checkpoint",
    "restore": "opdsl.restore",
}
"""Activity type names, by what they do."""


def activity_id(address: str, effect_json: str) -> str:
    """The id of the activity that performs the effect at ``address``: the address and a hash of
    the effect, so that a program asking for a changed effect there (another tool argument) no
    longer matches its history. Temporal compares activity type and id on replay, not inputs."""
    digest = hashlib.sha256(effect_json.encode()).hexdigest()[:16]
    return f"{address}#{digest}"


def tools_digest(listing: Mapping[str, Any]) -> str:
    """A short hash of the MCP tools a listing offers (by server: each tool as listed, its
    name, the server's name for it, its description and its input schema; not how the server
    is started), the same in every process, so a worker tells at a glance whether it offers
    what a run goes with. A server's tools are taken by name, as the workflow compares them
    (``_compare``): listed in another order, they are the same. A lone surrogate (JSON lets a
    server write one; a journal handed over keeps it) is hashed as the content store keeps
    text (``surrogatepass``), not an error.

    Example:
        >>> tools_digest({}) == tools_digest({})
        True
    """
    tools = {
        server: _by_name(entry.get("tools")) if isinstance(entry, Mapping) else None
        for server, entry in listing.items()
    }
    text = json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _by_name(tools: Any) -> Any:
    """A server's tools by name (the last of a name, as ``_compare`` reads them), or as they
    are where they are not a list of named tools."""
    if not isinstance(tools, list) or not all(
        isinstance(t, Mapping) and isinstance(t.get("name"), str) for t in tools
    ):
        return tools
    return {t["name"]: t for t in tools}


@dataclass
class RunInput:
    """A run to drive: the program by name, its arguments and state as canonical JSON.

    ``record``: a journal (the JSONL of ``opdsl export``) the run continues from: the same run
    after a continue-as-new, or a fork's prefix (``restore_at``: its checkpoint's address); its
    pieces of content travel in ``pieces`` (by hash, through the content store).
    """

    run_id: str
    program: str
    args_json: str = '{"args":[],"kwargs":{}}'
    state_json: str | None = None
    journal: str | None = None
    state_type: str | None = None
    seed: str | None = None
    record: str | None = None
    restore_at: str | None = None
    parent_run: str | None = None
    fork_checkpoint: str | None = None
    #: continue as new once the history holds this many events (1 to 51,200, Temporal's own limit)
    history_limit: int = 10_000
    generation: int = 0
    #: the pieces of content ``record`` refers to, by hash (``journal._content``)
    pieces: dict[str, str] = field(default_factory=dict)
    #: continue as new once the history holds this many bytes (Temporal warns at 10 MiB and
    #: ends a run at 50 MiB); Temporal's own suggestion to continue as new is taken as well
    history_bytes: int = 10 * 1024 * 1024
    #: the MCP tools the run goes with (JSON: by server, as ``Admission.mcp``), from its run
    #: of the workflow before a continue-as-new
    tools_json: str | None = None


@dataclass
class AdmitRequest:
    """What a worker is asked to admit: the program and, if any, the state type the run was
    started with (both name code the worker would import)."""

    program: str
    state_type: str | None = None


@dataclass
class Admission:
    """What the worker that admitted a run tells the workflow: which tools are quick and
    read-only (run as local activities), the activity timeouts it chose, whether the workers
    keep content in a content store (``stored``), the server's payload limit, whether the
    run keeps the questions it waits on in its memo (``waiting_memo``), and the MCP tools the
    worker offers (``mcp``: by server, the server as recorded and its tools, as
    ``MCPTools.recorded`` holds them; ``{}``: none), which the run records and holds every
    worker that performs its effects to. Each field an older worker did not send has the
    value that makes its runs replay as they ran (``mcp``: None, no tools compared)."""

    quick_tools: list[str] = field(default_factory=list)
    heartbeat_seconds: float = 2.0
    stored: bool = False
    payload_limit: int = 2 * 1024 * 1024
    waiting_memo: bool = False
    mcp: dict[str, Any] | None = None


@dataclass
class EffectCall:
    """One effect for an activity: the run, its address and the effect as journaled (packed:
    an ``infer``'s messages are the head of their chain), with the pieces of content the
    workflow has not sent before. The others are in the content store: the activity finds
    them there, or in what its worker read lately."""

    run_id: str
    address: str
    effect_json: str
    pieces: dict[str, str] = field(default_factory=dict)
    #: an ``infer``'s place among the run's model calls (``Call.model_calls``)
    model_calls: int | None = None
    #: the MCP tools the run goes with: ``digest`` (:func:`tools_digest`), and, where the run
    #: refused a change of them, ``refused`` (the last reason) and ``refusals`` (the reason,
    #: by the digest of the tools refused): a worker that offers those must not perform the
    #: effect (None: no tools compared)
    tools: dict[str, Any] | None = None


@dataclass
class Outcome:
    """What an activity did: the result as canonical JSON, or the error the program gets
    (``fatal``: it ends the run, as an ``op.Fatal`` does locally)."""

    result_json: str | None = None
    error_json: str | None = None
    fatal: bool = False
    #: the pieces ``result_json`` refers to (a long tool output, a long answer)
    pieces: dict[str, str] = field(default_factory=dict)
    #: the effect was not performed: the worker offers other MCP tools than the run goes
    #: with, these (as ``Admission.mcp``)
    tools_now: dict[str, Any] | None = None
    #: ... and its worker takes the change the run refused (``accept_changed_code``)
    tools_accepted: bool = False


@dataclass
class RunOutcome:
    """How a run on Temporal ended, as :class:`interpreters.runtime.RunResult` says it locally,
    with the run's journal (the JSONL of ``opdsl export``), so a finished run can be read back
    from its history alone, with no worker up. On the wire the journal's pieces of content
    travel in ``pieces``; :func:`interpreters.temporal.outcome` puts them back in ``journal``."""

    run_id: str
    program: str
    status: str
    result_json: str | None = None
    error: str | None = None
    address: str | None = None
    state_json: str | None = None
    journal: str | None = None
    pieces: dict[str, str] = field(default_factory=dict)


@dataclass
class Carried:
    """A run's journal as it travels (the ``journal`` query): the lines of ``opdsl export``
    but its pieces of content, which are in ``pieces``."""

    text: str
    pieces: dict[str, str] = field(default_factory=dict)
