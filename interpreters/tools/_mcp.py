"""Tools from any MCP server: a program or the command line names servers, stdio (a command)
or streamable HTTP (a URL), and their tools become opdsl tools.

Rules, in one place:

1. A tool is named ``SERVER_TOOL`` (``git_git_status``), or the prefix the user gives and the
   tool's own name. Model APIs take only letters, digits, ``_`` and ``-`` in a tool's name, so a
   ``.`` or ``/`` in the server's name for it becomes ``_``; a name with anything else in it
   (markup, spaces), longer than 64 characters, offered twice, or that becomes the name of
   another of the server's tools (``a.b`` and ``a_b``), is left out with a warning, as is a
   tool whose input schema is not a JSON Schema of an object. Two tools that end up with one
   name (across servers, or beside the run's own: its tools, its workspace's) are refused at
   the start (``DuplicateTool``).
2. A model is offered the server's own JSON Schema; arguments that do not fit it are refused
   before they reach the server, as a ``ToolResult`` error the model can read.
3. A call is a ``tool`` effect like any other: journaled, budgeted, redacted, replayed from the
   journal (a replay starts no server), listed by a dry run without being called (no server
   hint makes a tool "read-only" there: a server's annotations are its own word).
4. Every failure is a failed ``ToolResult`` naming the server and the tool: the server's own
   error, a call that took longer than the server's ``timeout``, a result over
   :data:`MAX_OUTPUT` characters (cut, and said so), a server that died during the call or
   sent a message over :data:`MAX_MESSAGE` bytes (a stdio server's line; an HTTP server's
   JSON body, or one event of its SSE stream) or, over HTTP, a compressed answer it was not
   asked for: it is stopped (an HTTP server's session ended) and started again at the next
   call; one that died between calls is started again before the next. A stdio server's line
   that is not a JSON-RPC message (not UTF-8, not JSON) fails the call it answers at once,
   quoted: the one its id names, else (no id can be read) the only call waiting. One that
   no call can be told to wait on (between calls, while several wait, or with an id no call
   waiting has) fails none: the first is a warning, and a call that then gets no answer
   within its ``timeout`` quotes the last. A server that cannot list its tools (no answer
   within its ``start_timeout``, an error, an end) stops the run before it begins.
5. A stdio server is confined like a workspace command (``bwrap_argv``): the workspace (else
   the current folder) writable, with its ``.git`` and ``.opdsl`` read-only; the rest of the
   file system read-only, the workspace's siblings hidden but for the server's program and
   the install it runs from (``_installed``); no network unless allowed for that server; an environment of
   ``PATH``, ``HOME=/tmp`` and only the variables named for it. It is started once per run (or
   per worker) and ended with it.
6. The servers and their tool lists are recorded in the run's config at its start; a resume
   starts them again and compares: a tool the journal names (called, or offered to a model)
   that is gone or whose schema changed refuses the resume (:class:`MCPToolsChanged`) unless
   the user accepts changed code; any other change is a warning on stderr.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, final
from urllib.parse import unquote

import anyio
from anyio.abc import TaskGroup, TaskStatus
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from interpreters._redact import REDACTED, Redactor, looks_secret
from interpreters._shown import visible
from interpreters.tools._bound import PREFIX_HINT, BoundTool
from interpreters.tools._sandbox import bwrap_argv, sandbox_problem
from op import Agent, Infer, OpdslError, Tool, ToolResult, ToolSpec
from state._canonical import lone_path

__all__ = [
    "MAX_MESSAGE",
    "MAX_OUTPUT",
    "MCPError",
    "MCPServer",
    "MCPTools",
    "MCPToolsChanged",
    "listed_tools",
    "mcp_servers",
    "open_mcp",
    "parse_mcp",
    "servers_of",
]

MAX_OUTPUT = 200_000
"""The most characters of a result a tool gives back; the rest is cut, and the cut is said."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SAFE = str.maketrans({".": "_", "/": "_"})
_PREFIX = re.compile(r"^[A-Za-z0-9_-]{0,63}$")
_ENV_KEPT = ("PATH",)
"""What a stdio server is given beside the variables named for it (a command line names its
programs by ``PATH``); nothing else of ours is: its environment is replaced, not added to."""


class MCPError(OpdslError):
    """An MCP server cannot be used: badly named, cannot start, or lists no usable tools."""


class MCPToolsChanged(OpdslError):
    """A resumed run's server no longer offers a tool its journal depends on, as recorded."""


def _recorded_argv(argv: Sequence[str], redact: Redactor) -> list[str]:
    """``argv`` as a run records it: the environment's secrets and URLs' passwords replaced,
    and so is each value given to an option named like a secret (``--token ghp_...``,
    ``--api-key=...``), which the environment may not hold."""
    out: list[str] = []
    hidden = False
    for arg in argv:
        if hidden:
            out.append(REDACTED)
            hidden = False
            continue
        flag, given, _ = arg.partition("=")
        if flag.startswith("-") and looks_secret(flag.lstrip("-").replace("-", "_")):
            out.append(f"{flag}={REDACTED}" if given else arg)
            hidden = not given  # the secret is the next argument
            continue
        out.append(redact(arg))
    return out


def _recorded_url(url: str, redact: Redactor) -> str:
    """``url`` as a run records it: its password and the environment's secrets replaced, and
    the value of each query parameter named like a secret (``?api_key=...``, ``&token=...``)."""
    head, mark, query = redact(url).partition("?")
    if not mark:
        return head
    query, hash_mark, fragment = query.partition("#")
    kept = []
    for part in query.split("&"):
        name, given, _ = part.partition("=")
        kept.append(f"{name}={REDACTED}" if given and looks_secret(unquote(name)) else part)
    return f"{head}?{'&'.join(kept)}{hash_mark}{fragment}"


