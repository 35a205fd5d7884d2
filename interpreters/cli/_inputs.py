"""What the user types, read and checked before anything runs: program arguments, tools, a
state class, a workspace folder. A bad one is a :class:`UsageError` that names it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from interpreters.cli._command import UsageError

__all__ = [
    "check_call",
    "load_tools",
    "model_spec",
    "models_timed",
    "program_args",
    "state_class",
    "version",
    "workspace",
]


def program_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``--arg NAME=VALUE`` pairs as keywords: VALUE is JSON, or else the text itself."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--arg {pair!r}: expected NAME=VALUE, NAME a Python identifier")
        if name in out:
            raise UsageError(f"--arg {name} is given twice")
        try:
            out[name] = json.loads(raw)
        except RecursionError:
            raise UsageError(f"--arg {name}: the JSON value is nested too deeply") from None
        except ValueError:
            out[name] = raw  # not JSON: the text itself
        _journaled_depth(name, out[name])
    return out


def _journaled_depth(name: str, value: object) -> None:
    """A value nested deeper than the journal writes is refused here, naming the argument
    (a value the journal cannot hold otherwise, such as NaN, is refused as the run starts)."""
    from state import NotSerializable, canonical_json

    try:
        canonical_json(value)
    except RecursionError:
        raise UsageError(f"--arg {name}: the JSON value is nested too deeply") from None
    except NotSerializable:
        pass


def check_call(program: Callable[..., Any], ref: str, kwargs: dict[str, Any]) -> None:
    """The program takes these keywords, or a :class:`UsageError` saying how it does not."""
    import inspect

    try:
        inspect.signature(program).bind(**kwargs)
    except TypeError as exc:
        raise UsageError(f"{ref}: {exc} (pass program arguments as --arg NAME=VALUE)") from None


def load_tools(refs: Sequence[str]) -> list[Any]:
    from interpreters._durable import ProgramNotFound, load_tools

    try:
        return load_tools(refs)
    except ProgramNotFound as exc:
        raise UsageError(f"--tools: {exc}") from None


def model_spec(spec: str | None) -> str | None:
    """``spec``, once the model it names can be made: a spec that cannot (an unknown
    provider, a URL that is not one, a script that cannot be read, a setting out of range)
    is a :class:`UsageError` saying why, before anything runs."""
    from interpreters.models._base import resolve_model

    if spec is None:
        return None
    try:
        resolve_model(spec)
    except ValueError as exc:  # resolve_model's word for a spec it cannot make a model of
        raise UsageError(str(exc)) from None
    return spec


@contextlib.contextmanager
def models_timed(raw: str | None) -> Iterator[None]:
    """``--model-timeout SECONDS``: every model made within takes at most that long a call
    (retries included), passed to the models as a value of this command's context, never
    through the process's environment. A bad number is a :class:`UsageError` naming it."""
    if raw is None:
        yield
        return
    from interpreters.models._remote import seconds_setting

    try:
        seconds = seconds_setting("--model-timeout", raw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from interpreters.models._http import MODEL_TIMEOUT

    token = MODEL_TIMEOUT.set(seconds)
    try:
        yield
    finally:
        MODEL_TIMEOUT.reset(token)


def state_class(ref: str) -> type[Any]:
    """The class ``--state module:Class`` names, which must be a CRDTModel."""
    from interpreters._durable import load_object
    from state import CRDTModel

    cls = load_object(ref, "state type")
    if not (isinstance(cls, type) and issubclass(cls, CRDTModel)):
        raise UsageError(f"--state {ref!r} is not a CRDTModel class")
    return cls


def workspace(path: str | None) -> str | None:
    if path is not None and not Path(path).is_dir():
        what = "is not a folder" if Path(path).exists() else "does not exist"
        raise UsageError(f"--workspace {path}: {what}")
    return path


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opdsl")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"
