"""Durable runs: resume in place, fork from a checkpoint, replay, answer, dry-run.

A run is named in its journal by its program (``module:function``), its arguments, and a
config (the model spec, the tools by reference, the seed, the state type), so a new process
can rebuild it. Everything that reaches the program again is fed from the journal: a resumed
run performs no completed effect twice, and a replay performs none at all.

Each job has its module; this one gathers their names, where callers have always found them:

- ``_loading``: programs, tools and state types by ``module:attr``, checked against the
  files a run was recorded with, and the config a run records;
- ``_resume``: resume in place and fork (``aresume``), answer (``aanswer``);
- ``_answer``: which question an answer is for;
- ``_replaying``: replay (:class:`ReplayInterpreter`, ``areplay``);
- ``_dry_run``: the dry run (:class:`DryRunInterpreter`, ``adry_run``, :class:`Plan`).
"""

from __future__ import annotations

from interpreters._dry_run import (
    GUESSED_OUTPUT_TOKENS,
    DryRunHandlers,
    DryRunInterpreter,
    Plan,
    PlanStep,
    adry_run,
    dry_run,
)
from interpreters._loading import (
    CodeChanged,
    ProgramNotFound,
    check_code,
    code_of,
    config_for,
    load_object,
    load_program,
    load_tools,
)
from interpreters._replaying import ReplayInterpreter, areplay, replay
from interpreters._resume import (
    aanswer,
    aresume,
    checkpoint_labels,
    find_checkpoint,
    fork_prefix,
    guard_journal,
    resume,
)

__all__ = [
    "GUESSED_OUTPUT_TOKENS",
    "CodeChanged",
    "DryRunHandlers",
    "DryRunInterpreter",
    "Plan",
    "PlanStep",
    "ProgramNotFound",
    "ReplayInterpreter",
    "aanswer",
    "adry_run",
    "areplay",
    "aresume",
    "check_code",
    "checkpoint_labels",
    "code_of",
    "config_for",
    "dry_run",
    "find_checkpoint",
    "fork_prefix",
    "guard_journal",
    "load_object",
    "load_program",
    "load_tools",
    "replay",
    "resume",
]
