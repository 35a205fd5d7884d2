"""``opdsl mcp``: the director workflow as an MCP server a Claude Code session directs.

``opdsl mcp director`` serves, over stdio, the tools with which the session is the director
of :func:`programs.director.directed`: ``fsm_status``, ``fsm_to``, ``run_implementor`` and the
drafter's, validator's and unblocker's hand-overs (``handoff_draft``, ``handoff_verdict``,
``revise_step``). The workflow is one durable run (its id kept in ``.opdsl/director.json``):
each tool call answers the question the run waits on, the run performs that one move and
waits again, its question the move's reply. So every move is journaled; the session (or the
server) can end at any point and the next one goes on where the run was (a move cut off is
performed again as any resumed run's effects are); ``opdsl show``, ``tail`` and ``report``
work on it as on any run. The implementor's backend and model are chosen when the workflow
starts (``--implementor``, ``--model``, or ``OPDSL_IMPLEMENTOR``, ``OPDSL_MODEL``) and kept
in its run; no tool changes them.

``opdsl mcp install`` writes what Claude Code needs for it in the project (its
``.mcp.json``, ``.claude/``; a value the user set there is kept) and ``opdsl mcp uninstall``
takes exactly what it added out again (as ``.opdsl/mcp-install.json`` records it);
``--dry-run`` prints what either would write. ``opdsl mcp status`` prints one line on a
workflow in progress (the SessionStart hook's), ``opdsl mcp director --abandon`` ends it and
puts the files back as they were when it started.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from interpreters.cli._command import Command, Option, UsageError

__all__ = ["MCP", "Director"]

SERVER_NAME = "opdsl-director"
POINTER = Path(".opdsl") / "director.json"
"""Where the workflow in progress is named (its run id and implementor), in the project."""
PROGRAM = "programs.director:directed"

TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "fsm_status": (
        "Where the workflow is: state, step, attempts, fixes, the plan's hash, the "
        "implementor (backend:model), the mode, the run id and the moves allowed next.",
        {"type": "object", "properties": {}},
    ),
    "fsm_to": (
        "Move the workflow to STATE, checked against its table (a refused move changes "
        "nothing and says why). PLAN -> DRAFT takes the plan the user approved (plan: "
        '{"goal", "steps": [{"goal", "files", "test"}]}); BUFFER -> PLAN a reason (a plan '
        "defect); VALIDATE -> DONE or BUFFER follows the validator's verdict.",
        {
            "type": "object",
            "properties": {
                "state": {"type": "string", "enum": ["PLAN", "DRAFT", "BUFFER", "DONE"]},
                "plan": {"type": "object"},
                "reason": {"type": "string"},
            },
            "required": ["state"],
        },
    ),
    "run_implementor": (
        "Hand over to the implementor (BUFFER -> IMPLEMENT) and wait for it: all remaining "
        "steps (progressive) or the one at the pointer (direct). Returns one HANDOFF line. "
        "guidance: the user's words, when the workflow halted for them.",
        {"type": "object", "properties": {"guidance": {"type": "string"}}},
    ),
    "handoff_draft": (
        "The drafter's hand-over in DRAFT: its summary for the implementor (written to "
        "handoff/draft.md) and the test files it wrote (locked at BUFFER).",
        {
            "type": "object",
            "properties": {
                "summary": {"type": "string"},
                "tests": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["summary", "tests"],
        },
    ),
    "handoff_verdict": (
        "The validator's verdict in VALIDATE (written to handoff/validate.md): a line "
        "'PASS run=K' or 'FAIL step=N run=K', K the validation run fsm_status gives.",
        {
            "type": "object",
            "properties": {"verdict": {"type": "string"}},
            "required": ["verdict"],
        },
    ),
    "revise_step": (
        "The unblocker's fix in BUFFER of the step that failed: the step revised "
        '({"goal", "files", "test"}).',
        {"type": "object", "properties": {"step": {"type": "object"}}, "required": ["step"]},
    ),
}
"""The server's tools: name, what the session is told of it, its input schema."""

