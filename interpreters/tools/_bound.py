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
``timeout``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, final

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from interpreters.runtime._frame import Call as CallInfo  # the driver's Call, by its public name
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
    ) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"tool name {name!r} must be letters, digits, '_' or '-'")
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
    ) -> BoundTool:
        """Make a tool of a typed function; every parameter needs an annotation."""
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
        tool = cls(name=tool_name, fn=fn, args_model=model, description=desc, read_only=read_only)
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
            if not self.is_async and (call is None or not call.off_loop):
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
            bound = BoundTool.from_function(tool, read_only=READ_ONLY.get(tool) is True)
            bound.quick = QUICK.get(tool) is True
        if bound.name in self._tools:
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
