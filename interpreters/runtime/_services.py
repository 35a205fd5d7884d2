"""What an interpreter gives the driver for a run: one frozen value (its handlers, its clock,
its event bus, its journal, how branches are scheduled, what replaces secrets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import final

from interpreters.journal._base import Journal
from interpreters.runtime._clock import Clock
from interpreters.runtime._events import EventBus
from interpreters.runtime._frame import Handlers
from interpreters.runtime._redact import Redactor
from interpreters.runtime._schedule import Scheduler

__all__ = ["Services"]


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """The services a run is driven with.

    ``handlers`` perform the leaf effects; ``clock`` gives time, sleeps and deadlines;
    ``bus`` takes the events (default: no listener); ``journal`` records the run (None:
    nothing is recorded); ``scheduler`` runs ``par`` branches (None: anyio's task groups);
    ``redactor`` replaces secrets before anything is journaled (None: the secrets in this
    process's environment); ``interruptible``: Ctrl-C stops the run at its next effect (off
    inside another engine, whose loop owns the process's signals).
    """

    handlers: Handlers
    clock: Clock
    bus: EventBus = field(default_factory=lambda: EventBus([]))
    journal: Journal | None = None
    scheduler: Scheduler | None = None
    redactor: Redactor | None = None
    interruptible: bool = True
