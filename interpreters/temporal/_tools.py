"""The MCP tools a run on Temporal goes with, held to every worker that performs its effects.

A live run records its servers' tool lists at its start and compares them on resume
(``interpreters.tools._mcp``, rule 6). On Temporal there is no resume to compare at: any
worker of the task queue may take the run's next effect, one restarted with a changed server
among them. So:

1. The worker that admits a run lists its MCP tools in the admission (``Admission.mcp``);
   the run records them in its config (``mcp``, as a live run does) and goes with them.
   A run admitted by an opdsl before this (no ``mcp`` in its admission) compares nothing and
   replays as it ran.
2. Each ``tool``, ``infer`` and ``agent`` activity is sent the digest of the tools the run
   goes with (``EffectCall.tools``). A worker that offers the same tools performs the
   effect; one that offers others performs nothing and answers with what it offers
   (``Outcome.tools_now``).
3. The workflow compares, as a live resume does, what the run goes with and what that worker
   offers, against what the run's journal depends on so far (a tool called, offered to a
   model or served to an agent before this effect). A change nothing depends on is a
   warning in the worker's log, and the run goes on with what that worker offers (its
   digest is sent from then on). A change of a tool the run depends on is refused: the
   effect is sent again with the refusal, and a worker that offers the tools refused fails
   it with that message, naming the server and the tool (a benign error: the worker says it
   in one line, once a minute at most, not with a traceback at each retry), so Temporal
   retries it and the run waits (as a refused live resume leaves its run) until a worker
   that offers the tools as the run knew them takes it; a worker that offers yet others (the tools the run knew and
   one more) answers with them, and the run compares those in turn; a worker started to
   accept changed code (``make_worker(accept_changed_code=True)``, ``opdsl worker
   --accept-changed-code``) answers with what it offers, which the run then goes on with, as
   a live resume with ``--accept-changed-code`` does.
4. What the run goes with is carried into a continue-as-new (``RunInput.tools_json``); a fork
   or a continued run compares the admission with it, or with its carried record's, at its
   start.

Every decision comes from what the history holds (the admission, the activities' outcomes),
so a replay takes the same ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from interpreters.temporal._types import tools_digest
from interpreters.tools._mcp import MCPToolsChanged, _compare, _depended_on

__all__ = ["RunTools"]


@final
class RunTools:
    """The MCP tools one run goes with, and whether a change of them was refused."""

    def __init__(self, listing: Mapping[str, Any]) -> None:
        self.listing: dict[str, Any] = dict(listing)
        self.digest = tools_digest(self.listing)
        #: why a worker that offers other tools must not perform the next effect (the last
        #: refusal; ``refusals`` holds each)
        self.refused: str | None = None
        #: the listings the run refused since it last went on, by digest: why
        self.refusals: dict[str, str] = {}
        #: the changes said (from one listing to another, by digests): a run whose effects
        #: two workers take in turn says each once, not at every switch
        self._said: set[tuple[str, str]] = set()

    def sent(self) -> dict[str, Any]:
        """What an activity is sent of them (``EffectCall.tools``): a worker whose tools are
        among ``refusals`` fails the activity with the reason; any other that offers other
        tools than ``digest`` answers with what it offers."""
        if self.refused is None:
            return {"digest": self.digest}
        return {"digest": self.digest, "refused": self.refused, "refusals": dict(self.refusals)}

    def meet(
        self,
        run_id: str,
        now: Mapping[str, Any],
        entries: Iterable[Any],
        warn: Callable[[str], None],
        *,
        accept: bool = False,
    ) -> None:
        """A worker offers ``now``: go on with it, saying what changed, unless a tool the
        run's ``entries`` depend on changed (then the run waits for a worker that offers
        them as they were) and the worker does not ``accept`` the change."""
        change = (self.digest, tools_digest(now))
        say = warn if change not in self._said else _silent
        self._said.add(change)
        try:
            _compare(run_id, self.listing, now, _depended_on(entries), accept, say)
        except MCPToolsChanged as exc:
            self.refused = (
                f"{exc}".split("; pass --accept-changed-code")[0]
                + "; the run waits for a worker whose MCP servers offer them as it started "
                "with them (or end it: temporal workflow terminate)"
            )
            self.refusals[change[1]] = self.refused
            return
        self.listing = dict(now)
        self.digest = change[1]
        self.performed()

    def performed(self) -> None:
        """A worker that offers what the run goes with performed an effect."""
        self.refused = None
        self.refusals = {}

    def as_json(self) -> str:
        return json.dumps(self.listing, sort_keys=True, separators=(",", ":"))


def _silent(line: str) -> None:
    """A change said before."""