MOVE_OF = {
    "fsm_status": "status",
    "fsm_to": "to",
    "run_implementor": "run_implementor",
    "handoff_draft": "handoff_draft",
    "handoff_verdict": "handoff_verdict",
    "revise_step": "revise_step",
}


class Director:
    """The workflow in progress in ``root`` (one durable run), moved one move at a time."""

    def __init__(
        self,
        root: Path,
        db: str | None,
        implementor: str | None = None,
        model: str | None = None,
        mode: str = "progressive",
    ) -> None:
        self.root = root
        self.db = db or os.environ.get("OPDSL_DB") or str(root / ".opdsl" / "runs.db")
        self.implementor = implementor or os.environ.get("OPDSL_IMPLEMENTOR") or "model"
        self.model = model or os.environ.get("OPDSL_MODEL") or None
        self.mode = mode
        if self.implementor not in ("model", "claude-code"):
            raise UsageError(
                f"--implementor {self.implementor!r} is not a backend (model, claude-code)"
            )

    @property
    def pointer(self) -> Path:
        return self.root / POINTER

    def current(self) -> dict[str, Any] | None:
        """The workflow in progress, as ``.opdsl/director.json`` names it (None: none)."""
        try:
            named = json.loads(self.pointer.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise UsageError(f"{self.pointer} is not JSON ({exc}); remove it") from None
        return named if isinstance(named, dict) and "run_id" in named else None

    def start(self) -> str:
        """The workflow's run: the one in progress, else a new one (its first reply)."""
        from interpreters import SqliteJournal, run
        from interpreters.journal._seal import SealKeyError, seal_key
        from programs.director import TOOLS as DIRECTOR_TOOLS
        from programs.director import directed

        named = self.current()
        if named is not None:
            return str(named["run_id"])
        try:  # every move resumes the run by the names it holds: it must be sealed as yours
            seal_key()
        except SealKeyError as exc:
            raise UsageError(f"the workflow cannot start: {exc}") from None
        kwargs: dict[str, Any] = {"mode": self.mode, "implementor": self.implementor}
        # on the model backend the run's own model implements; ``model`` names it either way
        model_spec = self.model if self.implementor == "model" else None
        if self.model:
            kwargs["model"] = self.model
        Path(self.db).parent.mkdir(parents=True, exist_ok=True)
        result = run(
            directed,
            kwargs=kwargs,
            model=model_spec,
            tools=DIRECTOR_TOOLS,
            workspace=str(self.root),
            db=SqliteJournal(self.db),
            tool_refs=["programs.director:TOOLS"],
        )
        if result.status != "waiting":
            raise UsageError(f"the workflow could not start: {result.describe()}")
        self.pointer.parent.mkdir(parents=True, exist_ok=True)
        implementor = f"{self.implementor}:{self.model or 'default'}"
        self.pointer.write_text(
            json.dumps({"run_id": result.run_id, "implementor": implementor}) + "\n"
        )
        return result.run_id

    def move(self, move: dict[str, Any]) -> str:
        """Perform one move on the workflow's run; its reply (``REFUSED: ...`` when refused)."""
        from interpreters import SqliteJournal, resume

        run_id = self.start()
        journal = SqliteJournal(self.db)
        record = journal.run(run_id)
        if record.status == "completed":
            self.pointer.unlink(missing_ok=True)
            return f"the workflow {run_id} has ended; call fsm_status to start a new one"
        answer = json.dumps(move) if record.status == "waiting" else None
        # a run cut off mid-move (its server ended) goes on from where it was, first
        result = resume(run_id, db=journal, answer=answer)
        if answer is None and result.status == "waiting":
            result = resume(run_id, db=journal, answer=json.dumps(move))
        if result.status == "waiting":
            reply = result.question or ""
            return reply + (f" run={run_id}" if reply.startswith("state=") else "")
        if result.status == "completed":
            self.pointer.unlink(missing_ok=True)
            return str(result.value)
        return f"FAILED: {result.describe()}"


def director(a: argparse.Namespace) -> int:
    d = Director(Path.cwd(), a.db, a.implementor, a.model, a.mode)
    if a.abandon:
        if d.current() is None:
            print("opdsl: no workflow is in progress here", file=sys.stderr)
            return 1
        print(d.move({"move": "abandon"}))
        return 0
    serve(d)
    return 0


def serve(d: Director) -> None:
    """Serve the director's tools on stdin/stdout until the session ends."""
    try:
        import anyio
        import mcp_types as types
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server
    except ImportError as exc:
        raise UsageError(
            f"opdsl mcp needs the mcp package (pip install 'opdsl[mcp]'): {exc}"
        ) from None

    tools = [
        types.Tool(name=name, description=text, input_schema=schema)
        for name, (text, schema) in TOOLS.items()
    ]
    lock = anyio.Lock()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name not in MOVE_OF:
            text = f"REFUSED: no tool named {params.name!r}"
        elif undeclared := sorted(set(arguments) - set(TOOLS[params.name][1]["properties"])):
            text = (
                f"REFUSED: {params.name} takes no argument {undeclared[0]!r}; nothing was changed"
            )
        else:
            # the move last: no argument names another move
            move = {**arguments, "move": MOVE_OF[params.name]}
            async with lock:  # one move at a time
                try:
                    text = await anyio.to_thread.run_sync(d.move, move)
                except Exception as exc:  # the session is told; the server goes on
                    text = f"FAILED: {type(exc).__name__}: {exc}"
        failed = text.startswith(("REFUSED", "FAILED"))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )

    server: Any = Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def status(a: argparse.Namespace) -> int:
    """One line on the workflow in progress (what the SessionStart hook says), or nothing."""
    d = Director(Path.cwd(), a.db)
    named = d.current()
    if named is not None:
        print(
            f"A director workflow is in progress here (run {named['run_id']}, implementor "
            f"{named['implementor']}): call the {SERVER_NAME} server's fsm_status to go on."
        )
    return 0


