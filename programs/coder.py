"""The Coder: init -> work -> verify -> commit, with a checkpoint at every phase boundary.

Written only against ``op`` and ``state``: it reaches the repository through the workspace
tools the interpreter binds (``run(coder, config, workspace=repo)``; the Coder names its
repository in its config, so ``opdsl run programs.coder:coder --arg repo=PATH`` binds it too).

- **init** (``before-init``, under ``init_budget``): git status (uncommitted changes are a
  warning, and are kept safe), the lint/build/test commands (given, or detected: a
  ``pyproject.toml`` gives ruff and pytest, a ``package.json`` ``npm test``, a ``Makefile``
  with a ``test`` target ``make test``), a snapshot of the files to recover to, and the build.
  A repository that does not build before the work starts is reported as such.
- **work** (``before-work``, under ``work_budget``): first the tests run, and the model is shown
  what failed and the files the failure names (with the modules a failing test imports), read
  into the conversation before it can change anything (``show_failure``); then a tool-calling
  loop until the model stops calling tools, at most ``max_work_iterations`` model calls,
  stopping early when it is stuck (the same call with the same result ``stuck_repeats`` times
  in a row); a checkpoint ``work-blocked-N`` after an iteration whose tools failed. An answer
  cut by ``max_tokens`` is never taken as done: the model is asked to go on
  (``programs.loop.tool_loop``); one that changed no file yet is asked once to make its
  change. A ``write_file`` or ``edit_file`` whose text is an earlier tool's result is refused.
  With ``work_mode="propose"`` (for small models) the model is asked for the fixed code
  instead, shown the functions the failure is about with their line numbers; the Coder places
  each answer (``programs._propose``), runs the tests, and keeps the first they pass.
- **verify** (``before-verify``, under ``verify_budget``): lint (with fix), build, test, each
  under its timeout; a failure goes back to the model with its output and the files it names
  for a fix, up to ``verify_retries`` times; a fix that gets stuck (or runs out of turns) ends
  that retry, not the run. When a runner itself cannot run (not installed, not allowed) the
  loop stops instead of spinning; a lint step the Coder detected (not one given) is skipped
  instead, with a warning.
- **commit** (``before-commit``): stage, a message written by the model from the diff and the
  task, and a commit.
- **recovery** on every failure path: the files go back to the snapshot taken at init (the
  user's own uncommitted work included, untouched), and the result says which phase failed,
  why, and what was spent; its ``files`` are those still changed (none, once put back).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from op import (
    Add,
    Budget,
    Failure,
    Inc,
    Message,
    Op,
    Response,
    ToolCall,
    ToolResult,
    checkpoint,
    emit,
    get,
    infer,
    limit,
    program,
    timeout,
    tool,
    update,
)
from op import Append as AppendOp
from op import Assign as AssignOp
from programs._propose import Change, Focus, focus, read_change
from programs.loop import echoed, tool_loop
from state import CRDTModel, GCounter, GSet, Log, LWWRegister

__all__ = ["CodeState", "CoderConfig", "CoderResult", "coder"]

WORK_TOOLS = ["read_file", "edit_file", "write_file", "search", "list_files", "run"]
"""The tools the model works with: few, since every one is in every prompt (``tools`` adds
others of the workspace's: ``delete_path``, ``git_status``, ``git_diff``)."""
WRITES = {"write_file", "edit_file", "delete_path"}


class CoderConfig(BaseModel):
    """What the Coder is asked to do, and within what limits."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    model: str | None = None
    #: the most tokens one model answer may have (default: the model's own cap)
    max_tokens: int | None = Field(default=None, ge=1)
    lint: list[str] | None = None
    build: list[str] | None = None
    test: list[str] | None = None
    init_budget: Budget = Budget(tool_calls=30, seconds=600)
    work_budget: Budget = Budget(tokens=400_000, model_calls=40, tool_calls=200)
    #: what the verify phase (its runs and the model's fixes) may spend, apart from the work
    verify_budget: Budget = Budget(tokens=400_000, model_calls=40, tool_calls=200)
    verify_retries: int = Field(default=3, ge=1)
    max_work_iterations: int = Field(default=20, ge=1)
    lint_timeout: float = 120.0
    build_timeout: float = 300.0
    test_timeout: float = 600.0
    stuck_repeats: int = Field(default=3, ge=2)
    #: the tools the model is offered
    tools: list[str] = Field(default_factory=lambda: list(WORK_TOOLS), min_length=1)
    #: run the tests before the work and show the model what failed, with the files it names
    show_failure: bool = True
    #: the most files shown with a failure (0: only its output)
    show_files: int = Field(default=3, ge=0)
    #: the most characters of a failure's output and files shown at once
    show_chars: int = Field(default=16_000, ge=1_000)
    #: how the work is asked of the model: ``tools``, a tool-calling loop; ``propose``, for
    #: small models: the functions the failing tests are about are shown with their line
    #: numbers, the model answers with the fixed code in a block, and each answer is tried
    #: against the tests and kept only when they pass (at most ``max_work_iterations``
    #: answers; without a failing test to try them on, the tool loop)
    work_mode: Literal["tools", "propose"] = "tools"
    #: what each ``propose`` answer after the first is also asked with: ``{"temperature":
    #: 0.7}`` draws other answers from a model that, greedy, gives the same one again
    propose_params: dict[str, Any] = Field(default_factory=dict)


class CodeState(CRDTModel):
    """What the Coder tracks: files it changed, errors it met, what it spent, the branch."""

    files_modified: GSet[str] = GSet()
    errors: Log[str] = Log()
    tokens: GCounter = GCounter()
    cost_micro_usd: GCounter = GCounter()
    #: model calls whose price is unknown: while any, the cost is unknown
    cost_unknown: GCounter = GCounter()
    branch: LWWRegister[str] = LWWRegister()


class CoderResult(BaseModel):
    """How the Coder ended: a commit, or the phase that failed and why."""

    ok: bool
    commit: str | None = None
    message: str | None = None
    phase: str | None = None
    reason: str | None = None
    #: the files the run changed and left changed: a failed run whose files were put back
    #: names none
    files: list[str] = []
    tokens: int = 0
    #: None when any model call had no known price
    cost_usd: float | None = 0.0


class _Failed(Exception):
    """A phase cannot go on; ``phase`` and the message say where and why."""

    def __init__(self, phase: str, reason: str) -> None:
        super().__init__(reason)
        self.phase = phase


class _GaveUp(_Failed):
    """A tool loop ended without the model finishing: stuck, or out of turns. It ends the work,
    or one verify retry."""


def _repository(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The Coder's workspace: the repository its config names."""
    config = args[0] if args else kwargs.get("config")
    if isinstance(config, CoderConfig):
        return config.repo
    if isinstance(config, dict) and isinstance(config.get("repo"), str):
        return str(config["repo"])
    repo = kwargs.get("repo")
    return repo if isinstance(repo, str) else None


@program(state=CodeState, workspace=_repository)
def coder(config: CoderConfig | dict[str, Any] | None = None, **fields: Any) -> Op[CoderResult]:
    """Make ``config.task`` true in ``config.repo``, verified and committed, or leave it as it was."""
    cfg = (
        config
        if isinstance(config, CoderConfig)
        else CoderConfig.model_validate({**(config or {}), **fields})
    )
    yield from emit("coder_start", {"task": cfg.task, "repo": cfg.repo})
    yield from checkpoint("before-init")
    baseline = ""
    phase = "init"
    try:
        outcome = yield from limit(cfg.init_budget, _init(cfg))
        if isinstance(outcome, Failure):
            raise _Failed("init", f"the init budget ran out ({outcome.failure().exceeded})")
        commands, baseline = outcome.unwrap()
        phase = "work"
        yield from checkpoint("before-work")
        worked = yield from limit(cfg.work_budget, _work(cfg, commands))
        if isinstance(worked, Failure):
            raise _Failed("work", f"the work budget ran out ({worked.failure().exceeded})")
        phase = "verify"
        yield from checkpoint("before-verify")
        verified = yield from limit(cfg.verify_budget, _verify(cfg, commands))
        if isinstance(verified, Failure):
            raise _Failed("verify", f"the verify budget ran out ({verified.failure().exceeded})")
        phase = "commit"
        yield from checkpoint("before-commit")
        sha, message = yield from _commit(cfg)
    except Exception as exc:
        # a phase that gave up, or an effect that failed under it (the model's provider, an
        # agent): either way the repository goes back to where the run found it
        failed = exc if isinstance(exc, _Failed) else _Failed(phase, f"{type(exc).__name__}: {exc}")
        yield from update(errors=AppendOp(f"{failed.phase}: {failed}"))
        reason, restored = str(failed), True
        if baseline:
            left = yield from _recover(baseline)
            if left is not None:
                reason, restored = f"{reason}; the files could not be put back: {left}", False
        return (yield from _result(False, restored=restored, phase=failed.phase, reason=reason))
    yield from emit("coder_complete", {"commit": sha})
    return (yield from _result(True, commit=sha, message=message))


def _result(ok: bool, *, restored: bool = False, **fields: Any) -> Op[CoderResult]:
    state = yield from get(CodeState)
    return CoderResult(
        ok=ok,
        files=[] if restored else state.files_modified.sorted(),
        tokens=state.tokens.value,
        # a single call without a price makes the total unknown, never a smaller number
        cost_usd=None if state.cost_unknown.value else state.cost_micro_usd.value / 1e6,
        **fields,
    )


def _ok(result: ToolResult, phase: str, what: str) -> str:
    if not result.ok:
        raise _Failed(phase, f"{what}: {result.error}")
    return result.output


# -- init -----------------------------------------------------------------------------------------


def _init(cfg: CoderConfig) -> Op[tuple[dict[str, list[str] | None], str]]:
    status = _ok((yield from tool("git_status")), "init", "git status failed")
    dirty = [line for line in status.splitlines()[1:] if line.strip()]
    if dirty:
        yield from emit("warning", {"uncommitted_changes": dirty[:20]})
    branch = _ok((yield from tool("current_branch")), "init", "cannot read the branch")
    yield from update(branch=AssignOp(branch))
    commands = yield from _commands(cfg)
    baseline = _ok(
        (yield from tool("snapshot_files", {"name": "coder/baseline"})), "init", "cannot snapshot"
    )
    if commands["build"]:
        built = yield from tool("run", {"command": commands["build"], "timeout": cfg.build_timeout})
        if not built.ok:
            raise _Failed(
                "init",
                f"the repository does not build before any change ({built.error}): {built.output[-2000:]}",
            )
    return commands, baseline


# compiles every Python file without writing anything: a build step for Python projects
_SYNTAX_CHECK = (
    "import pathlib, sys\n"
    "bad = 0\n"
    "for p in sorted(pathlib.Path('.').rglob('*.py')):\n"
    "    if any(part.startswith('.') or part in ('venv', 'node_modules') for part in p.parts):\n"
    "        continue\n"
    "    try:\n"
    "        compile(p.read_bytes(), str(p), 'exec')\n"
    "    except SyntaxError as exc:\n"
    "        print(f'{p}:{exc.lineno}: {exc.msg}')\n"
    "        bad += 1\n"
    "sys.exit(1 if bad else 0)\n"
)


def _commands(cfg: CoderConfig) -> Op[dict[str, list[str] | None]]:
    if cfg.test is not None:
        return {"lint": cfg.lint, "build": cfg.build, "test": cfg.test}
    listing = (yield from tool("list_files", {"path": "."})).output.splitlines()
    found: dict[str, list[str] | None]
    if "pyproject.toml" in listing:
        found = {
            "lint": ["python", "-m", "ruff", "check", "--fix", "."],
            "build": ["python", "-c", _SYNTAX_CHECK],
            "test": ["python", "-m", "pytest", "-q"],
        }
    elif "package.json" in listing:
        found = {"lint": None, "build": None, "test": ["npm", "test"]}
    elif (
        "Makefile" in listing
        and "test:" in (yield from tool("read_file", {"path": "Makefile"})).output
    ):
        found = {"lint": None, "build": None, "test": ["make", "test"]}
    else:
        raise _Failed(
            "init",
            "no test command given and none found (no pyproject.toml, package.json or Makefile with a test target)",
        )
    return {
        "lint": cfg.lint if cfg.lint is not None else found["lint"],
        "build": cfg.build if cfg.build is not None else found["build"],
        "test": found["test"],
    }


# -- work -----------------------------------------------------------------------------------------

SYSTEM = (
    "You fix code in a git repository by calling tools, one call at a time. The task comes "
    "with the failing tests' output and the files it names: read them before you change "
    "anything. Change a file with edit_file: old is whole lines copied exactly from the file, "
    "spaces included; new is what they become. Use write_file only for a new file. Change the "
    "code, not its tests, unless the task asks for it. When the change is made, answer with "
    "one line saying what you changed, and call no tool."
)

NOTHING_CHANGED = (
    "You have changed no file yet. If the task needs a change, make it now with edit_file "
    "(old copied exactly from the file, new what it becomes); if it needs none, say why in "
    "one line."
)
"""What the model is told, once, when it stops before changing any file."""


def _params(cfg: CoderConfig) -> dict[str, Any]:
    """What every model call of the Coder is given."""
    return {} if cfg.max_tokens is None else {"max_tokens": cfg.max_tokens}


def _charge(reply: Response) -> Op[None]:
    cost = reply.usage.cost_usd
    if cost is None:
        yield from update(tokens=Inc(reply.usage.total_tokens), cost_unknown=Inc(1))
    else:
        yield from update(tokens=Inc(reply.usage.total_tokens), cost_micro_usd=Inc(int(cost * 1e6)))


_CONTENT = {"write_file": "content", "edit_file": "new"}  # the argument that is a file's text


def _echo_refused(call: ToolCall, seen: Sequence[tuple[ToolCall, ToolResult]]) -> ToolResult | None:
    """A write whose text is an earlier tool's result (``wrote 38 characters to ...``, ``Result
    of read_file: ...``): refused, as the model's slip it is. Writing back a whole file as it
    was read changes nothing, and is let through."""
    field = _CONTENT.get(call.name)
    text = call.arguments.get(field) if field else None
    if not isinstance(text, str):
        return None
    earlier = [
        (c, r)
        for c, r in seen
        if not (
            call.name == "write_file"
            and c.name == "read_file"
            and c.arguments.get("path") == call.arguments.get("path")
            and set(c.arguments) == {"path"}
        )
    ]
    source = echoed(text, earlier)
    if source is None:
        return None
    return ToolResult.failure(
        f"refused: {field} is the result of an earlier {source.name} call, not the file's new "
        f"text; nothing was written. Give {field} as the text the file should hold."
    )


def _tool_loop(cfg: CoderConfig, history: list[Message], phase: str, iterations: int) -> Op[str]:
    """Let the model work with the tools until it stops calling them (``tool_loop``, with the
    Coder's rules as hooks: cost charged, written files noted, a write of a tool's result
    refused, a stuck loop stopped, a checkpoint after a turn whose tools failed), asking it
    once to make its change if it stops before it made any."""
    last: list[str] = []
    seen: list[tuple[ToolCall, ToolResult]] = []
    steps: list[Response] = []

    def noted(call: ToolCall, result: ToolResult) -> Op[None] | None:
        seen.append((call, result))
        last.append(
            f"{call.name} {sorted(call.arguments.items())} -> {result.ok} {result.output[:200]} {result.error}"
        )
        if call.name in WRITES and result.ok and isinstance(call.arguments.get("path"), str):
            return update(files_modified=Add(call.arguments["path"]))
        return None

    def charged(reply: Response) -> Op[None]:
        steps.append(reply)
        return _charge(reply)

    def judged(step: int, calls: Sequence[tuple[ToolCall, ToolResult]]) -> Op[None] | None:
        if len(last) >= cfg.stuck_repeats and len(set(last[-cfg.stuck_repeats :])) == 1:
            raise _GaveUp(
                phase,
                f"stuck: the same tool call with the same result {cfg.stuck_repeats} times in a row",
            )
        if phase == "work" and not all(result.ok for _, result in calls):
            return checkpoint(f"work-blocked-{len(steps) - 1}")
        return None

    def exhausted(_: int) -> None:
        raise _GaveUp(
            phase,
            f"the model had not finished (still calling tools, or cut off) after {len(steps)} turns",
        )

    asked = False
    while True:
        reply, history = yield from tool_loop(
            history,
            tools=cfg.tools,
            max_steps=iterations - len(steps),
            model=cfg.model,
            on_reply=charged,
            on_result=noted,
            on_turn=judged,
            on_max_steps=exhausted,
            on_call=lambda call: _echo_refused(call, seen),
            params=_params(cfg),
        )
        wrote = any(c.name in WRITES and r.ok for c, r in seen)
        if wrote or asked or len(steps) >= iterations:
            return reply.text
        asked = True
        history.append(Message.user(NOTHING_CHANGED))


def _work(cfg: CoderConfig, commands: dict[str, list[str] | None]) -> Op[str]:
    task = f"Task: {cfg.task}"
    test = commands["test"]
    if (cfg.show_failure or cfg.work_mode == "propose") and test:
        ran = yield from _run_step(cfg, "test", test, cfg.test_timeout)
        failed = ran[1]
        if cfg.work_mode == "propose" and failed is not None and not failed.ok:
            proposed = yield from _propose(cfg, test, failed)
            if proposed is not None:
                return proposed
        if cfg.work_mode == "propose":
            yield from emit(
                "warning",
                {"propose": "no failing test names a function to show: the tool loop instead"},
            )
        task += "\n\n" + (yield from _brief(cfg, "test", ran))
    history = [Message.system(SYSTEM), Message.user(task)]
    return (yield from _tool_loop(cfg, history, "work", cfg.max_work_iterations))


# -- propose: the fixed code in a block, tried against the tests ------------------------------------

PROPOSE_SYSTEM = "You fix bugs in code. The tests decide whether a fix is right."

PROPOSE_ASK = (
    "Find the line that causes the failure. Say in one sentence what goes wrong, then write "
    '"Line N:" (N its number) and the line as it should read in a ```python block (several '
    "lines, or the whole function, if the fix needs them)."
)


def _propose(cfg: CoderConfig, test: list[str], failed: ToolResult) -> Op[str | None]:
    """Ask for the fixed code, at most ``max_work_iterations`` times, trying each answer
    against the tests and putting the file back when they still fail; what was changed, once
    they pass. None when the failure names no function to show; ``_GaveUp`` when no answer
    made the tests pass."""
    shown = yield from _focused(cfg, failed)
    if not shown:
        return None
    output = failed.output[-min(len(failed.output), cfg.show_chars // 4) :].strip()
    code = "\n\n".join(
        f"The code in {f.path} (line numbers on the left):\n```\n{f.shown()}\n```" for f in shown
    )
    asked = f"Task: {cfg.task}\n\nThe tests fail:\n```\n{output}\n```\n\n{code}\n\n{PROPOSE_ASK}"
    tried: dict[str, tuple[str, int]] = {}  # a change (or a fault), how it failed, how often
    for turn in range(cfg.max_work_iterations):
        text = asked
        if tried:
            text += "\n\nTried already, and the tests still fail (give another fix):\n" + "\n".join(
                f"- {note}" + (f" (answered {n} times)" if n > 1 else "")
                for note, n in list(tried.values())[-8:]
            )
        params = _params(cfg) | (cfg.propose_params if turn else {})
        reply = yield from infer(
            [Message.system(PROPOSE_SYSTEM), Message.user(text)], model=cfg.model, **params
        )
        yield from _charge(reply)
        change = read_change(reply.text, shown)
        if isinstance(change, str):
            key, note = change, f"an answer in which {change}"
        else:
            source = next(f.text for f in shown if f.path == change.path)
            key = repr((change.path, change.start, change.end, change.new))
            note = change.said(source)
            if key not in tried:
                outcome = yield from _tried(cfg, test, change, source)
                if outcome is None:
                    yield from update(files_modified=Add(change.path))
                    yield from emit("proposed", {"turn": turn + 1, "change": note})
                    return f"{note} in {change.path}"
                note = f"{note}: {outcome}"
        note, n = tried.pop(key, (note, 0))
        tried[key] = (note, n + 1)  # the latest last
        yield from emit("proposal_failed", {"turn": turn + 1, "why": note})
    last = next(reversed(tried.values()))[0]
    raise _GaveUp(
        "work", f"none of the {cfg.max_work_iterations} answers made the tests pass (last: {last})"
    )


def _focused(cfg: CoderConfig, failed: ToolResult) -> Op[list[Focus]]:
    """The functions of the repository's code that the task and the failure name, file by
    file: the files the failure names, then the modules its tests import."""
    order, _, _ = yield from _failing_files(cfg, failed.output)
    words = f"{cfg.task}\n{failed.output}"
    room = cfg.show_chars // 2
    shown: list[Focus] = []
    for path in order[: max(cfg.show_files, 1)]:
        if not path.endswith(".py") or _is_test(path):
            continue
        read = yield from tool("read_file", {"path": path})
        # a file read with characters it could not decode would be written back damaged
        readable = read.ok and "\ufffd" not in read.output
        found = focus(path, read.output, words, room) if readable else None
        if found is not None:
            shown.append(found)
            room -= len(found.shown())
    return shown


_FIRST_ERROR = re.compile(r"^E +(\S.*)$", re.MULTILINE)


def _tried(cfg: CoderConfig, test: list[str], change: Change, source: str) -> Op[str | None]:
    """Make ``change`` and run the tests: None when they pass (the change is kept), else how
    they failed, the file put back as it was."""
    wrote = yield from tool("write_file", {"path": change.path, "content": change.applied(source)})
    if not wrote.ok:
        return f"it could not be written: {wrote.error}"
    summary, result = yield from _run_step(cfg, "test", test, cfg.test_timeout)
    if result is not None and result.ok:
        return None
    back = yield from tool("write_file", {"path": change.path, "content": source})
    if not back.ok:
        raise _Failed("work", f"cannot put {change.path} back after a failed try: {back.error}")
    if result is None:
        return summary
    first = _FIRST_ERROR.search(result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    return (first[1] if first else lines[-1] if lines else summary)[:300]


# -- what the model is shown of a failure ----------------------------------------------------------

# a file named with a line (pytest's ``path.py:12:``, a traceback's ``File "path.py", line 12``)
# or with a test (``path.py::test_x``); a path starts where a run of path characters does and
# is at most 255 of them, so a long run costs its length, not its square
_NAMED = re.compile(
    r'File "(?P<quoted>[^"]+)", line (?P<qline>\d+)'
    r"|(?<![\w./\\-])(?P<path>[\w./\\-]{0,255}[\w-]\.[A-Za-z]\w*)(?::(?P<line>\d+)|::)"
)
_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+(?P<dots>\.*)(?P<base>[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#]*)"
    r"|^[ \t]*import[ \t]+(?P<modules>[^\n#]*)",
    re.MULTILINE,
)
_DEFINITION = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+\w+")


def _is_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    parts = path.split("/")[:-1]
    return (
        name.startswith("test_")
        or name.endswith(("_test.py", ".test.js", ".spec.js"))
        or name == "conftest.py"
        or any(p in ("tests", "test") for p in parts)
    )


def _named_files(output: str, listing: set[str], repo: str) -> dict[str, list[int]]:
    """The repository's files a failure's output names, in the order it names them, with the
    lines it names in each."""
    root = repo.rstrip("/") + "/"
    named: dict[str, list[int]] = {}
    for match in _NAMED.finditer(output):
        path = (match["quoted"] or match["path"] or "").replace("\\", "/")
        line = match["qline"] or match["line"]
        path = path.removeprefix(root) if path.startswith(root) else path.removeprefix("./")
        if path in listing:
            lines = named.setdefault(path, [])
            if line and int(line) not in lines:
                lines.append(int(line))
    return named


def _imported(text: str, path: str, listing: set[str]) -> list[str]:
    """The repository's modules a Python file imports (``from lib import mod`` gives
    ``lib/mod.py`` before ``lib/__init__.py``)."""
    folder = path.rsplit("/", 1)[0] if "/" in path else ""
    found: list[str] = []
    for match in _IMPORT.finditer(text):
        if match["modules"] is not None:
            bases = [re.sub(r"\s+as\s+\w+", "", m).strip() for m in match["modules"].split(",")]
            names: list[str] = [""]
        else:
            bases = [match["base"]]
            words = re.sub(r"\s+as\s+\w+", "", match["names"])
            names = [w for w in re.split(r"[\s,()]+", words) if w and w != "*"] + [""]
        for base in bases:
            stem = base.replace(".", "/")
            if match["dots"]:
                up = folder.split("/")[: max(0, len(folder.split("/")) - len(match["dots"]) + 1)]
                stem = "/".join([p for p in up if p] + ([stem] if stem else []))
            for name in names:
                module = "/".join(p for p in (stem, name) if p)
                for candidate in (f"{module}.py", f"{module}/__init__.py"):
                    for where in (candidate, f"src/{candidate}"):
                        if where in listing and where not in found and where != path:
                            found.append(where)
    return found


def _excerpt(text: str, lines: list[int], room: int) -> str:
    """As much of a file as ``room`` holds: the whole, or the parts around the lines a failure
    names, or the lines that define its functions and classes."""
    if len(text) <= room:
        return text
    all_lines = text.splitlines()
    wanted = sorted(
        {n for line in lines for n in range(line - 12, line + 13) if 1 <= n <= len(all_lines)}
    )
    parts: list[str] = []
    if wanted:
        start = previous = wanted[0]
        for n in [*wanted[1:], 0]:
            if n != previous + 1:
                parts.append(
                    f"(lines {start}-{previous})\n" + "\n".join(all_lines[start - 1 : previous])
                )
                start = n
            previous = n
    else:
        parts.append(
            "(its definitions, by line)\n"
            + "\n".join(
                f"{i}: {line.strip()}"
                for i, line in enumerate(all_lines, 1)
                if _DEFINITION.match(line)
            )
        )
    shown = "\n".join(parts)
    if len(shown) > room:
        shown = shown[:room].rsplit("\n", 1)[0]
    return (
        f"{shown}\n({len(all_lines)} lines in all; read the others with read_file, "
        "start_line and end_line)"
    )


def _failing_files(
    cfg: CoderConfig, output: str
) -> Op[tuple[list[str], dict[str, list[int]], dict[str, str]]]:
    """The repository's code a failure's ``output`` is about (the files it names, then the
    modules its failing tests import), the files it names with their lines, and the failing
    tests' text as read."""
    listing = set((yield from tool("list_files", {"path": "."})).output.splitlines())
    named = _named_files(output, listing, cfg.repo)
    code = [p for p in named if not _is_test(p)]
    tests = [p for p in named if _is_test(p)]
    contents: dict[str, str] = {}
    for path in tests:
        read = yield from tool("read_file", {"path": path})
        if read.ok:
            contents[path] = read.output
            code += [m for m in _imported(read.output, path, listing) if m not in code]
    return code, named, contents


def _brief(cfg: CoderConfig, step: str, ran: tuple[str, ToolResult | None]) -> Op[str]:
    """What the model is shown of how a step ended: its output, and the files the output
    names (read through ``read_file``: the model has read them), with the modules a failing
    test imports, at most ``show_files`` of them in ``show_chars`` characters."""
    summary, result = ran
    if result is None or result.ok:
        return f"The {step} step: {summary}."
    room = cfg.show_chars
    output = result.output[-min(len(result.output), room // 3) :]
    text = f"The {step} step failed ({result.error}):\n```\n{output.strip()}\n```"
    room -= len(text)
    if not cfg.show_files:
        return text
    code, named, contents = yield from _failing_files(cfg, result.output)
    order = code + [p for p in named if _is_test(p)]
    shown = 0
    for path in order:
        if shown >= cfg.show_files or room < 500:
            break
        if path not in contents:
            read = yield from tool("read_file", {"path": path})
            if not read.ok:
                continue
            contents[path] = read.output
        if not contents[path].strip():
            continue
        part = f"\n\n{path}:\n```\n{_excerpt(contents[path].rstrip(), named.get(path, []), room - len(path) - 20)}\n```"
        text += part
        room -= len(part)
        shown += 1
    return text


def _run_step(
    cfg: CoderConfig, name: str, command: list[str], seconds: float
) -> Op[tuple[str, ToolResult | None]]:
    """Run one step under its timeout: a summary, and its result (None: it timed out)."""
    outcome = yield from timeout(seconds + 5, tool("run", {"command": command, "timeout": seconds}))
    if isinstance(outcome, Failure):
        return f"{name} timed out after {seconds:g}s", None
    result = outcome.unwrap()
    return (f"{name} failed ({result.error})" if not result.ok else "it passes"), result


# -- verify ---------------------------------------------------------------------------------------


def _verify(cfg: CoderConfig, commands: dict[str, list[str] | None]) -> Op[None]:
    steps = [
        ("lint", commands["lint"], cfg.lint_timeout),
        ("build", commands["build"], cfg.build_timeout),
        ("test", commands["test"], cfg.test_timeout),
    ]
    for attempt in range(1, cfg.verify_retries + 1):
        failure: tuple[str, str, tuple[str, ToolResult | None]] | None = None
        for name, command, seconds in steps:
            if not command:
                continue
            summary, result = yield from _run_step(cfg, name, command, seconds)
            if result is None:
                failure = (name, summary, (summary, result))
                break
            if not result.ok and (
                "not an allowed command" in (result.error or "")
                or "No module named" in result.output
            ):
                if name == "lint" and cfg.lint is None:
                    # a lint step the Coder chose itself is optional: skip it, and say so
                    yield from emit(
                        "warning",
                        {"lint_skipped": f"{result.error} {result.output[-300:]}".strip()},
                    )
                    steps = [s for s in steps if s[0] != "lint"]
                    continue
                raise _Failed(
                    "verify",
                    f"the {name} runner cannot run: {result.error} {result.output[-500:]}".strip(),
                )
            if not result.ok:
                failure = (name, summary, (summary, result))
                break
        if failure is None:
            yield from emit("verified", {"attempt": attempt})
            return
        name, summary, ran = failure
        yield from update(errors=AppendOp(summary))
        yield from emit("verify_failed", {"attempt": attempt, "step": name})
        if attempt == cfg.verify_retries:
            raise _Failed("verify", f"{summary} after {attempt} attempts")
        shown = yield from _brief(cfg, name, ran)
        history = [
            Message.system(SYSTEM),
            Message.user(
                f"Task: {cfg.task}\n\nThe change made so far does not pass. {shown}\n\n"
                "Fix it with the tools, then answer with one line."
            ),
        ]
        try:
            yield from _tool_loop(cfg, history, "verify", cfg.max_work_iterations)
        except _GaveUp as exc:
            # a fix that got stuck ends this retry; the next attempt verifies what it left
            yield from update(errors=AppendOp(f"verify retry {attempt}: {exc}"))
            yield from emit("verify_retry_ended", {"attempt": attempt, "reason": str(exc)})


# -- commit and recovery ---------------------------------------------------------------------------


def _commit(cfg: CoderConfig) -> Op[tuple[str, str]]:
    _ok((yield from tool("git_add", {})), "commit", "cannot stage")
    diff = _ok((yield from tool("git_diff", {"staged": True})), "commit", "cannot read the diff")
    if diff.strip() == "(no changes)":
        raise _Failed("commit", "nothing to commit: the work changed no file")
    reply = yield from infer(
        [
            Message.system(
                "Write a git commit message: a subject line under 72 characters, a blank line, then why."
            ),
            Message.user(f"Task: {cfg.task}\n\nDiff:\n{diff[:20000]}"),
        ],
        model=cfg.model,
        **_params(cfg),
    )
    yield from _charge(reply)
    # a message cut by max_tokens is still a message; the subject line is what counts
    message = reply.text.strip() or f"opdsl coder: {cfg.task[:60]}"
    sha = _ok((yield from tool("git_commit", {"message": message})), "commit", "the commit failed")
    return sha, message


def _recover(baseline: str) -> Op[str | None]:
    """Put the files back as init found them; None, or why they could not be."""
    yield from emit("recovery_start")
    restored = yield from tool("restore_files", {"tree": baseline})
    yield from emit("recovery_complete", {"ok": restored.ok, "error": restored.error})
    return None if restored.ok else restored.error or "restore_files failed"
