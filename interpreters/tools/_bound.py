"""Tools: named, typed functions a program (or a model) can call.

A plain typed Python function is a tool: its parameters become a pydantic model whose JSON
Schema is what a model sees, its docstring's first paragraph is the description. A call with
bad arguments, a call to an unknown tool, and a tool that raises all come back as
``ToolResult(ok=False, error=...)`` the model can read; none of them ends the run.

A parameter annotated ``CallInfo`` is not shown to the model: the interpreter passes the
call's details in it (``call.idempotency_key`` is the same when a resumed run performs an
effect a crash left unfinished, so a tool can make a retried side effect happen once).

Sync functions are called inline, except inside a ``timeout``, where they run in a worker
thread so the deadline fires on time (the thread cannot be stopped: it finishes in the
background, and its result is dropped); async functions are awaited and are cancelled by
``timeout``. A sync function marked :func:`isolated` (or a ``BoundTool(isolated=True)``)
runs in a child process of its own, which the deadline kills with everything it started, so
nothing it does lands after it. The scope's ``TimedOut.cut`` says which kind of tool was cut
and whether its work can still land.
"""

from __future__ import annotations

import functools
import inspect
import os
import pickle
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, final

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from interpreters.runtime._clock import SystemClock
from interpreters.runtime._events import EventBus
from interpreters.runtime._frame import Call as CallInfo  # the driver's Call, by its public name
from interpreters.tools._process import run_process
from op import DuplicateTool, Fatal, ToolResult, ToolSpec
from op._marker import Marker
from op._values import RAW_ARGUMENTS
from op.effects import NotSerializable
from state import canonical_json

__all__ = [
    "BoundTool",
    "ToolLike",
    "ToolRegistry",
    "format_validation_error",
    "isolated",
    "quick",
    "read_only",
]


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``path: message``."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


# ToolResult's validator without the keyword-argument __init__ wrapper (half the cost)
_ok_result = ToolResult.__pydantic_validator__.validate_python


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


_PLAIN = (int, str, float, bool)


def _plain_fields(model: type[BaseModel]) -> dict[str, type] | None:
    fields = model.model_fields
    plain: dict[str, type] = {}
    for name, info in fields.items():
        if info.annotation not in _PLAIN or not info.is_required() or info.metadata:
            return None
        plain[name] = info.annotation  # type: ignore[assignment]
    return plain


