"""Coding agents as backends of the ``agent`` effect: Claude Code, Codex, and ``noop``.

The turn contract every backend keeps, on every exit path:

- exactly one ``AgentStart`` (emitted at spawn, before any output) and one ``AgentEnd``;
- a ``TurnStart``/``TurnEnd`` pair per inner turn where the backend exposes turns;
- ``ToolStart``/``ToolEnd`` per tool call, paired by id; a tool still open at the end is
  closed as ``unresolved``;
- fail closed: the agent's ``init`` is checked before it acts; a different model, a tool or
  MCP server that was not allowed, or no ``init`` at all kills the process;
- a hard timeout and an idle timeout (no output for N seconds) kill the whole process group;
  an exit without a final event, a malformed line or a line over 1 MiB end the turn as crashed;
- a failed turn still yields its partial :class:`~op.TurnRecord` (``crashed=True``, the
  reason truncated for storage) inside :class:`AgentError`, whose ``kind`` says which of
  timeout, crash or refusal it was.

The journal records the whole record, so a replay never starts a process.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, final, runtime_checkable

from interpreters.agents._bridge import ToolHost
from interpreters.runtime._frame import Call
from interpreters.tools._process import run_process
from interpreters.tools._sandbox import SiblingsVisible, bwrap_argv, sandbox_problem
from op import Agent, ModelError, TurnRecord, Usage
from op.events import AgentEnd, AgentStart, ToolEnd, ToolStart, TurnEnd, TurnStart

__all__ = [
    "AgentError",
    "Backend",
    "CliBackend",
    "Refused",
    "Session",
    "Turn",
    "backends",
    "check_init",
    "register_backend",
]

MAX_LINE = 1 << 20
MAX_REASON = 2000


class AgentError(ModelError):
    """An agent turn failed; ``record`` is what it did before, ``kind`` why it ended."""

    def __init__(self, kind: Kind, record: TurnRecord) -> None:
        super().__init__(f"agent {record.backend} {kind}: {record.crash_reason}")
        self.kind = kind
        self.record = record


@dataclass
class Turn:
    """One turn of an agent CLI: what it has produced so far, and the contract's bookkeeping.

    A backend's :meth:`CliBackend.handle` reads each JSON line into it: ``text`` (the final
    answer), ``session_id``, ``usage_by_id`` or ``usage_total`` and ``cost``, ``finished``
    once the final event came (``error`` when it says the turn failed); ``init_seen`` once
    the CLI's first line (its ``init``) was checked. Its methods emit the events of the turn
    contract as they keep it: :meth:`open_turn` / :meth:`close_turn`, :meth:`tool_start` /
    :meth:`tool_end` (paired by id, a repeated start ignored), :meth:`close_all`.
    """

    call: Call
    backend: str
    text: str = ""
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    open_tools: list[str] = field(default_factory=list)
    turns: int = 0
    turn_open: bool = False
    usage_by_id: dict[str, Usage] = field(default_factory=dict)
    usage_total: Usage | None = None
    cost: float | None = None
    session_id: str | None = None
    finished: bool = False
    error: str | None = None
    #: the CLI's init line was seen and checked (a line before it fails the turn closed)
    init_seen: bool = False
    #: the tools opdsl serves this turn (their own names), when it serves any: the CLI must
    #: offer exactly these and nothing else
    served: frozenset[str] | None = None
    #: the CLI said the turn ran out of its ``max_turns`` (not a failure)
    max_turns_exhausted: bool = False
    #: the model the CLI says it runs (its init), when it says
    model: str | None = None
    #: tool calls finished so far: the steps opdsl counts against ``max_turns`` for a CLI
    #: that has no such option (:attr:`CliBackend.cli_max_turns`)
    steps: int = 0

    def emit(self, event: Any) -> None:
        if self.call.bus.active:
            self.call.bus.emit(event)

    def base(self) -> dict[str, Any]:
        return {
            "run_id": self.call.run_id,
            "at": self.call.clock.now(),
            "address": self.call.address,
        }

    def open_turn(self) -> None:
        if not self.turn_open:
            self.turns += 1
            self.turn_open = True
            self.emit(TurnStart(**self.base(), turn=self.turns))

    def close_turn(self) -> None:
        if self.turn_open:
            self.turn_open = False
            self.emit(TurnEnd(**self.base(), turn=self.turns))

    def tool_start(self, tool_id: str, name: str, arguments: Any) -> None:
        if tool_id in self.tools:
            return
        self.tools[tool_id] = {
            "id": tool_id,
            "name": name,
            "input": arguments,
            "status": "open",
            "output": "",
        }
        self.open_tools.append(tool_id)
        self.emit(ToolStart(**self.base(), tool_id=tool_id, name=name, input=arguments))

    def tool_end(self, tool_id: str, ok: bool, output: str) -> None:
        if tool_id not in self.open_tools:
            return
        self.open_tools.remove(tool_id)
        self.steps += 1
        status: Literal["ok", "error"] = "ok" if ok else "error"
        self.tools[tool_id].update(status=status, output=output[:4000])
        self.emit(ToolEnd(**self.base(), tool_id=tool_id, status=status, output=output[:4000]))

    def close_all(self) -> None:
        for tool_id in list(self.open_tools):
            self.open_tools.remove(tool_id)
            self.tools[tool_id]["status"] = "unresolved"
            self.emit(ToolEnd(**self.base(), tool_id=tool_id, status="unresolved"))
        self.close_turn()

    def usage(self) -> Usage:
        if self.usage_total is not None:
            base = self.usage_total
        else:
            base = Usage()
            for u in self.usage_by_id.values():
                base = base + u
        return base.model_copy(update={"cost_usd": self.cost})


@dataclass
class Session:
    """How one turn's process is started: its argv, environment additions and folder."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    #: the tools opdsl serves the CLI this turn (see :class:`Turn.served`)
    served: frozenset[str] | None = None
    #: what the CLI reads on its standard input (:meth:`CliBackend.stdin`)
    stdin: bytes | None = None
    #: the turn's private folder, removed if opdsl ends before the turn does
    private: str | None = None