def mcp_command(a: argparse.Namespace) -> int:
    if a.action == "director":
        return director(a)
    if a.action == "status":
        return status(a)
    if a.abandon:
        raise UsageError("--abandon ends a workflow: opdsl mcp director --abandon")
    if a.action == "uninstall":
        return uninstall(Path.cwd(), dry_run=a.dry_run)
    return install(Path.cwd(), dry_run=a.dry_run, server_args=_server_args(a))


def _server_args(a: argparse.Namespace) -> list[str]:
    """The options install was given for the director, as its server's command line takes
    them (the implementor checked here, before anything is written)."""
    args: list[str] = []
    if a.db:
        args += ["--db", a.db]
    if a.implementor:
        Director(Path.cwd(), a.db, a.implementor)  # refuses one that is not a backend
        args += ["--implementor", a.implementor]
    if a.model:
        args += ["--model", a.model]
    if a.mode != "progressive":
        args += ["--mode", a.mode]
    return args


# -- install / uninstall ----------------------------------------------------------------------

TOOL_TIMEOUT_MS = "14400000"
"""``MCP_TOOL_TIMEOUT`` (ms): run_implementor() blocks while the implementor works (4 hours)."""

PROMPTS: dict[str, str] = {
    ".claude/commands/agent.md": (
        "---\ndescription: Run the director/implementor workflow on a goal\n---\n"
        "You are the director of the opdsl director workflow for this goal: $ARGUMENTS\n\n"
        f"Its state machine is enforced by the {SERVER_NAME} MCP server; call fsm_status first "
        "(a workflow may be in progress: go on from where it is).\n"
        "1. PLAN: talk the plan through with the user: numbered small steps, each with its "
        "files and a test command. When the user replies APPROVE, call fsm_to(state='DRAFT', "
        "plan={goal, steps:[{goal, files, test}]}).\n"
        "2. DRAFT: have the drafter subagent write the tests and call handoff_draft; then "
        "fsm_to(state='BUFFER').\n"
        "3. BUFFER: call run_implementor() and wait for its HANDOFF line. If a step failed, "
        "have the unblocker subagent revise it (revise_step), then run_implementor() again; "
        "if it halted for the user (user_guided=true), ask them and pass guidance=....\n"
        "4. VALIDATE: have the validator subagent check the whole change and call "
        "handoff_verdict; then fsm_to DONE (PASS) or BUFFER (FAIL, or steps left).\n"
        "Never change handoff/ or the locked tests yourself.\n"
    ),
    ".claude/agents/drafter.md": (
        "---\nname: drafter\ndescription: Writes the tests and the implementor's summary for "
        "an approved plan\n---\nYou are the drafter. Read the plan in handoff/plan.json. Write "
        "the tests its steps need (files whose names hold 'test'); do not implement the steps. "
        f"Then call the {SERVER_NAME} server's handoff_draft with a summary for the implementor "
        "and the test files you wrote.\n"
    ),
    ".claude/agents/unblocker.md": (
        "---\nname: unblocker\ndescription: Revises a step of the plan that failed\n---\n"
        "You are the unblocker. A step of the plan in handoff/plan.json failed; the HANDOFF "
        "line says why. Revise the step so that it can be done, and call the "
        f"{SERVER_NAME} server's revise_step with it ({{goal, files, test}}).\n"
    ),
    ".claude/agents/validator.md": (
        "---\nname: validator\ndescription: Checks the whole change against the plan\n---\n"
        "You are the validator. Check that the change meets the goal in handoff/plan.json and "
        "run the tests. Call the "
        f"{SERVER_NAME} server's handoff_verdict with one line: 'PASS run=K' or "
        "'FAIL step=N run=K', K the validation run fsm_status gives.\n"
    ),
}
"""The /agent command and the three subagents' prompts, by their paths in the project."""