@final
@dataclass(frozen=True)
class MCPServer:
    """An MCP server a run takes tools from: :meth:`stdio` (a command) or :meth:`http` (a URL).

    Example:
        >>> s = MCPServer.stdio(["mcp-server-time"], env=["TZ"])
        >>> s.argv, s.env, s.network
        (('mcp-server-time',), ('TZ',), False)
    """

    argv: tuple[str, ...] = ()
    url: str | None = None
    #: names of the variables passed on to a stdio server (nothing else of ours is)
    env: tuple[str, ...] = ()
    #: whether a stdio server may reach the network
    network: bool = False
    #: what each tool's name starts with (None: the server's name and ``_``)
    prefix: str | None = None
    #: seconds one call may take
    timeout: float = 60.0
    #: seconds the server may take to start and list its tools
    start_timeout: float = 30.0
    #: False: a stdio server runs unconfined (a server the user trusts with the machine)
    confined: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.argv) == (self.url is not None):
            raise MCPError("an MCP server is a command (MCPServer.stdio) or a URL (MCPServer.http)")
        for key, value in (("timeout", self.timeout), ("start_timeout", self.start_timeout)):
            # inf and nan too: a run's config is canonical JSON, which holds neither
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise MCPError(f"an MCP server's {key} is seconds, not {value!r}")
            if not 0 < value < math.inf:
                raise MCPError(
                    f"an MCP server's {key} is a finite number of seconds above 0, not {value!r}"
                )
        if self.prefix is not None and not _PREFIX.match(self.prefix):
            raise MCPError(
                f"an MCP server's prefix is letters, digits, '_' or '-' (63 at most), not "
                f"{self.prefix!r}"
            )

    @classmethod
    def stdio(
        cls,
        argv: Sequence[str],
        *,
        env: Iterable[str] = (),
        network: bool = False,
        prefix: str | None = None,
        timeout: float = 60.0,
        start_timeout: float = 30.0,
        confined: bool = True,
    ) -> MCPServer:
        """A server run as ``argv``, speaking MCP on its stdin and stdout."""
        if isinstance(argv, str):
            raise MCPError(f"MCPServer.stdio takes the command as a list, not {argv!r}")
        if argv and not argv[0]:
            raise MCPError(f"an MCP server's command names no program: {list(argv)!r}")
        return cls(
            argv=tuple(argv),
            env=tuple(env),
            network=network,
            prefix=prefix,
            timeout=timeout,
            start_timeout=start_timeout,
            confined=confined,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        prefix: str | None = None,
        timeout: float = 60.0,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url``."""
        if not url.startswith(("http://", "https://")):
            raise MCPError(f"an MCP server's URL starts with http:// or https://, not {url!r}")
        return cls(url=url, headers=dict(headers or {}), prefix=prefix, timeout=timeout)

    def to_json(self) -> dict[str, Any]:
        """What a run records of the server: its command or URL with secrets redacted, the
        names of the variables and headers it is given (never their values)."""
        redact = Redactor.from_env()
        out: dict[str, Any] = {
            "timeout": self.timeout,
            "start_timeout": self.start_timeout,
            "prefix": self.prefix,
        }
        if self.url is not None:
            out |= {"url": _recorded_url(self.url, redact), "headers": sorted(self.headers)}
        else:
            out |= {
                "argv": _recorded_argv(self.argv, redact),
                "env": list(self.env),
                "network": self.network,
                "confined": self.confined,
            }
        return out

    @classmethod
    def from_json(cls, name: str, data: Any) -> MCPServer:
        """The server a run recorded; one whose command held a secret, that was given
        headers, or that ran unconfined or with the network, is not started again from the
        record (a journal can come from anyone): it is named again (``--mcp``, ``mcp=``)."""
        if not isinstance(data, Mapping):
            raise MCPError(f"MCP server {name!r}: the run's record of it is not an object")
        if data.get("headers") or REDACTED in json.dumps(data):
            raise MCPError(
                f"MCP server {name!r} was given a secret (in its command, URL or headers), which "
                "the run does not keep; name it again (--mcp, mcp= in the API) to resume"
            )
        if data.get("confined") is False or data.get("network"):
            what = "unconfined" if data.get("confined") is False else "with the network"
            raise MCPError(
                f"MCP server {name!r} ran {what}, which is started only when named again "
                "(--mcp, mcp= in the API) to resume"
            )
        try:
            return cls._recorded(data)
        except (KeyError, TypeError, ValueError, MCPError) as exc:
            raise MCPError(
                f"MCP server {name!r}: the run's record of it is malformed ({_reason(exc)})"
            ) from None

    @classmethod
    def _recorded(cls, data: Mapping[str, Any]) -> MCPServer:
        """The server ``data`` records (a key missing or of the wrong type: KeyError,
        TypeError or ValueError)."""

        def seconds(key: str, default: float) -> float:
            value = data.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{key} is {value!r}, not seconds")
            return float(value)

        prefix = data.get("prefix")
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError(f"prefix is {prefix!r}, not a text")
        if "url" in data:
            if not isinstance(data["url"], str):
                raise TypeError(f"url is {data['url']!r}, not a text")
            return cls.http(data["url"], prefix=prefix, timeout=seconds("timeout", 60.0))
        argv, env = data["argv"], data.get("env", [])
        for key, value in (("argv", argv), ("env", env)):
            if not (isinstance(value, list) and all(isinstance(a, str) for a in value)):
                raise TypeError(f"{key} is {value!r}, not a list of texts")
        if not argv:
            raise ValueError("argv is empty")
        return cls.stdio(
            argv,
            env=env,
            network=False,
            prefix=prefix,
            timeout=seconds("timeout", 60.0),
            start_timeout=seconds("start_timeout", 30.0),
        )


_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_-]+)(\[(?P<opts>[^\]]*)\])?=(?P<what>.+)$", re.S)


def parse_mcp(text: str) -> tuple[str, MCPServer]:
    """A server as the command line names it: ``NAME=COMMAND ARGS...`` or ``NAME=URL``, with
    options in brackets after the name: ``network``, ``env=VAR`` (repeatable), ``prefix=P``,
    ``timeout=SECONDS``, ``unconfined``.

    Example:
        >>> name, s = parse_mcp("gh[network,env=GH_TOKEN]=github-mcp-server stdio")
        >>> name, s.argv, s.network, s.env
        ('gh', ('github-mcp-server', 'stdio'), True, ('GH_TOKEN',))
    """
    m = _SPEC.match(text.strip())
    if m is None:
        raise MCPError(
            f"--mcp {text!r}: give NAME=COMMAND or NAME=URL (NAME: letters, digits, '_', '-'), "
            "e.g. --mcp 'git=mcp-server-git --repository .'"
        )
    name, what = m["name"], m["what"].strip()
    if not _NAME.match(name):
        raise MCPError(f"--mcp {name[:80]}: a server's name is 64 characters at most")
    opts: dict[str, Any] = {"env": []}
    for opt in filter(None, (o.strip() for o in (m["opts"] or "").split(","))):
        key, _, value = opt.partition("=")
        if key == "network" and not value:
            opts["network"] = True
        elif key == "unconfined" and not value:
            opts["confined"] = False
        elif key == "env" and value:
            opts["env"].append(value)
        elif key == "prefix":
            opts["prefix"] = value
        elif key == "timeout" and value:
            try:
                opts["timeout"] = float(value)
            except ValueError:
                raise MCPError(f"--mcp {name}: timeout={value!r} is not seconds") from None
            if not 0 < opts["timeout"] < math.inf:
                raise MCPError(
                    f"--mcp {name}: timeout={value!r} is not a finite number of seconds above 0"
                )
        else:
            raise MCPError(
                f"--mcp {name}: unknown option {opt!r} (options: network, env=VAR, prefix=P, "
                "timeout=SECONDS, unconfined)"
            )
    if what.startswith(("http://", "https://")):
        if opts["env"] or "network" in opts or "confined" in opts:
            raise MCPError(f"--mcp {name}: network, env= and unconfined are for a command")
        try:
            return name, MCPServer.http(
                what, prefix=opts.get("prefix"), timeout=opts.get("timeout", 60.0)
            )
        except MCPError as exc:
            raise MCPError(f"--mcp {name}: {exc}") from None
    try:
        argv = shlex.split(what)
    except ValueError as exc:
        raise MCPError(f"--mcp {name}: cannot split the command {what!r}: {exc}") from None
    try:
        return name, MCPServer.stdio(argv, **opts)
    except MCPError as exc:
        raise MCPError(f"--mcp {name}: {exc}") from None


def servers_of(config: Mapping[str, Any]) -> dict[str, MCPServer]:
    """The servers a run's config recorded (none: an empty mapping)."""
    recorded = config.get("mcp") or {}
    if not isinstance(recorded, Mapping):
        raise MCPError("the run's record of its MCP servers is not an object")
    return {
        name: MCPServer.from_json(name, r.get("server") if isinstance(r, Mapping) else None)
        for name, r in recorded.items()
    }


class _Arguments(BaseModel):
    """A call's arguments as they came: the server's schema checks them, not a model's fields."""

    model_config = ConfigDict(extra="forbid")
    arguments: dict[str, Any]

    @model_validator(mode="before")
    @classmethod
    def _whole(cls, data: Any) -> Any:
        return {"arguments": data}


def _text_of(result: Any) -> str:
    """A ``CallToolResult``'s content as one text: text as it is, anything else said in words."""
    parts = []
    for item in result.content or ():
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(str(item.text))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {item.mime_type}, {len(item.data) * 3 // 4} bytes]")
        elif kind == "resource":
            inner = item.resource
            text = getattr(inner, "text", None)
            parts.append(str(text) if text is not None else f"[resource {inner.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {item.uri}]")
        else:
            parts.append(f"[{kind or type(item).__name__} content]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, sort_keys=True, ensure_ascii=False)
    return "\n".join(parts)


def _capped(text: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    return text[:MAX_OUTPUT] + f"\n[{len(text) - MAX_OUTPUT} more characters left out]"


def _validator(schema: Any) -> tuple[Any, str | None]:
    """A validator of arguments for ``schema``, or why it is not a schema a model can be
    offered (a JSON Schema of an object)."""
    from jsonschema import SchemaError, validators  # type: ignore[import-untyped]

    if not isinstance(schema, dict):
        return None, f"its input schema is a {type(schema).__name__}, not a JSON object"
    if schema.get("type", "object") != "object":
        return None, f"its input schema is of type {schema.get('type')!r}, not 'object'"
    try:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
    except SchemaError as exc:
        return None, f"its input schema is not a JSON Schema: {exc.message}"
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012, specification_with

    # a reference that leads nowhere would fail every call: found now (none is fetched from
    # afar), each from the resource it is in (a nested $id is a base of its own)
    spec = specification_with(cls.META_SCHEMA.get("$id", ""), default=DRAFT202012)
    try:
        resource = spec.create_resource(schema)
        here = resource.id() or "urn:opdsl:input-schema"
        resolver = Registry().with_resource(here, resource).crawl().resolver(base_uri=here)
    except Exception as exc:  # an $id that is no URI
        return None, f"its input schema cannot be read: {_reason(exc)}"
    keys = {"$ref", "$dynamicRef", "$recursiveRef"} & set(cls.VALIDATORS)
    stack: list[tuple[Any, Any]] = [(schema, resolver)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, list):
            stack += [(item, at) for item in node]
            continue
        if not isinstance(node, dict):
            continue
        if node is not schema and isinstance(node.get("$id"), str):
            try:
                at = at.in_subresource(spec.create_resource(node))
            except Exception as exc:  # an $id that is no URI
                return None, f"its input schema cannot be read: {_reason(exc)}"
        for key in keys:
            ref = node.get(key)
            if not isinstance(ref, str):
                continue
            try:
                at.lookup(ref)
            except Exception:  # Unresolvable, or a reference that is no URI
                return None, f"its input schema refers to {ref[:80]!r}, which is not in it"
        for key, value in node.items():
            if key in _NAMED_SCHEMAS and isinstance(value, dict):
                stack += [(sub, at) for sub in value.values()]
            elif key not in _VALUES:
                stack.append((value, at))
    return _unmatched(cls)(schema, registry=Registry()), None


_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
"""The keywords whose value maps names to schemas (a property may be named ``default``)."""

_VALUES = frozenset({"default", "const", "enum", "examples"})
"""The keywords whose value is data, not a schema: a ``$ref`` in it refers to nothing."""


def _unmatched(cls: Any) -> Any:
    """``cls`` with no regular expression of the schema's run here: one can take exponential
    time on a short argument (``(a+)+$``), before any timeout; the server checks its own.
    ``pattern`` and ``patternProperties`` check nothing, and ``additionalProperties`` beside
    ``patternProperties`` nothing either (it would match their keys)."""
    from jsonschema import validators

    additional = cls.VALIDATORS["additionalProperties"]

    def nothing(*_: Any) -> None:
        return None

    def additional_unless_patterns(v: Any, value: Any, instance: Any, schema: Any) -> Any:
        return None if "patternProperties" in schema else additional(v, value, instance, schema)

    return validators.extend(
        cls,
        {
            "pattern": nothing,
            "patternProperties": nothing,
            "additionalProperties": additional_unless_patterns,
        },
    )


@final
class _WatchedRead:
    """A transport's read stream that says when it has ended (the server is gone), so the next
    call starts the server again instead of failing on a closed connection."""

    def __init__(self, inner: Any, gone: anyio.Event) -> None:
        self._inner = inner
        self._gone = gone

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._gone.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # what else the SDK reads (last_context)


@contextlib.asynccontextmanager
async def _watched(transport: Any, gone: anyio.Event) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read, write):
        yield _WatchedRead(read, gone), write


MAX_MESSAGE = 32 * 1024 * 1024
"""The longest message a server may send (bytes): a stdio server's line, an HTTP server's JSON
body or one event of its SSE stream. Past it the answer is cut and the server stopped."""

_UNREADABLE = {"opdsl": "unreadable"}
"""The ``data`` of the error a stdio transport gives a waiting request in place of a line it
cannot read (the session would drop the line, and the request wait out its timeout)."""


def _unreadable(line: bytes, redact: Redactor) -> str:
    """What is wrong with ``line`` (a stdio server's, not a JSON-RPC message), and the start
    of it, escaped and with its secrets replaced: ``not JSON: this is not json``."""
    try:
        parsed = json.loads(line.decode())
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 (byte {exc.start})"
    except ValueError:
        why = "not JSON"
    else:
        # a text written as half of a UTF-16 pair ("\\ud800"): JSON's escape allows it, no
        # character is it, and the SDK's parser refuses the line
        lone = lone_path(parsed, "$")
        why = "not a JSON-RPC message" if lone is None else f"not text (a lone surrogate at {lone})"
    shown = visible(redact(line[:200].decode("utf-8", "backslashreplace")), lines=False)
    more = len(line) > 200 or len(shown) > 120
    return f"{why}: {shown[:120]}" + ("..." if more else "")


def _unreadable_said(exc: BaseException) -> str | None:
    """What a stdio transport said of a line it could not read, if ``exc`` is its error."""
    from mcp.shared.exceptions import MCPError as SdkError

    exc = _leaf(exc)  # at a start, the SDK's error comes inside its task groups' groups
    if isinstance(exc, SdkError) and exc.data == _UNREADABLE:
        return exc.message
    return None


def _sent(said: str, when: str) -> str:
    """``sent a message that is not JSON during ...: this is not json`` (``said``: what
    :func:`_unreadable` said of it)."""
    why, _, excerpt = said.partition(": ")
    return f"sent a message that is {why} {when}: {excerpt}"


@contextlib.asynccontextmanager
async def _stdio(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path | None,
    redact: Redactor,
    errlog: _Tail,
    overlong: Callable[[], None],
    unreadable: Callable[[str, int], None],
) -> AsyncIterator[tuple[Any, Any]]:
    """A stdio transport for the MCP SDK's ``Client``: newline-delimited JSON-RPC on the
    server's stdin and stdout. Its own, not the SDK's ``stdio_client``, because that one joins
    a long line chunk by chunk (time the square of the line's length: a 50 MB answer takes
    minutes) and holds any length; here a line is gathered in one buffer, and a server that
    sends one over :data:`MAX_MESSAGE` bytes is stopped (``overlong`` is told). A line that is
    not a JSON-RPC message fails the request it answers (the one its id names, else the only
    one waiting) with an error saying what is wrong with it (``redact`` applied); otherwise
    ``unreadable`` is told, with how many requests wait. Ended as the spec says: stdin
    closed, a moment to exit, then its process group killed (what it started too, whether or
    not it is still running itself)."""
    import mcp_types
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process(
        argv, env=env, cwd=cwd, stderr=subprocess.PIPE, start_new_session=True
    )
    read_in, read_out = anyio.create_memory_object_stream[Any](0)
    write_in, write_out = anyio.create_memory_object_stream[Any](0)
    #: the ids of the requests sent that have no answer yet
    waiting: set[Any] = set()

    def parse(line: bytes) -> list[Any]:
        """The session's messages for ``line``: itself, or for a line it cannot read (it
        would drop it), an error for each request that waits on an answer."""
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            said = _unreadable(line, redact)
            # the request it answers: the one its id names, else (no id read) the only one
            # waiting; one with several waiting, or an id no waiting request has (a late
            # answer, the server's own request), cannot be told whose it is, and fails none
            named = _id_in(line)
            if named is None:
                ids = set(waiting) if len(waiting) == 1 else set()
            else:
                ids = waiting & {named}
            if not ids:
                unreadable(said, len(waiting))
                return []
            waiting.difference_update(ids)
            error = mcp_types.ErrorData(code=mcp_types.PARSE_ERROR, message=said, data=_UNREADABLE)
            return [
                SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=i, error=error))
                for i in sorted(ids, key=str)
            ]
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            waiting.discard(message.id)
        return [SessionMessage(message)]

    async def reader() -> None:
        assert process.stdout is not None
        buffer = bytearray()
        async with read_in:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in process.stdout:
                    start = 0
                    while (end := chunk.find(b"\n", start)) >= 0:
                        buffer += chunk[start:end]
                        start = end + 1
                        if buffer.strip():
                            for message in parse(bytes(buffer)):
                                await read_in.send(message)
                        buffer.clear()
                    buffer += chunk[start:]
                    if len(buffer) > MAX_MESSAGE:
                        overlong()
                        _kill(process)
                        return

    async def drain() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in process.stderr:
                errlog.add(chunk)

    async def writer() -> None:
        assert process.stdin is not None
        async with write_out:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for message in write_out:
                    sent = message.message
                    if isinstance(sent, mcp_types.JSONRPCRequest):
                        waiting.add(sent.id)
                    elif isinstance(sent, mcp_types.JSONRPCNotification) and (
                        sent.method == "notifications/cancelled"  # a call that timed out
                    ):
                        waiting.discard((sent.params or {}).get("requestId"))
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(drain)
        tg.start_soon(writer)
        try:
            yield read_out, write_in
        finally:
            with anyio.CancelScope(shield=True):
                await write_in.aclose()
                if process.stdin is not None:
                    with contextlib.suppress(OSError, anyio.BrokenResourceError):
                        await process.stdin.aclose()
                with anyio.move_on_after(2):
                    await process.wait()
                # the group, always: a server that ended may leave what it started running
                _kill(process)
                with anyio.move_on_after(2):
                    await process.aclose()  # its pipes closed, and it reaped
                await read_out.aclose()
            tg.cancel_scope.cancel()


def _id_in(line: bytes) -> object:
    """The id of the JSON-RPC message ``line`` (not a valid one), if it can be read: a
    request's (it has a method) is the server's own, none of the client's; None when none."""
    try:
        data = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    value = data.get("id")
    if "method" in data and value is not None:
        return _SERVERS_OWN
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


_SERVERS_OWN = object()
"""The id :func:`_id_in` gives a request of the server's own: no request of the client's."""


@final
class _Tail:
    """The end of what a server wrote on its stderr (what a failure quotes), never more than
    a few kilobytes however much it writes. What it quotes is shown on a terminal and kept in
    errors and the journal: its secrets are replaced (``redact``) and its control characters
    escaped (a server's ``ESC [2J`` or OSC 52 is seen, never obeyed)."""

    KEEP = 8192

    def __init__(self, redact: Redactor) -> None:
        self._data = bytearray()
        self._redact = redact

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * self.KEEP:
            del self._data[: -self.KEEP]

    def last_line(self) -> str:
        text = self._data[-self.KEEP :].decode("utf-8", "replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return visible(self._redact(lines[-1]), lines=False)[:300] if lines else ""


def _installed(program: Path, root: Path) -> tuple[Path, ...]:
    """What a confined server must read of its program where the sandbox would hide it (a
    sibling of the workspace, ``/tmp``): the program (as named, and the file a link names)
    and the install it runs from, when it is one: the virtualenv of a ``bin`` folder (its
    ``pyvenv.cfg``), the node prefix of one (its ``lib/node_modules``), the ``node_modules``
    of a ``node_modules/.bin``. Never a folder that holds the workspace (it would show the
    workspace's siblings again), nor one inside it (seen already)."""
    places: set[Path] = set()
    for path in {program.absolute(), program.resolve()}:
        folder, install = path.parent, path.parent.parent
        marked = (install / "pyvenv.cfg").is_file() or (install / "lib/node_modules").is_dir()
        if (folder.name == "bin" and marked) or (
            folder.name == ".bin" and install.name == "node_modules"
        ):
            places.add(install)
        else:
            places.add(path)
    return tuple(
        sorted(p for p in places if not (p == root or p in root.parents or root in p.parents))
    )


def _kill(process: Any) -> None:
    """Kill the server's whole process group (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


@final
class _Connection:
    """One server, started when first needed and again after it died; its client lives in a
    task of its own (the MCP SDK's transport must end in the task that started it)."""

    def __init__(
        self,
        name: str,
        server: MCPServer,
        root: Path,
        tg: TaskGroup,
        read_only: tuple[Path, ...] = (),
    ) -> None:
        self.name = name
        self.server = server
        self.root = root
        #: places in the workspace the server may read but not change (the run's journal)
        self.read_only = read_only
        self._tg = tg
        self._lock = anyio.Lock()
        self._client: Any = None
        self._stop = anyio.Event()
        self._ended = anyio.Event()
        #: set when the server's stream has ended: it died, or is being stopped
        self._gone = anyio.Event()
        self._stderr: _Tail | None = None
        #: why the server's answer was cut and the server stopped (a message over
        #: MAX_MESSAGE bytes; over HTTP, a compressed one too), or None
        self.cut: str | None = None
        #: how many calls wait on the server now
        self._calling = 0
        #: lines it sent that are not JSON-RPC messages and answered no call (the first is
        #: said), and what the last was (a call that then gets no answer quotes it)
        self._stray = 0
        self._stray_said = ""
        #: the tools' JSON Schemas by the server's names, for checking arguments
        self.validators: dict[str, Any] = {}

    def _transport(self) -> Any:
        server = self.server
        self.cut = None
        if server.url is not None:
            from interpreters.tools._mcp_http import capped_http

            return capped_http(server.url, server.headers, limit=MAX_MESSAGE, cut=self._cut_http)
        env = {k: os.environ[k] for k in (*_ENV_KEPT, *server.env) if k in os.environ}
        argv = list(server.argv)
        program = shutil.which(argv[0], path=env.get("PATH"))
        if program is None:
            raise MCPError(f"no program {argv[0]!r} is found (on PATH, or at that path)")
        if server.confined:
            problem = sandbox_problem()
            if problem is not None:
                raise MCPError(
                    f"MCP server {self.name!r} cannot be confined: {problem}; install bubblewrap, "
                    "or run it unconfined (MCPServer.stdio(..., confined=False), --mcp "
                    f"'{self.name}[unconfined]=...')"
                )
            argv = bwrap_argv(
                argv,
                root=self.root,
                cwd=self.root,
                network=server.network,
                readable=_installed(Path(program), self.root),
                read_only=self.read_only,
            )
            if "HOME" not in server.env:
                env["HOME"] = "/tmp"  # the sandbox's own, empty
        redact = Redactor.from_env()
        self._stderr = _Tail(redact)  # its last line says why it failed
        return _stdio(
            argv,
            env=env,
            cwd=None if server.confined else self.root,
            redact=redact,
            errlog=self._stderr,
            overlong=self._overlong,
            unreadable=self._unreadable,
        )

    def _overlong(self) -> None:
        self.cut = f"over {MAX_MESSAGE // 2**20} MB"

    def _unreadable(self, said: str, waiting: int) -> None:
        self._stray += 1
        self._stray_said = said
        # the first only: a server that writes junk without end fills no one's terminal
        if self._stray == 1:
            calls = "a call" if waiting == 1 else f"{waiting} calls"
            when = (
                "between calls (ignored)"
                if not waiting
                else f"while {calls} waited (ignored: it cannot be told whose answer it is)"
            )
            _say(
                f"MCP server {self.name!r} {_sent(said, when)} "
                "(any more such lines are ignored unsaid)"
            )

    def _cut_http(self, why: str) -> None:
        """An HTTP server's answer was cut: its session is stopped, as a stdio server is
        killed (a call waiting on it fails naming ``why``; one cut between calls, on the
        stream of the server's own, is ended now and said when the next call starts it
        again)."""
        self.cut = why
        self._gone.set()
        if not self._calling:
            self._stop.set()  # (a call ends it itself, once the SDK has failed the call)

    async def _serve(
        self, stop: anyio.Event, ended: anyio.Event, *, task_status: TaskStatus[Any]
    ) -> None:
        from interpreters.tools._mcp_version import mcp_problem

        problem = mcp_problem()  # missing, or a version before 2
        if problem is not None:
            raise MCPError(f"MCP servers need the mcp extra: {problem}")
        try:
            from mcp import Client
        except ImportError:
            raise MCPError("MCP servers need the mcp extra: pip install 'opdsl[mcp]'") from None
        started = False
        try:
            transport = _watched(self._transport(), self._gone)
            async with Client(transport, mode="legacy", cache=None) as client:
                started = True
                task_status.started(client)
                await stop.wait()
        except Exception:
            if not started:
                raise
            # the transport of a server that died ends in errors of its own: nothing to keep
        finally:
            ended.set()

    async def client(self) -> Any:
        """The running client, started (again) if it is not running."""
        async with self._lock:
            if self._client is not None and self._gone.is_set():
                # it died, or was stopped, between calls: ended, and started again
                said, cut = self._said(), self.cut
                await self._end()
                why = f"sent a message {cut}, and was stopped" if cut else f"had ended{said}"
                _say(f"MCP server {self.name!r} {why}; it is started again")
            if self._client is None:
                self._stop, self._ended, self._gone = anyio.Event(), anyio.Event(), anyio.Event()
                try:
                    with anyio.fail_after(self.server.start_timeout):
                        self._client = await self._tg.start(self._serve, self._stop, self._ended)
                except TimeoutError:
                    raise MCPError(
                        f"MCP server {self.name!r} did not finish starting within "
                        f"{self.server.start_timeout:g}s{self._said()}"
                    ) from None
                except Exception as exc:
                    unreadable = _unreadable_said(exc)
                    why = _reason(exc) if unreadable is None else _sent(unreadable, "at start")
                    raise MCPError(
                        f"MCP server {self.name!r} ({self._what()}) cannot start: "
                        f"{why}{self._said()}"
                    ) from None
            return self._client

    def _what(self) -> str:
        return self.server.url or shlex.join(self.server.argv)

    def _said(self) -> str:
        """The last line the server wrote on its stderr, if any."""
        line = "" if self._stderr is None else self._stderr.last_line()
        return f" (its stderr: {line})" if line else ""

    async def end(self) -> None:
        """Stop the server, if it runs, and wait until it has ended."""
        async with self._lock:
            await self._end()

    async def _end(self) -> None:
        if self._client is not None:
            self._client = None
            self._stop.set()
            await self._ended.wait()
        self._stderr = None

    async def list_tools(self) -> list[Any]:
        """The server's tools, every page of them; a server that cannot list them (no answer
        within its ``start_timeout``, an error, an end) is an :class:`MCPError` naming it."""
        client = await self.client()
        tools: list[Any] = []
        cursor = None
        try:
            with anyio.fail_after(self.server.start_timeout):
                for _ in range(100):
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except ValidationError as exc:
            raise MCPError(
                f"MCP server {self.name!r} lists tools that are not MCP tools: "
                f"{_listing_problem(exc)}"
            ) from None
        except TimeoutError:
            raise MCPError(
                f"MCP server {self.name!r} did not list its tools within "
                f"{self.server.start_timeout:g}s{self._said()}"
            ) from None
        except Exception as exc:
            raise MCPError(f"MCP server {self.name!r} {self._unlisted(exc)}") from None
        return tools

    def _unlisted(self, exc: Exception) -> str:
        """Why the server could not list its tools, ``exc`` said in words."""
        from mcp.shared.exceptions import MCPError as SdkError
        from mcp_types import CONNECTION_CLOSED

        unreadable = _unreadable_said(exc)
        if unreadable is not None:
            return _sent(unreadable, "when asked for its tools")
        if self.cut is not None:
            return f"sent its tools {self.cut}, and was stopped"
        closed = isinstance(exc, SdkError) and exc.code == CONNECTION_CLOSED
        if closed or isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError):
            return f"ended when asked for its tools{self._said()}"
        if isinstance(exc, SdkError):
            return f"cannot list its tools: it says {exc.message[:300]!r} (error {exc.code})"
        return f"cannot list its tools: {_reason(exc)}"

    async def call(self, tool: str, shown: str, arguments: dict[str, Any]) -> ToolResult:
        """Call the server's ``tool`` (``shown``: its opdsl name); every failure a result."""
        validator = self.validators.get(tool)
        if validator is not None:
            try:
                problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
            except Exception as exc:  # a schema the listing's checks let through
                return ToolResult.failure(
                    f"MCP server {self.name!r}: the input schema of tool {shown!r} cannot check "
                    f"arguments: {_reason(exc)}"
                )
            if problems:
                said = "; ".join(
                    f"{'.'.join(map(str, p.path)) or '(arguments)'}: {p.message}"
                    for p in problems[:5]
                )
                return ToolResult.failure(f"invalid arguments for tool {shown!r}: {said}")
        try:
            client = await self.client()
        except MCPError as exc:
            return ToolResult.failure(str(exc))
        self._calling += 1
        stray = self._stray
        try:
            with anyio.fail_after(self.server.timeout):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            # a line it could not read, sent while this call waited, may have been its answer
            meanwhile = (
                f"; it {_sent(self._stray_said, 'meanwhile')}" if self._stray != stray else ""
            )
            return ToolResult.failure(
                f"MCP server {self.name!r} gave no answer to {shown!r} within "
                f"{self.server.timeout:g}s{meanwhile}"
            )
        except Exception as exc:
            return await self._failed(shown, exc)
        finally:
            self._calling -= 1
        text = _capped(_text_of(result))
        if result.is_error:
            return ToolResult.failure(f"{shown}: {text or 'the server says the call failed'}")
        return ToolResult(output=text)

    async def _failed(self, shown: str, exc: Exception) -> ToolResult:
        """The call to ``shown`` that ended in ``exc``: the server's own error, or the server
        gone or stopped (it is ended, and started again at the next call)."""
        from mcp.shared.exceptions import MCPError as SdkError
        from mcp_types import CONNECTION_CLOSED

        unreadable = _unreadable_said(exc)
        if unreadable is not None:
            return ToolResult.failure(
                f"MCP server {self.name!r} {_sent(unreadable, f'during the call to {shown!r}')}"
            )
        closed = isinstance(exc, SdkError) and exc.code == CONNECTION_CLOSED
        broken = isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError)
        if not (closed or broken or self.cut is not None):
            return ToolResult.failure(f"MCP server {self.name!r}, tool {shown!r}: {_reason(exc)}")
        said, cut = self._said(), self.cut
        await self.end()
        if cut is not None:
            return ToolResult.failure(
                f"MCP server {self.name!r} sent an answer to {shown!r} {cut}, and was stopped; "
                "it is started again at the next call"
            )
        return ToolResult.failure(
            f"MCP server {self.name!r} ended during the call to {shown!r}{said}; it is started "
            "again at the next call"
        )


def _listing_problem(exc: ValidationError) -> str:
    """A listing's first problems, one line: ``tools.9.inputSchema.type: Input should be ...``."""
    errors = exc.errors(include_url=False)
    said = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors[:3])
    return said + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else "")