class CliBackend(ABC):
    """A coding agent run as a subprocess that prints JSON lines."""

    name: ClassVar[str]
    command: ClassVar[str]
    #: whether the backend can be given opdsl's bound tools (``agent(..., tools=[...])``)
    serves_tools: ClassVar[bool] = False
    #: whether its turns say what they cost: one that does not (Codex) cannot be run under a
    #: ``usd`` budget, which is refused before it starts rather than kept as if it cost nothing
    reports_cost: ClassVar[bool] = True
    #: whether a cooperative stop (``stop=``) can end its turn at a message boundary, cleanly;
    #: arming one on a backend that does not declare it is refused
    supports_cooperative_stop: ClassVar[bool] = False
    #: whether ``agent(..., max_turns=N)`` is kept: a turn that runs out of it returns its
    #: record with ``max_turns_exhausted=True``
    supports_max_turns: ClassVar[bool] = True
    #: whether the CLI itself takes the cap (an option); when it does not, opdsl counts the
    #: turn's finished tool calls and ends it at the message boundary after the N-th
    cli_max_turns: ClassVar[bool] = False

    def __init__(
        self,
        *,
        executable: str | None = None,
        timeout: float = 1800.0,
        idle_timeout: float = 300.0,
        grace: float = 2.0,
        stop: Callable[[TurnRecord], bool] | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        confine: bool | None = None,
    ) -> None:
        if stop is not None and not self.supports_cooperative_stop:
            raise ModelError(
                f"the {self.name} backend does not support a cooperative stop "
                "(supports_cooperative_stop is False): its turn cannot be ended cleanly mid-way"
            )
        #: run the CLI inside bubblewrap (also ``agent(..., confine=True)``): it may write only
        #: its working folder and its own home; the network stays on (it talks to its model).
        #: None: the backend's default (:meth:`confined_by_default`)
        self.confine = confine
        self.extra_args = list(extra_args)
        self.executable = executable
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.grace = grace
        self.stop = stop
        self.env = dict(env or {})

    def find(self) -> str:
        exe = self.executable or shutil.which(self.command)
        if not exe or not os.access(exe, os.X_OK):
            raise ModelError(
                f"the {self.name} backend needs the `{self.command}` executable: it is not on PATH"
                + (f" (configured: {self.executable})" if self.executable else "")
            )
        return exe

    @abstractmethod
    def argv(self, exe: str, effect: Agent) -> list[str]: ...

    def stdin(self, effect: Agent) -> bytes | None:
        """What the CLI reads on its standard input (default: nothing). The built-in backends
        give it the prompt there, never on the command line, where a prompt that starts with
        ``-`` (``--settings={...}``, ``--config=...``, ``--version``) or names a subcommand
        (``resume``, ``update``) would be taken for one by the CLI's parser."""
        return None

    @asynccontextmanager
    async def session(
        self, exe: str, effect: Agent, tools: ToolHost | None
    ) -> AsyncIterator[Session]:
        """Prepare one turn's process (and whatever must live as long as it)."""
        if tools is not None:
            raise ModelError(f"the {self.name} backend cannot be given opdsl's tools")
        yield Session(
            self.argv(exe, effect), cwd=effect.options.get("cwd"), stdin=self.stdin(effect)
        )

    def _confined(self, effect: Agent) -> bool:
        asked = effect.options.get("confine")
        if asked is not None:
            return bool(asked)
        return self.confine if self.confine is not None else self.confined_by_default()

    def confined_by_default(self) -> bool:
        """Whether the CLI runs inside bubblewrap when neither the program nor the backend says."""
        return False

    def _confine(self, argv: list[str], folder: str | None, env: Mapping[str, str]) -> list[str]:
        problem = sandbox_problem()
        if problem is not None:
            raise ModelError(f"the {self.name} agent was asked to run confined, but {problem}")
        cwd = Path(folder or os.getcwd()).resolve()
        homes = {Path(env[v]).resolve() for v in self.homes if env.get(v) and v != "HOME"}
        if "HOME" in self.homes and env.get("HOME"):
            # of the home folder, only what the CLI keeps its state in: the rest (a shell's
            # startup files, other programs' settings, opdsl's seal key) stays read-only
            home = Path(env["HOME"]).resolve()
            for name in self.home_state:
                if name.endswith("/"):  # a folder: made if missing, as the CLI would
                    with contextlib.suppress(OSError):
                        (home / name).mkdir(mode=0o700, exist_ok=True)
                homes.add(home / name.rstrip("/"))
        homes = {h for h in homes if h.exists() and h != cwd}
        exe = Path(argv[0]).resolve()
        try:
            return bwrap_argv(
                argv,
                root=cwd,
                cwd=cwd,
                network=True,
                writable=tuple(sorted(homes)),
                readable=(exe,),
            )
        except SiblingsVisible as exc:
            raise ModelError(f"the {self.name} agent cannot run confined: {exc}") from None

    #: environment variables naming folders the CLI keeps its own state in; confined, the
    #: CLI may write each whole, but of ``HOME`` only the entries :attr:`home_state` names
    homes: ClassVar[tuple[str, ...]] = ("HOME",)
    #: the folders (``.codex/``, made if missing) and files (``.claude.json``, where it is)
    #: in ``HOME`` the CLI writes its state to
    home_state: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def handle(self, line: dict[str, Any], turn: Turn, effect: Agent) -> None:
        """Take one JSON line of the CLI's output into ``turn``; raise :class:`Refused` to
        fail closed (an init that breaks the rules the turn was started with, a line before
        the init)."""

    def _record(
        self,
        turn: Turn,
        started: float,
        exit_code: int | None,
        crashed: bool,
        reason: str | None,
        *,
        stopped: bool = False,
        environment: Mapping[str, str] | None = None,
    ) -> TurnRecord:
        tools = tuple(turn.tools.values())
        return TurnRecord(
            backend=self.name,
            text=turn.text,
            tool_calls=tools,
            turns=turn.turns,
            usage=turn.usage(),
            duration_s=time.monotonic() - started,
            session_id=turn.session_id,
            exit_code=exit_code,
            crashed=crashed,
            crash_reason=None if reason is None else reason[:MAX_REASON],
            max_turns_exhausted=turn.max_turns_exhausted,
            stopped=stopped,
            environment=dict(environment or {}),
        )

    def endpoint(self, env: Mapping[str, str]) -> str:
        """The model endpoint the CLI talks to, as its environment and arguments say (what
        the turn's record keeps as ``environment["endpoint"]``); "" when unknown."""
        return ""

    def model_of(self, effect: Agent) -> str:
        """The model the turn asked for (the CLI's own default when none: "default")."""
        model = effect.options.get("model")
        return str(model) if model else "default"

    async def version(self, exe: str, effect: Agent) -> str:
        """The CLI's ``--version``, asked once per executable (its path, size and time), in
        the folder the turn works in, and confined when the turn is."""
        confined = self._confined(effect)
        try:
            st = os.stat(exe)
            key = (os.path.realpath(exe), st.st_size, st.st_mtime_ns, confined)
        except OSError:
            return ""
        if key not in _VERSIONS:
            try:
                probed = await self.probe(exe, effect.options.get("cwd"), confined=confined)
                _VERSIONS[key] = probed.text.splitlines()[0][:200]
            except (ModelError, IndexError):
                _VERSIONS[key] = ""
        return _VERSIONS[key]

    async def __call__(
        self, effect: Agent, call: Call, tools: ToolHost | None = None
    ) -> TurnRecord:
        exe = self.find()
        if effect.options.get("probe"):
            return await self.probe(exe)
        turn = Turn(call=call, backend=self.name)
        turn.emit(AgentStart(**turn.base(), backend=self.name, model=effect.options.get("model")))
        started = time.monotonic()
        kind: Kind | None = None
        reason: str | None = None
        exit_code: int | None = None
        reader = _Reader(self, turn, effect)
        stopped = False
        environment = {
            "cli_version": await self.version(exe, effect),
            "model": self.model_of(effect),
            "endpoint": _without_credentials(self.endpoint({**os.environ, **self.env})),
        }
        try:
            async with self.session(exe, effect, tools) as session:
                turn.served = session.served
                env = {**os.environ, **self.env, **session.env}
                env.pop("CLAUDECODE", None)
                argv = session.argv
                if self._confined(effect):
                    argv = self._confine(argv, session.cwd, env)
                # stdin: the prompt and its end, or nothing (a CLI that reads a piped stdin
                # would wait for its end)
                with _lifeline(argv, session.private) as (argv, lifeline):
                    end = await run_process(
                        argv,
                        cwd=session.cwd,
                        env=env,
                        timeout=self.timeout,
                        idle_timeout=self.idle_timeout,
                        grace=self.grace,
                        consume=reader.feed,
                        exit_wait=self.grace,
                        stdin=session.stdin,
                        pass_fds=(lifeline,),
                    )
            exit_code = end.returncode
            if end.ending == "timeout":
                kind, reason = "timeout", f"no final event within {self.timeout:g}s"
            elif end.ending == "idle":
                kind, reason = "timeout", f"no output for {self.idle_timeout:g}s"
            else:
                kind, reason = reader.verdict
            if kind in ("stopped", "exhausted"):
                stopped, turn.max_turns_exhausted = kind == "stopped", kind == "exhausted"
                kind, reason = None, None  # ended at a message boundary: not a failure
                turn.finished = True
            if kind is None and not turn.finished:
                kind, reason = (
                    "crash",
                    f"the process exited (status {exit_code}) without a final event",
                )
            if kind is None and turn.error is not None:
                kind, reason = "error", turn.error
        finally:
            turn.close_all()
            status = (
                "stopped"
                if stopped
                else {
                    None: "completed",
                    "timeout": "timeout",
                    "crash": "crashed",
                    "refused": "refused",
                    "error": "failed",
                }[kind]  # a stop or max_turns run out was made None above: not a failure
            )
            turn.emit(AgentEnd(**turn.base(), backend=self.name, status=status, reason=reason))  # type: ignore[arg-type]
        if turn.model:
            environment["model"] = turn.model
        record = self._record(
            turn,
            started,
            exit_code,
            kind is not None,
            reason,
            stopped=stopped,
            environment=environment,
        )
        if kind is not None:
            raise AgentError(kind, record)
        return record

    async def probe(
        self, exe: str, cwd: str | None = None, *, confined: bool = False
    ) -> TurnRecord:
        """``agent(backend, "", probe=True)``: check the CLI runs (``--version``), without a
        turn; its answer is the record's text. A program calls it before it changes anything."""
        out = bytearray()

        def take(chunk: bytes) -> bool:
            out.extend(chunk[: 4096 - len(out)])
            return False

        argv, env = [exe, "--version"], {**os.environ, **self.env}
        if confined:
            argv = self._confine(argv, cwd, env)
        try:
            end = await run_process(
                argv,
                cwd=cwd,
                env=env,
                timeout=30,
                idle_timeout=30,
                grace=self.grace,
                consume=take,
                merge_stderr=True,
            )
        except OSError as exc:
            raise ModelError(f"the {self.name} backend's `{exe}` cannot start: {exc}") from None
        text = out.decode("utf-8", "replace").strip()
        if end.ending != "exited" or end.returncode != 0:
            raise ModelError(
                f"the {self.name} backend's `{exe} --version` failed "
                f"(status {end.returncode}, {end.ending}): {text[:500]}"
            )
        return TurnRecord(backend=self.name, text=text, exit_code=0)