def _entries(server_args: list[str] | None = None) -> dict[str, Any]:
    """What install merges into Claude Code's settings files, by path; ``server_args``: the
    director's options, on its server's command line."""
    python = sys.executable
    allow = [f"mcp__{SERVER_NAME}__{name}" for name in TOOLS]
    hook = shlex.quote(python)  # the hook is run by a shell: a path is one word, as it is
    return {
        ".mcp.json": {
            "mcpServers": {
                SERVER_NAME: {
                    "type": "stdio",
                    "command": python,
                    "args": ["-m", "interpreters", "mcp", "director", *(server_args or [])],
                }
            }
        },
        ".claude/settings.json": {
            "env": {"MCP_TOOL_TIMEOUT": TOOL_TIMEOUT_MS},
            "permissions": {"allow": allow},
            "enabledMcpjsonServers": [SERVER_NAME],
            "hooks": {
                "SessionStart": [
                    {
                        "hooks": [
                            {"type": "command", "command": f"{hook} -m interpreters mcp status"}
                        ]
                    }
                ]
            },
        },
    }


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON ({exc}); nothing was written") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a JSON object; nothing was written")
    return data


RECORD = Path(".opdsl") / "mcp-install.json"
"""What install added to each settings file (and only that), for uninstall to take out."""


def _merge(into: Any, extra: Any) -> Any:
    """``extra`` merged into ``into``: keys and list items added; a value set is kept."""
    if isinstance(into, dict) and isinstance(extra, dict):
        out = dict(into)
        for k, v in extra.items():
            out[k] = _merge(into.get(k), v) if k in into else v
        return out
    if isinstance(into, list) and isinstance(extra, list):
        return into + [v for v in extra if v not in into]
    if into is None or isinstance(into, dict | list) or isinstance(extra, dict | list):
        return extra  # nothing set, or not the kind of value Claude Code reads there
    return into  # the user's own (MCP_TOOL_TIMEOUT): kept