def _say(line: str) -> None:
    sys.stderr.write(f"opdsl: warning: {line}\n")


def _leaf(exc: BaseException) -> BaseException:
    """``exc``, or an exception group's first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException) -> str:
    """An exception in one line (an exception group: its first leaf)."""
    exc = _leaf(exc)
    text = " ".join(str(exc).split())[:500]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _tool_name(prefix: str, raw: str) -> str | None:
    """The opdsl name of the server's tool ``raw``, or None when no model API would take it."""
    name = prefix + raw.translate(_SAFE)
    return name if _NAME.match(name) else None


@final
class MCPTools:
    """The servers of one run (or one worker), their tools bound as opdsl tools
    (:func:`open_mcp` makes one)."""

    def __init__(self) -> None:
        self.tools: list[BoundTool] = []
        #: by server name: the server as recorded, and its tools as offered at the start
        self.recorded: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []
        self.connections: dict[str, _Connection] = {}

    def record(self, config_json: str) -> str:
        """``config_json`` (a run's config) with the servers and their tool lists added."""
        if not self.recorded:
            return config_json
        from state import canonical_json

        return canonical_json({**json.loads(config_json), "mcp": self.recorded})

    def _warn(self, line: str) -> None:
        if line in self.warnings:
            return
        self.warnings.append(line)
        sys.stderr.write(f"opdsl: warning: {line}\n")

    async def _bind(self, name: str, server: MCPServer, conn: _Connection) -> None:
        prefix = f"{name}_" if server.prefix is None else server.prefix
        listed = await conn.list_tools()
        seen: dict[str, int] = {}
        #: the server's names of its tools by the name each would have here (a.b, a_b: s_a_b)
        named: dict[str, set[str]] = {}
        for t in listed:
            seen[t.name] = seen.get(t.name, 0) + 1
            named.setdefault(_tool_name(prefix, t.name) or "", set()).add(t.name)
        offered = []
        for t in listed:
            shown = _tool_name(prefix, t.name)
            validator, problem = _validator(t.input_schema)
            if seen[t.name] > 1:
                problem = "the server lists it more than once"
            elif shown is not None and len(named[shown]) > 1:
                problem = (
                    f"{' and '.join(repr(n[:80]) for n in sorted(named[shown]))} would both "
                    f"be named {shown!r}"
                )
            elif shown is None:
                problem = "no model API takes that name (letters, digits, '_', '-'; 64 at most)"
            if problem is not None:
                self._warn(f"MCP server {name!r}: tool {t.name[:80]!r} is left out: {problem}")
                continue
            assert shown is not None
            conn.validators[t.name] = validator
            description = " ".join((t.description or "").split())[:2000]
            spec = ToolSpec(name=shown, description=description, parameters=dict(t.input_schema))
            self.tools.append(_bound(conn, t.name, spec))
            offered.append(
                {
                    "name": shown,
                    "tool": t.name,
                    "description": description,
                    "parameters": spec.parameters,
                }
            )
        self.recorded[name] = {"server": server.to_json(), "tools": offered}


