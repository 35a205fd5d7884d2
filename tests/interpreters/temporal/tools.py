"""The tools of the Temporal tests: they run in the workers' activities, not in the workflow."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from interpreters import CallInfo, quick

MARKS = Path(os.environ.get("OPDSL_TEST_MARKS", "/nonexistent"))
"""A file the tools below append a line to as they start and end (set by the tests)."""


def _mark(line: str) -> None:
    with MARKS.open("a") as f:
        f.write(line + "\n")


async def slow(label: str, seconds: float, call: CallInfo) -> str:
    """Wait ``seconds``, marking the start and the end (label, effect and process)."""
    _mark(f"start {label} {call.idempotency_key} {os.getpid()}")
    await asyncio.sleep(seconds)
    _mark(f"done {label} {call.idempotency_key} {os.getpid()}")
    return label


@quick
def word_count(text: str) -> int:
    """Read-only and quick: a local activity on Temporal."""
    return len(text.split())


def leak() -> str:
    """Returns a secret of the worker's environment (which must not reach the history)."""
    return f"the key is {os.environ.get('OPDSL_TEST_API_KEY')}"