Kind = Literal["timeout", "crash", "refused", "error", "stopped", "exhausted"]
"""Why an agent's turn ended early (``stopped`` and ``exhausted`` end it cleanly)."""

_VERSIONS: dict[tuple[str, int, int, bool], str] = {}
"""Each executable's ``--version``, by its path, size and modification time."""


def _without_credentials(url: str) -> str:
    """``url`` without a user or password in it (a key some put there)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


LIFELINE = Path(__file__).with_name("_lifeline.py")


@contextmanager
def _lifeline(argv: list[str], private: str | None) -> Iterator[tuple[list[str], int]]:
    """``argv`` under :mod:`._lifeline`, which ends the CLI's process group (and removes the
    turn's ``private`` folder) when opdsl ends, SIGTERM, SIGKILL or a crash alike: the read end
    of a pipe whose write end only this process holds (not inherited: opened close-on-exec)
    goes to it, and the pipe's end-of-file is opdsl's end. Yields the command and that fd."""
    read, write = os.pipe()
    try:
        yield (
            [sys.executable, "-I", "-S", str(LIFELINE), str(read), private or "", "--", *argv],
            read,
        )
    finally:
        os.close(read)
        os.close(write)


@final
class _Reader:
    """Reads a CLI's JSON lines as they come; says when to stop and why."""

    def __init__(self, backend: CliBackend, turn: Turn, effect: Agent) -> None:
        self.backend = backend
        self.turn = turn
        self.effect = effect
        self.buffer = b""
        self.verdict: tuple[Kind | None, str | None] = (None, None)

    def feed(self, chunk: bytes) -> bool:
        """Take a chunk of output; True to stop reading (a verdict, or the final event)."""
        self.buffer += chunk
        backend, turn = self.backend, self.turn
        while b"\n" in self.buffer:
            raw, self.buffer = self.buffer.split(b"\n", 1)
            verdict = self._line(raw)
            if verdict is not None:
                self.verdict = verdict
                return True
            if turn.finished:
                return True
            if backend.stop is not None and backend.stop(
                backend._record(turn, time.monotonic(), None, False, None)
            ):
                self.verdict = ("stopped", None)
                return True
            cap = self.effect.options.get("max_turns")
            if cap and not backend.cli_max_turns and turn.steps >= int(cap):
                self.verdict = ("exhausted", None)  # the next step would be one too many
                return True
        if len(self.buffer) > MAX_LINE:
            self.verdict = ("crash", f"a line longer than {MAX_LINE} bytes")
            return True
        return False

    def _line(self, raw: bytes) -> tuple[Kind, str] | None:
        if len(raw) > MAX_LINE:
            return "crash", f"a line longer than {MAX_LINE} bytes"
        text = raw.decode("utf-8", "replace").strip()
        if not text.startswith("{"):
            return None  # noise some builds print on stdout
        try:
            line = json.loads(text)
        except ValueError:
            return "crash", f"a malformed line: {text[:200]}"
        try:
            self.backend.handle(line, self.turn, self.effect)
        except Refused as exc:
            return "refused", str(exc)
        return None