def _bound(conn: _Connection, tool: str, spec: ToolSpec) -> BoundTool:
    async def call_mcp(arguments: dict[str, Any]) -> ToolResult:
        return await conn.call(tool, spec.name, arguments)

    bound = BoundTool(
        name=spec.name, fn=call_mcp, args_model=_Arguments, description=spec.description
    )
    bound.spec = spec  # the server's own schema, not the pass-through model's
    bound.server = conn.name
    return bound


def _refuse_twice(served: MCPTools) -> None:
    """Two servers that give one name to their tools are refused, naming both."""
    from op import DuplicateTool

    owner: dict[str, str] = {}
    twice: list[str] = []
    for server, rec in served.recorded.items():
        for t in rec["tools"]:
            if t["name"] in owner:
                twice.append(f"{owner[t['name']]!r} and {server!r} both offer {t['name']!r}")
            owner.setdefault(t["name"], server)
    if twice:
        more = f" (and {len(twice) - 1} more)" if len(twice) > 1 else ""
        raise DuplicateTool(
            f"MCP servers {twice[0]}{more}; give a server a prefix of its own {PREFIX_HINT}"
        )


@final
@dataclass(frozen=True)
class _Depended:
    """The tool names a run's journal depends on (``every``: a model was offered them all)."""

    names: frozenset[str] = frozenset()
    every: bool = False

    def __contains__(self, tool: object) -> bool:
        return self.every or tool in self.names