@final
class BoundTool:
    """A callable the interpreter binds by name.

    Example:
        >>> def add(a: int, b: int = 1) -> int:
        ...     '''Add two numbers.'''
        ...     return a + b
        >>> t = BoundTool.from_function(add)
        >>> t.spec.parameters["required"], t.spec.description
        (['a'], 'Add two numbers.')
    """

    def __init__(
        self,
        *,
        name: str,
        fn: Callable[..., Any],
        args_model: type[BaseModel],
        description: str = "",
        read_only: bool = False,
        isolated: bool = False,
    ) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"tool name {name!r} must be letters, digits, '_' or '-'")
        if isolated:
            _check_isolable(name, fn)
        #: runs in a child process of its own, killed at a ``timeout``'s deadline
        self.isolated = isolated
        self.name = name
        self.fn = fn
        self.args_model = args_model
        self.description = description
        self.read_only = read_only
        #: read-only and done in well under a second: on Temporal a local activity
        self.quick = False
        self.is_async = inspect.iscoroutinefunction(fn)
        self._validate = args_model.__pydantic_validator__.validate_python
        #: every parameter's type when all are plain (int, str, float, bool) and required:
        #: arguments of exactly those types need no validation (the hot path); None otherwise
        self._plain: dict[str, type] | None = _plain_fields(args_model)
        #: the parameter that receives the :class:`CallInfo`, if the function asks for it
        self.inject: str | None = None
        #: the MCP server that offers it (``tools._mcp``), or None: a tool of the run's own
        self.server: str | None = None
        self.spec = ToolSpec(
            name=name,
            description=description,
            parameters=args_model.model_json_schema(),
            read_only=read_only,
        )

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        isolated: bool = False,
    ) -> BoundTool:
        """Make a tool of a typed function; every parameter needs an annotation
        (``isolated``: see :func:`isolated`)."""
        tool_name = name or fn.__name__
        fields: dict[str, Any] = {}
        try:
            hints = inspect.get_annotations(fn, eval_str=True)
        except Exception as exc:  # a bad annotation is the caller's bug; say where
            raise TypeError(f"tool {tool_name!r}: cannot read its annotations: {exc}") from exc
        inject = None
        for pname, param in inspect.signature(fn).parameters.items():
            if hints.get(pname) is CallInfo:
                inject = pname  # the interpreter passes the call (idempotency key, ...)
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(
                    f"tool {tool_name!r}: *args and **kwargs cannot be described to a model"
                )
            if pname not in hints:
                raise TypeError(f"tool {tool_name!r}: parameter {pname!r} has no type annotation")
            default = ... if param.default is param.empty else param.default
            fields[pname] = (hints[pname], default)
        model = create_model(f"{tool_name}_args", __base__=_Args, **fields)
        doc = inspect.getdoc(fn) or ""
        desc = description if description is not None else doc.split("\n\n")[0].strip()
        tool = cls(
            name=tool_name,
            fn=fn,
            args_model=model,
            description=desc,
            read_only=read_only,
            isolated=isolated,
        )
        tool.inject = inject
        return tool

    async def call(self, args: Mapping[str, Any], call: CallInfo | None = None) -> ToolResult:
        """Validate ``args`` and run the tool; every failure is a ``ToolResult`` error."""
        if RAW_ARGUMENTS in args:
            raw = str(args[RAW_ARGUMENTS])
            return ToolResult.failure(
                f"the arguments for tool {self.name!r} are not a JSON object: {raw[:200]!r}; "
                "call it again with a JSON object of its parameters"
            )
        plain = self._plain
        exact = plain is not None and len(args) == len(plain)
        if exact:
            assert plain is not None
            for key, kind in plain.items():
                if type(args.get(key)) is not kind:
                    exact = False
                    break
        if exact:
            kwargs: Mapping[str, Any] = args  # exactly what validation would give back
        else:
            try:
                parsed = self._validate(args)
            except ValidationError as exc:
                return ToolResult.failure(
                    f"invalid arguments for tool {self.name!r}: {format_validation_error(exc)}"
                )
            kwargs = parsed.__dict__  # the validated fields (the model forbids extras)
        if self.inject is not None:
            kwargs = {**kwargs, self.inject: call}
        try:
            if self.isolated:
                out = await _in_child(self, kwargs)
            elif not self.is_async and (call is None or not call.off_loop):
                out = self.fn(**kwargs)
            elif self.is_async:
                out = await self.fn(**kwargs)
            else:
                # under a deadline: a worker thread, so the timeout fires on time; a thread
                # cannot be stopped, so one still blocking is left to finish on its own
                out = await anyio.to_thread.run_sync(
                    functools.partial(self.fn, **kwargs), abandon_on_cancel=True
                )
        except Exception as exc:
            if isinstance(exc, Fatal):
                raise  # a defect (a divergence, a journal that fails): never the model's to read
            return ToolResult.failure(f"tool {self.name!r} raised {type(exc).__name__}: {exc}")
        except BaseException:
            if call is not None:  # cut off (a deadline, a failing sibling): say what was left
                call.cut = self.cut_note(call.address)
            raise
        if isinstance(out, ToolResult):
            return out
        if isinstance(out, str):
            made: ToolResult = _ok_result({"output": out})
            return made
        if type(out) is int:  # its canonical JSON is its decimal digits
            number: ToolResult = _ok_result({"output": str(out)})
            return number
        try:
            return ToolResult(output=canonical_json(out))
        except NotSerializable as exc:
            return ToolResult.failure(
                f"tool {self.name!r} returned a value that is not JSON: {exc}"
            )

    def cut_note(self, address: str) -> str:
        """What a ``timeout`` that cut this tool off says of it: its kind, and whether its
        work can still land."""
        where = f"tool {self.name!r} at {address}"
        if self.isolated:
            return (
                f"{where}: a synchronous tool in a child process (isolated), killed at the "
                "deadline with everything it started: nothing it does lands after it (what it "
                "did before may have)"
            )
        if self.is_async:
            return (
                f"{where}: an async tool, cancelled at the deadline where it awaited: its work "
                "stops there (what it did before may have landed)"
            )
        return (
            f"{where}: a synchronous tool in a worker thread, which cannot be stopped: it runs "
            "on, and its work may still land after the deadline (mark it @isolated to run it "
            "in a child process that the deadline kills)"
        )


