"""The Coder: init -> work -> verify -> commit, with a checkpoint at every phase boundary.

Written only against ``op`` and ``state``: it reaches the repository through the workspace
tools the interpreter binds (``run(coder, config, workspace=repo)``; the Coder names its
repository in its config, so ``opdsl run programs.coder:coder --arg repo=PATH`` binds it too).

- **init** (``before-init``, under ``init_budget``): git status (uncommitted changes are a
  warning, and are kept safe), the lint/build/test commands (given, or detected: a
  ``pyproject.toml`` gives ruff and pytest, a ``package.json`` ``npm test``, a ``Makefile``
  with a ``test`` target ``make test``), a snapshot of the files to recover to, and the build.
  A repository that does not build before the work starts is reported as such.
- **work** (``before-work``, under ``work_budget``): a tool-calling loop until the model stops
  calling tools, at most ``max_work_iterations`` model calls, stopping early when it is stuck
  (the same call with the same result ``stuck_repeats`` times in a row); a checkpoint
  ``work-blocked-N`` after an iteration whose tools failed. An answer cut by ``max_tokens``
  is never taken as done: the model is asked to go on (``programs.loop.tool_loop``).
- **verify** (``before-verify``): lint (with fix), build, test, each under its timeout; a failure
  goes back to the model with its output for a fix, up to ``verify_retries`` times. When a
  runner itself cannot run (not installed, not allowed) the loop stops instead of spinning;
  a lint step the Coder detected (not one given) is skipped instead, with a warning.
- **commit** (``before-commit``): stage, a message written by the model from the diff and the
  task, and a commit.
- **recovery** on every failure path: the files go back to the snapshot taken at init (the
  user's own uncommitted work included, untouched), and the result says which phase failed,
  why, and what was spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
from programs.loop import tool_loop
from state import CRDTModel, GCounter, GSet, Log, LWWRegister

__all__ = ["CodeState", "CoderConfig", "CoderResult", "coder"]

WORK_TOOLS = [
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "search",
    "delete_path",
    "run",
    "git_status",
    "git_diff",
]
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
    verify_retries: int = Field(default=3, ge=1)
    max_work_iterations: int = Field(default=20, ge=1)
    lint_timeout: float = 120.0
    build_timeout: float = 300.0
    test_timeout: float = 600.0
    stuck_repeats: int = Field(default=3, ge=2)


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
    files: list[str] = []
    tokens: int = 0
    #: None when any model call had no known price
    cost_usd: float | None = 0.0


class _Failed(Exception):
    """A phase cannot go on; ``phase`` and the message say where and why."""

    def __init__(self, phase: str, reason: str) -> None:
        super().__init__(reason)
        self.phase = phase


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
        worked = yield from limit(cfg.work_budget, _work(cfg))
        if isinstance(worked, Failure):
            raise _Failed("work", f"the work budget ran out ({worked.failure().exceeded})")
        phase = "verify"
        yield from checkpoint("before-verify")
        yield from _verify(cfg, commands)
        phase = "commit"
        yield from checkpoint("before-commit")
        sha, message = yield from _commit(cfg)
    except Exception as exc:
        # a phase that gave up, or an effect that failed under it (the model's provider, an
        # agent): either way the repository goes back to where the run found it
        failed = exc if isinstance(exc, _Failed) else _Failed(phase, f"{type(exc).__name__}: {exc}")
        yield from update(errors=AppendOp(f"{failed.phase}: {failed}"))
        if baseline:
            yield from _recover(baseline)
        return (yield from _result(False, phase=failed.phase, reason=str(failed)))
    yield from emit("coder_complete", {"commit": sha})
    return (yield from _result(True, commit=sha, message=message))


def _result(ok: bool, **fields: Any) -> Op[CoderResult]:
    state = yield from get(CodeState)
    return CoderResult(
        ok=ok,
        files=state.files_modified.sorted(),
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
    "You are a careful software engineer working in a git repository through tools. Read before "
    "you write, keep changes small, and run the tests with the run tool. When the task is done, "
    "answer with a one-line summary and call no tool."
)


def _params(cfg: CoderConfig) -> dict[str, Any]:
    """What every model call of the Coder is given."""
    return {} if cfg.max_tokens is None else {"max_tokens": cfg.max_tokens}


def _charge(reply: Response) -> Op[None]:
    cost = reply.usage.cost_usd
    if cost is None:
        yield from update(tokens=Inc(reply.usage.total_tokens), cost_unknown=Inc(1))
    else:
        yield from update(tokens=Inc(reply.usage.total_tokens), cost_micro_usd=Inc(int(cost * 1e6)))


def _tool_loop(cfg: CoderConfig, history: list[Message], phase: str, iterations: int) -> Op[str]:
    """Let the model work with the tools until it stops calling them (``tool_loop``, with the
    Coder's rules as hooks: cost charged, written files noted, a stuck loop stopped, a
    checkpoint after a turn whose tools failed)."""
    last: list[str] = []

    def noted(call: ToolCall, result: ToolResult) -> Op[None] | None:
        last.append(
            f"{call.name} {sorted(call.arguments.items())} -> {result.ok} {result.output[:200]} {result.error}"
        )
        if call.name in WRITES and result.ok and isinstance(call.arguments.get("path"), str):
            return update(files_modified=Add(call.arguments["path"]))
        return None

    def judged(step: int, calls: Sequence[tuple[ToolCall, ToolResult]]) -> Op[None] | None:
        if len(last) >= cfg.stuck_repeats and len(set(last[-cfg.stuck_repeats :])) == 1:
            raise _Failed(
                phase,
                f"stuck: the same tool call with the same result {cfg.stuck_repeats} times in a row",
            )
        if phase == "work" and not all(result.ok for _, result in calls):
            return checkpoint(f"work-blocked-{step - 1}")
        return None

    def exhausted(steps: int) -> None:
        raise _Failed(
            phase,
            f"the model had not finished (still calling tools, or cut off) after {steps} turns",
        )

    reply, _ = yield from tool_loop(
        history,
        tools=WORK_TOOLS,
        max_steps=iterations,
        model=cfg.model,
        on_reply=_charge,
        on_result=noted,
        on_turn=judged,
        on_max_steps=exhausted,
        params=_params(cfg),
    )
    return reply.text


def _work(cfg: CoderConfig) -> Op[str]:
    history = [Message.system(SYSTEM), Message.user(f"Task: {cfg.task}")]
    return (yield from _tool_loop(cfg, history, "work", cfg.max_work_iterations))


# -- verify ---------------------------------------------------------------------------------------


def _verify(cfg: CoderConfig, commands: dict[str, list[str] | None]) -> Op[None]:
    steps = [
        ("lint", commands["lint"], cfg.lint_timeout),
        ("build", commands["build"], cfg.build_timeout),
        ("test", commands["test"], cfg.test_timeout),
    ]
    for attempt in range(1, cfg.verify_retries + 1):
        failure = None
        for name, command, seconds in steps:
            if not command:
                continue
            outcome = yield from timeout(
                seconds + 5, tool("run", {"command": command, "timeout": seconds})
            )
            if isinstance(outcome, Failure):
                failure = (name, f"{name} timed out after {seconds:g}s", "")
                break
            result = outcome.unwrap()
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
                failure = (name, f"{name} failed ({result.error})", result.output[-4000:])
                break
        if failure is None:
            yield from emit("verified", {"attempt": attempt})
            return
        name, summary, output = failure
        yield from update(errors=AppendOp(summary))
        yield from emit("verify_failed", {"attempt": attempt, "step": name})
        if attempt == cfg.verify_retries:
            raise _Failed("verify", f"{summary} after {attempt} attempts")
        history = [
            Message.system(SYSTEM),
            Message.user(
                f"Task: {cfg.task}\nThe {name} step failed:\n{summary}\n{output}\nFix it with the tools, then answer with one line."
            ),
        ]
        yield from _tool_loop(cfg, history, "verify", cfg.max_work_iterations)


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


def _recover(baseline: str) -> Op[None]:
    yield from emit("recovery_start")
    restored = yield from tool("restore_files", {"tree": baseline})
    yield from emit("recovery_complete", {"ok": restored.ok, "error": restored.error})