def _depended_on(entries: Iterable[Any]) -> _Depended:
    """The tool names a run's journal depends on: called, offered to a model (by name, or
    ``tools="all"``), or served to an agent (``agent(..., tools=[...])``)."""
    names: set[str] = set()
    every = False
    for e in entries:
        if e.kind not in (Tool.kind, Infer.kind, Agent.kind):
            continue
        try:
            effect = json.loads(e.effect_json)
        except (TypeError, ValueError, RecursionError):
            continue
        if not isinstance(effect, dict):
            continue
        if e.kind == Tool.kind and isinstance(effect.get("name"), str):
            names.add(effect["name"])
        options = effect.get("options")
        tools = effect.get("tools") if e.kind == Infer.kind else None
        if e.kind == Agent.kind and isinstance(options, dict):
            tools = options.get("tools")
        if tools == "all":
            every = True
        elif isinstance(tools, list):
            names.update(t for t in tools if isinstance(t, str))
    return _Depended(frozenset(names), every)


def _compare(
    run_id: str,
    recorded: Mapping[str, Any],
    now: Mapping[str, Any],
    depended: _Depended,
    accept: bool,
    warn: Callable[[str], None],
) -> None:
    """Say what the servers offer now that they did not when the run started (rule 6)."""
    refused = []
    for server in sorted(set(recorded) | set(now)):
        was = {t["name"]: t for t in (recorded.get(server) or {}).get("tools", [])}
        has = {t["name"]: t for t in (now.get(server) or {}).get("tools", [])}
        for tool in sorted(set(was) | set(has)):
            if tool not in has:
                change = "no longer offers"
            elif tool not in was:
                warn(f"run {run_id}: MCP server {server!r} now offers {tool!r} as well")
                continue
            elif was[tool]["parameters"] != has[tool]["parameters"]:
                change = "now takes other arguments for"
            elif was[tool]["description"] != has[tool]["description"]:
                change = "now describes otherwise"
            else:
                continue
            line = f"MCP server {server!r} {change} {tool!r}"
            if tool in depended and change != "now describes otherwise" and not accept:
                refused.append(line)
            else:
                warn(f"run {run_id}: {line} (recorded at the run's start)")
    if refused:
        raise MCPToolsChanged(
            f"run {run_id} depends on MCP tools that changed since it started: "
            f"{'; '.join(refused)}; pass --accept-changed-code (accept_changed_code=True) to go on "
            "with what the servers offer now"
        )


