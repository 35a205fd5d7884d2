"""``opdsl new PATH``: a new agent program, with its state, tests, a recorded cassette, a
``pyproject.toml`` and a README, whose tests pass as generated, offline."""

from __future__ import annotations

import importlib
import json
import keyword
import re
import sys
from pathlib import Path

from interpreters.cli._command import UsageError

__all__ = ["new_project"]


NAME_RULE = (
    "a project name is ASCII letters, digits, '-', '_' and '.', starting and ending with a "
    "letter or digit, and its module name (lower case, '-' and '.' as '_') must not start "
    "with a digit or be a Python keyword"
)
"""The names ``opdsl new`` takes: a valid distribution name (PEP 508) whose module name is a
Python identifier."""

_DIST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?", re.ASCII)


def _names(path: Path) -> tuple[str, str]:
    """(distribution name, module name) for a project folder, or a UsageError saying the rule."""
    dist = path.name
    module = re.sub(r"[-.]", "_", dist).lower()
    if (
        not _DIST.fullmatch(dist)
        or not module.isidentifier()
        or not module.isascii()
        or keyword.iskeyword(module)
    ):
        raise UsageError(f"{dist!r} cannot name a project: {NAME_RULE}")
    if module in sys.stdlib_module_names or module in (
        "op",
        "state",
        "interpreters",
        "programs",
        "tests",
    ):
        raise UsageError(f"{dist!r} would shadow the module {module!r}; pick another folder name")
    return dist, module


def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's, for these characters)."""
    return json.dumps(text, ensure_ascii=True)


def new_project(path: str | Path, *, version: str) -> list[Path]:
    """Write a new project at ``path`` (which must not exist, or be an empty folder); returns
    the files written. Its cassette is recorded here, by running the program offline."""
    root = Path(path)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UsageError(f"{root} already exists and is not an empty folder; nothing was written")
    dist, module = _names(root.resolve())
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{module}/__init__.py": '"""The {dist} agent program."""\n',
        f"{module}/py.typed": "",
        f"{module}/agent.py": AGENT,
        "tests/__init__.py": "",
        "tests/test_agent.py": TESTS,
    }
    # the names are checked above; in TOML they are written as quoted strings
    fill = {
        "{dist_toml}": _toml_string(dist),
        "{requirement_toml}": _toml_string(f"opdsl>={version}"),
        "{packages_toml}": _toml_string(f"{module}*"),
        "{dist}": dist,
        "{module}": module,
    }
    written = []
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        for placeholder, value in fill.items():
            text = text.replace(placeholder, value)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    written.append(_record_cassette(root, module))
    return written


def _record_cassette(root: Path, module: str) -> Path:
    """Run the new program once with the scripted session of its test and keep the run."""
    from interpreters._api import run
    from interpreters.journal import MemoryJournal, export_run
    from interpreters.models._base import ScriptedModel

    sys.path.insert(0, str(root.resolve()))
    try:
        agent = importlib.import_module(f"{module}.agent")
        journal = MemoryJournal()
        result = run(
            agent.research,
            "What is six times seven?",
            model=ScriptedModel(list(agent.SESSION)),
            db=journal,
        )
        if result.status != "completed":
            raise RuntimeError(f"the new program did not run: {result.describe()}")
        cassette = root / "tests" / "cassettes" / "test_the_recorded_session_replays.jsonl"
        cassette.parent.mkdir(parents=True, exist_ok=True)
        cassette.write_text(export_run(journal, result.run_id), encoding="utf-8")
        return cassette
    finally:
        sys.path.remove(str(root.resolve()))
        for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
            del sys.modules[name]


PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = {dist_toml}
version = "0.1.0"
description = "An agent program written with opdsl."
requires-python = ">=3.11"
dependencies = [{requirement_toml}]

[project.optional-dependencies]
test = ["pytest>=8", "mypy>=1.10"]

[tool.setuptools.packages.find]
include = [{packages_toml}]

[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]

[tool.mypy]
strict = true
"""