class Refused(Exception):
    """Raised by :meth:`CliBackend.handle`: the agent broke the rules it was started with (its
    init named another model, a tool or MCP server that was not allowed, or it acted before
    its init). The process is killed and the turn fails as ``refused``."""


def check_init(
    backend: str, effect: Agent, model: str | None, tools: list[str], mcp: list[Any]
) -> None:
    """Check an init line against what the effect allowed (``model``, ``allowed_tools``,
    ``mcp_servers``): :class:`Refused` naming the first thing that breaks them."""
    want = effect.options.get("model")
    if want and model and not (model == want or model.startswith(want)):
        raise Refused(f"{backend} reported model {model!r}, not the {want!r} asked for")
    allowed = effect.options.get("allowed_tools")
    if allowed is not None:
        names = {str(a).split("(", 1)[0] for a in allowed}
        extra = [t for t in tools if t not in names]
        if extra:
            raise Refused(f"{backend} offers tools that were not allowed: {', '.join(extra)}")
    allowed_mcp = set(effect.options.get("mcp_servers", []))
    for server in mcp:
        name = server.get("name") if isinstance(server, dict) else str(server)
        if name not in allowed_mcp:
            raise Refused(f"{backend} connected MCP server {name!r}, which was not allowed")


_REGISTRY: dict[str, Callable[[], Any]] = {}
# the built-in backends register themselves when their module is imported
_BUILTIN = {
    "claude-code": "interpreters.agents.claude_code",
    "codex": "interpreters.agents.codex",
    "noop": "interpreters.agents.noop",
}