@contextlib.asynccontextmanager
async def open_mcp(
    servers: Mapping[str, MCPServer] | None,
    *,
    root: str | Path | None = None,
    recorded: Mapping[str, Any] | None = None,
    entries: Iterable[Any] = (),
    run_id: str = "",
    accept: bool = False,
    read_only: Iterable[str | Path] = (),
) -> AsyncIterator[MCPTools]:
    """Start ``servers``, bind their tools, and end them all on the way out.

    ``root``: the folder a stdio server may write (the run's workspace; default: the current
    folder). ``recorded``: the tool lists a resumed run recorded, compared with what the
    servers offer now (``entries``: its journal, for what depends on them; ``accept``: a
    change is a warning, never a refusal). ``read_only``: places in ``root`` a stdio server
    may read but not change (the run's journal file, with its SQLite sidecars, when it lies in
    the workspace).

    Example:
        >>> import anyio
        >>> async def none() -> int:
        ...     async with open_mcp({}) as served:
        ...         return len(served.tools)
        >>> anyio.run(none)
        0
    """
    served = MCPTools()
    if not servers:
        if recorded:
            _compare(run_id, recorded, {}, _depended_on(entries), accept, served._warn)
        yield served
        return
    where = Path(root if root is not None else os.getcwd()).resolve()
    guarded = tuple(sorted(Path(os.path.realpath(p)) for p in read_only))
    for name in servers:
        if not _NAME.match(name):
            raise MCPError(f"MCP server name {name!r}: letters, digits, '_' or '-', 64 at most")
    try:
        async with (
            anyio.create_task_group() as tg,
            _serving(served, servers, where, tg, recorded, entries, run_id, accept, guarded),
        ):
            yield served
    except BaseExceptionGroup as group:
        # the task group wraps what the run raised (a divergence, an interrupt): one error,
        # as it came, unless several really happened at once
        leaves = group.exceptions
        if len(leaves) == 1:
            raise leaves[0] from leaves[0].__cause__
        raise