AGENT = '''\
"""The {dist} agent: it plans how to answer a question, then answers it.

Run it with a real model::

    opdsl run {module}.agent:research --arg question='Why is the sky blue?' --model openai:gpt-4.1-mini
"""

from __future__ import annotations

from op import Append, Inc, Message, Op, checkpoint, emit, infer, program, update
from state import CRDTModel, GCounter, Log


class Notes(CRDTModel):
    """What the agent keeps as it works (every field is a CRDT, so parallel branches merge)."""

    steps: Log[str] = Log()
    tokens: GCounter = GCounter()


@program(state=Notes)
def research(question: str) -> Op[str]:
    """Plan, then answer; a checkpoint after each step, so a run can be resumed or forked there."""
    yield from checkpoint("start")
    plan = yield from infer(f"Plan, in three short steps, how to answer: {question}")
    yield from update(steps=Append(plan.text), tokens=Inc(plan.usage.total_tokens))
    yield from checkpoint("planned")
    answer = yield from infer(
        [Message.system("Answer in one sentence."), Message.user(f"{question}\\n\\nYour plan:\\n{plan.text}")]
    )
    yield from update(steps=Append(answer.text), tokens=Inc(answer.usage.total_tokens))
    yield from emit("answered", {"characters": len(answer.text)})
    return answer.text


SESSION = ("1. Multiply. 2. Check. 3. Say it.", "Six times seven is 42.")
"""The model's answers in the tests (and in the recorded cassette)."""
'''

TESTS = '''\
"""Tests of the agent: one scripted, one replaying a recorded cassette (offline, no model)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from interpreters import ScriptedInterpreter, ScriptedModel, expect
from interpreters.testing import Cassette

from {module}.agent import SESSION, Notes, research


def test_the_agent_plans_then_answers(opdsl_scripted: Callable[[Sequence[Any]], ScriptedInterpreter]) -> None:
    script = [
        (expect("infer"), SESSION[0]),
        (expect("infer", messages=lambda m: "Your plan" in m[-1].content), SESSION[1]),
    ]
    result = opdsl_scripted(script).run(research, "What is six times seven?")
    assert result.value == "Six times seven is 42."
    assert isinstance(result.state, Notes) and list(result.state.steps.items) == list(SESSION)


def test_the_recorded_session_replays(opdsl_cassette: Cassette) -> None:
    # replays tests/cassettes/test_the_recorded_session_replays.jsonl; `pytest --opdsl-record`
    # records it again (with the model given here, or a real one)
    result = opdsl_cassette.run(research, "What is six times seven?", model=ScriptedModel(list(SESSION)))
    assert result.value == "Six times seven is 42."
'''

README = """\
# {dist}

An agent program written with [opdsl](https://pypi.org/project/opdsl/): `{module}/agent.py`
plans how to answer a question, then answers it, with a checkpoint after each step.

```sh
pip install -e '.[test]'
pytest                 # offline: a scripted test, and a replay of tests/cassettes/
mypy {module} tests    # strict
```

## Against a real model

```sh
export OPENAI_API_KEY=...
opdsl run {module}.agent:research --arg question='Why is the sky blue?' --model openai:gpt-4.1-mini
```

(`anthropic:claude-sonnet-4-5` with `ANTHROPIC_API_KEY`, `ollama:qwen3:8b` on your machine.)
Every run is journaled to `.opdsl/runs.db`; `opdsl runs` lists them, `opdsl show RUN` shows one.

## Resume, fork, replay

```sh
opdsl resume RUN                  # continue a run that stopped (a crash, Ctrl-C)
opdsl resume RUN --from planned   # a new run from the checkpoint after the plan
opdsl replay RUN                  # check it against its journal, offline
```

`pytest --opdsl-record` records the cassette again by running the test's program live.
"""