def _check_isolable(name: str, fn: Callable[..., Any]) -> None:
    """An isolated tool must be a sync function its child process can import."""
    if inspect.iscoroutinefunction(fn):
        raise TypeError(
            f"tool {name!r}: only a synchronous tool can be isolated (an async one is "
            "cancelled at a deadline as it is)"
        )
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise TypeError(
            f"tool {name!r} is isolated, so a child process runs it and must import it: "
            f"define {getattr(fn, '__qualname__', fn)!r} at the top level of a module ({exc})"
        ) from None


# the child: sys.path first (so the tool's module imports), then the call; the tool's own
# prints go to stderr, the answer to the stdout it was given
_CHILD = """
import os, pickle, sys
answer = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.path[:0] = pickle.load(sys.stdin.buffer)
fn, kwargs = pickle.load(sys.stdin.buffer)
try:
    out = ("ok", fn(**kwargs))
except Exception as exc:
    out = ("raised", type(exc).__name__, str(exc))
try:
    data = pickle.dumps(out)
except Exception as exc:
    data = pickle.dumps(("raised", "TypeError", f"its value cannot be sent back: {exc}"))
answer.write(data)
answer.flush()
"""


async def _in_child(tool: BoundTool, kwargs: Mapping[str, Any]) -> Any:
    """Run an isolated tool in a child process of its own (a session of its own, killed with
    what it started when the call is cancelled) and give back what it returned."""
    if tool.inject is not None:
        # the call's details without the run's clock and event bus, which stay here
        sent = kwargs[tool.inject]
        if isinstance(sent, CallInfo):
            kwargs = {
                **kwargs,
                tool.inject: CallInfo(sent.run_id, sent.address, SystemClock(), EventBus([])),
            }
    payload = pickle.dumps(list(sys.path)) + pickle.dumps((tool.fn, dict(kwargs)))
    got: list[bytes] = []

    def consume(chunk: bytes) -> bool:
        got.append(chunk)
        return False

    forever = 10.0**9  # the deadline is the enclosing timeout's, which cancels this
    finished = await run_process(
        [sys.executable, "-c", _CHILD],
        cwd=None,
        env=os.environ,
        timeout=forever,
        idle_timeout=forever,
        grace=0.0,
        consume=consume,
        stdin=payload,
    )
    try:
        out = pickle.loads(b"".join(got))
    except Exception:
        return ToolResult.failure(
            f"tool {tool.name!r} (isolated) ended without an answer: its process exited with "
            f"status {finished.returncode}"
        )
    if out[0] == "raised":
        return ToolResult.failure(f"tool {tool.name!r} raised {out[1]}: {out[2]}")
    return out[1]


ToolLike = BoundTool | Callable[..., Any] | Callable[..., Awaitable[Any]]

F = TypeVar("F", bound=Callable[..., Any])

READ_ONLY = Marker("read_only", bool)
"""Set by :func:`read_only`: the tool has no side effects."""