@contextlib.asynccontextmanager
async def _serving(
    served: MCPTools,
    servers: Mapping[str, MCPServer],
    where: Path,
    tg: TaskGroup,
    recorded: Mapping[str, Any] | None,
    entries: Iterable[Any],
    run_id: str,
    accept: bool,
    read_only: tuple[Path, ...],
) -> AsyncIterator[None]:
    """The servers started (at once), their tools bound and compared; all ended after."""
    try:
        for name, server in servers.items():
            served.connections[name] = _Connection(name, server, where, tg, read_only)
        failed: list[MCPError] = []

        async def start(conn: _Connection) -> None:
            try:
                await conn.client()
            except MCPError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as starting:  # at once: each takes a while
            for conn in served.connections.values():
                starting.start_soon(start, conn)
        if failed:
            raise failed[0]
        for name, server in servers.items():
            await served._bind(name, server, served.connections[name])
        _refuse_twice(served)
        if recorded is not None:
            _compare(run_id, recorded, served.recorded, _depended_on(entries), accept, served._warn)
        yield
    finally:
        with anyio.CancelScope(shield=True):
            for conn in served.connections.values():
                await conn.end()


def mcp_servers(specs: Iterable[str]) -> dict[str, MCPServer]:
    """The servers ``--mcp`` options name (:func:`parse_mcp`), by name; a name given twice is
    refused."""
    out: dict[str, MCPServer] = {}
    for spec in specs:
        name, server = parse_mcp(spec)
        if name in out:
            raise MCPError(f"--mcp names the server {name!r} twice")
        out[name] = server
    return out


def listed_tools(
    servers: Mapping[str, MCPServer] | None, *, root: str | Path | None = None
) -> list[BoundTool]:
    """The servers' tools as they list them, the servers ended again: what a dry run binds
    (it calls none of them; a call would say the server is not running)."""
    if not servers:
        return []

    async def listing() -> list[BoundTool]:
        async with open_mcp(servers, root=root) as served:
            return list(served.tools)

    return anyio.run(listing)
