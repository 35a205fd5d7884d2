"""Garbage in the content store: what no history on the namespace names any more.

Temporal removes a closed run's history once the namespace's retention has passed; the
content store does not know when. :func:`collect_garbage` reads every history of opdsl runs
the server still keeps (running, closed, continued as new), marks every piece and stored
payload a payload names (and, through them, the pieces those name: a chain's earlier nodes),
and removes the rest, except what was stored in the last ``grace_seconds``: a run in flight
stores a piece a moment before its history names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Iterable

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.service import RPCError

from interpreters.temporal._client import TemporalError, codec_of
from interpreters.temporal._store import ContentMissing, ContentStore
from interpreters.temporal._types import WORKFLOW

__all__ = ["collect_garbage"]

_NAME = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def _payloads(message: object) -> Iterable[Payload]:
    """Every payload in a protobuf message (an event), however deep."""
    if isinstance(message, Payload):
        yield message
        return
    list_fields = getattr(message, "ListFields", None)
    if list_fields is None:
        return
    for field, value in list_fields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if hasattr(value, "ListFields"):
            yield from _payloads(value)
            continue
        for item in value.values() if hasattr(value, "values") else value:
            yield from _payloads(item)


KEPT = f'WorkflowType="{WORKFLOW}"'
"""The runs whose content is kept: every opdsl run the namespace still has."""


async def collect_garbage(
    client: Client, *, grace_seconds: float = 3600.0, kept: str = KEPT
) -> tuple[int, int]:
    """Remove from the client's content store (see :func:`connect`) what no history of the runs
    ``kept`` lists (a visibility query; by default every opdsl run on the namespace) names;
    returns (kept, removed). A name is kept when any payload or stored content mentions it, so
    nothing a history needs goes (a text that happens to hold 64 hex digits only keeps a piece
    longer). A store shared by several namespaces must not be collected from one of them."""
    codec = codec_of(client)
    store = None if codec is None else codec.store
    if store is None:
        raise TemporalError("this client has no content store to collect (connect gives one)")
    config = client.config()
    config["data_converter"] = DataConverter.default  # the histories as stored: references
    raw = Client(**config)
    marked: set[str] = set()
    try:
        async for wf in raw.list_workflows(kept):
            handle = raw.get_workflow_handle(wf.id, run_id=wf.run_id)
            history = await handle.fetch_history()
            for event in history.events:
                for payload in _payloads(event):
                    marked.update(m.decode() for m in _NAME.findall(payload.data))
    except RPCError as exc:
        raise TemporalError(f"cannot read the runs on Temporal to collect: {exc}") from None
    await asyncio.to_thread(_close_over, store, marked)
    cutoff = time.time() - grace_seconds
    stored = list(store.listed())
    doomed = [n for n, at in stored if n not in marked and at < cutoff]
    removed = await asyncio.to_thread(store.delete, doomed)
    return len(stored) - removed, removed


def _close_over(store: ContentStore, marked: set[str]) -> None:
    """Add to ``marked`` every name the content of a marked name mentions (a stored payload's
    pieces, a chain node's earlier node and its message's pieces), transitively."""
    todo = list(marked)
    while todo:
        batch, todo = todo[:256], todo[256:]
        try:
            found = store.get(batch)
        except ContentMissing:  # a changed file among them: read them one by one
            found = {}
            for name in batch:
                with contextlib.suppress(ContentMissing):
                    found.update(store.get((name,)))
        for data in found.values():
            for m in _NAME.findall(data):
                name = m.decode()
                if name not in marked:
                    marked.add(name)
                    todo.append(name)