def _added(before: Any, after: Any) -> Any:
    """What ``after`` holds that ``before`` does not (None: nothing)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = {}
        for k, v in after.items():
            new = _added(before[k], v) if k in before else v
            if new not in ({}, [], None):
                out[k] = new
        return out
    if isinstance(before, list) and isinstance(after, list):
        return [v for v in after if v not in before]
    return None if before == after else after


def _unmerge(into: Any, extra: Any) -> Any:
    if isinstance(into, dict) and isinstance(extra, dict):
        out = dict(into)
        for k, v in extra.items():
            if k in out:
                kept = _unmerge(out[k], v)
                if kept in ({}, [], None):
                    del out[k]
                else:
                    out[k] = kept
        return out
    if isinstance(into, list) and isinstance(extra, list):
        return [v for v in into if v not in extra]
    return None if into == extra else into


def _server_entry(data: dict[str, Any]) -> Any:
    servers = data.get("mcpServers")
    return servers.get(SERVER_NAME) if isinstance(servers, dict) else None


def install(root: Path, *, dry_run: bool = False, server_args: list[str] | None = None) -> int:
    """Write the /agent command, the subagents, the server's registration (its command line
    with ``server_args``) and the settings it needs into the project's Claude Code files;
    list every file written."""
    plans: list[tuple[Path, str]] = []
    record = _read_json(root / RECORD).get("added")
    added: dict[str, Any] = record if isinstance(record, dict) else {}
    for rel, entry in _entries(server_args).items():
        path = root / rel
        before = _read_json(path)
        merged = _merge(before, entry)
        if rel == ".mcp.json":  # the server's registration is opdsl's: replaced, not merged
            merged["mcpServers"][SERVER_NAME] = _server_entry(entry)
        # what was added before, and what is added now: never what the user had
        added[rel] = _merge(added.get(rel) or {}, _added(before, merged))
        plans.append((path, json.dumps(merged, indent=2) + "\n"))
    for rel, text in PROMPTS.items():
        path = root / rel
        if path.exists() and path.read_text() != text:
            raise UsageError(f"{path} exists and is not opdsl's; nothing was written")
        plans.append((path, text))
    plans.append((root / RECORD, json.dumps({"added": added}, indent=2) + "\n"))
    for path, text in plans:
        if dry_run:
            print(f"would write {path}:\n{text}")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


def uninstall(root: Path, *, dry_run: bool = False) -> int:
    """Take out exactly what :func:`install` put in, as its record says (a settings file left
    empty is removed; a prompt file changed since is left, and said)."""
    record = _read_json(root / RECORD).get("added")
    for rel, entry in _entries().items():
        path = root / rel
        if not path.exists():
            continue
        data = _read_json(path)
        if isinstance(record, dict):  # else installed before records were kept: all of entry
            entry = record.get(rel) or {}
        if rel == ".mcp.json" and _server_entry(data) is not None:
            # the server's registration goes whole, whatever options it was installed with
            entry = {"mcpServers": {SERVER_NAME: _server_entry(data)}}
        kept = _unmerge(data, entry)
        if dry_run:
            print(f"would {'remove' if not kept else 'rewrite'} {path}")
        elif kept:
            path.write_text(json.dumps(kept, indent=2) + "\n")
            print(f"rewrote {path}")
        else:
            path.unlink()
            print(f"removed {path}")
    for rel, text in PROMPTS.items():
        path = root / rel
        if not path.exists():
            continue
        if path.read_text() != text:
            print(f"left {path}: it was changed since opdsl wrote it")
        elif dry_run:
            print(f"would remove {path}")
        else:
            path.unlink()
            print(f"removed {path}")
    if (root / RECORD).exists():
        if dry_run:
            print(f"would remove {root / RECORD}")
        else:
            (root / RECORD).unlink()
            print(f"removed {root / RECORD}")
    return 0


MCP = Command(
    name="mcp",
    help="the director workflow as an MCP server for Claude Code: opdsl mcp director|install|uninstall",
    run=mcp_command,
    options=(
        Option("action", choices=("director", "install", "uninstall", "status")),
        Option("--implementor", help="model or claude-code (default: $OPDSL_IMPLEMENTOR, model)"),
        Option("--model", help="the implementor's model (default: $OPDSL_MODEL)"),
        Option("--mode", choices=("progressive", "direct"), default="progressive"),
        Option("--abandon", action="store_true", help="end the workflow, files put back"),
        Option("--dry-run", action="store_true", help="install/uninstall: print, write nothing"),
    ),
)