@runtime_checkable
class Backend(Protocol):
    """What performs ``agent(name, ...)``: an async callable from the effect and the call to
    the turn's :class:`~op.TurnRecord` (raising :class:`AgentError` with the partial record
    when the turn fails), which keeps the turn contract and declares what it can do.
    :class:`CliBackend` is one for a CLI that prints JSON lines."""

    name: ClassVar[str]
    #: it can be given opdsl's bound tools (``agent(..., tools=[...])``)
    serves_tools: ClassVar[bool]
    #: its records say what a turn cost (else a ``usd`` budget cannot be kept for it)
    reports_cost: ClassVar[bool]
    #: a ``stop=`` predicate ends its turn cleanly at a message boundary (else refused)
    supports_cooperative_stop: ClassVar[bool]
    #: a turn that runs out of ``max_turns`` returns its record, ``max_turns_exhausted=True``
    supports_max_turns: ClassVar[bool]

    async def __call__(
        self, effect: Agent, call: Call, tools: ToolHost | None = None
    ) -> TurnRecord: ...


def register_backend(name: str, factory: Callable[[], Any]) -> None:
    """Add a backend: ``factory()`` returns a :class:`Backend` (an async callable
    ``(Agent, Call) -> TurnRecord`` that declares ``serves_tools`` and ``reports_cost``)."""
    _REGISTRY[name] = factory


def backends() -> dict[str, Any]:
    """A fresh instance of every registered backend (the built-in ones included), by name."""
    for name, module in _BUILTIN.items():
        if name not in _REGISTRY:
            importlib.import_module(module)
    return {name: factory() for name, factory in _REGISTRY.items()}