def read_only(fn: F) -> F:
    """Mark a tool function as free of side effects: a dry run calls it for real.

    Example:
        >>> @read_only
        ... def list_files() -> list[str]:
        ...     return []
        >>> ToolRegistry([list_files]).get("list_files").read_only
        True
    """
    READ_ONLY.put(fn, True)
    return fn


ISOLATED = Marker("isolated", bool)
"""Set by :func:`isolated`: the tool runs in a child process of its own."""


def isolated(fn: F) -> F:
    """Run a synchronous tool in a child process of its own, which a ``timeout``'s deadline
    kills with everything it started: nothing it does lands after the deadline (a plain
    synchronous tool runs on in its thread). The process imports the tool's module, so the
    function must be defined at the top level of one; its arguments and result are sent by
    pickle. Each call starts a Python process (tens of milliseconds).

    Example:
        >>> @isolated
        ... def crunch(n: int) -> int:
        ...     return n * 2
        >>> ISOLATED.get(crunch)
        True
    """
    if inspect.iscoroutinefunction(fn):
        raise TypeError(
            f"@isolated is for synchronous tools; {getattr(fn, '__name__', fn)!r} is async "
            "(a deadline cancels it as it is)"
        )
    ISOLATED.put(fn, True)
    return fn


QUICK = Marker("quick", bool)
"""Set by :func:`quick`: the tool is read-only and finishes in well under a second."""


def quick(fn: F) -> F:
    """Mark a tool function as read-only and quick (well under a second, no waiting on the
    network): a dry run calls it for real, and on Temporal it runs as a local activity, about
    ten times cheaper than an activity, without heartbeats or cancellation.

    Example:
        >>> @quick
        ... def word_count(text: str) -> int:
        ...     return len(text.split())
        >>> t = ToolRegistry([word_count]).get("word_count")
        >>> t.quick, t.read_only
        (True, True)
    """
    QUICK.put(fn, True)
    READ_ONLY.put(fn, True)
    return fn


PREFIX_HINT = "(MCPServer.stdio(..., prefix=...), --mcp 'NAME[prefix=P]=...')"
"""How a user gives an MCP server a prefix of its own, as a refused clash of names says it."""


@final
class ToolRegistry:
    """The tools bound to a run, by unique name."""

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        self._tools: dict[str, BoundTool] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: ToolLike) -> None:
        if isinstance(tool, BoundTool):
            bound = tool
        else:
            bound = BoundTool.from_function(
                tool,
                read_only=READ_ONLY.get(tool) is True,
                isolated=ISOLATED.get(tool) is True,
            )
            bound.quick = QUICK.get(tool) is True
        known = self._tools.get(bound.name)
        if known is not None:
            server = bound.server or known.server
            if server is not None:
                raise DuplicateTool(
                    f"MCP server {server!r} offers {bound.name!r}, the name of another tool of "
                    f"the run; give the server a prefix of its own {PREFIX_HINT}"
                )
            raise DuplicateTool(f"two tools are named {bound.name!r}; tool names must be unique")
        self._tools[bound.name] = bound

    def get(self, name: str) -> BoundTool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self, names: Sequence[str] | Literal["all"]) -> tuple[ToolSpec, ...]:
        """Specs for ``names`` (``"all"``: every tool); an unknown name is a ``KeyError``."""
        if names == "all":
            return tuple(self._tools[n].spec for n in self.names())
        out = []
        for n in names:
            t = self._tools.get(n)
            if t is None:
                raise KeyError(
                    f"infer() offers tool {n!r}, but no tool of that name is bound "
                    f"(bound: {', '.join(self.names()) or 'none'})"
                )
            out.append(t.spec)
        return tuple(out)

    def unknown(self, name: str) -> ToolResult:
        """The error a call to an unbound tool gets."""
        return ToolResult.failure(
            f"no tool named {name!r}; available: {', '.join(self.names()) or 'none'}"
        )
