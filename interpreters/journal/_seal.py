"""Which runs of a journal are the user's own: the seal.

A journal file can come from anywhere: a colleague's laptop, a CI artifact, a download. What a
run records would, on a resume or a replay, import code (its program, tools and state type),
send an API key (its model's URL), start commands (its MCP servers) and change a folder (its
workspace). So a run this user's opdsl started carries a seal in its config: an HMAC-SHA256,
under a key only this user can read, of its id, program, arguments, initial state, parent and
the rest of its config.

A run without a valid seal is *foreign*: imported (``opdsl import``), written by another user
or on another machine, by an opdsl that did not seal runs yet, or changed since. A foreign run
uses nothing its record names until the user names it again, as an imported run always did;
``opdsl trust`` vouches for a file the user knows (their own, from before seals), sealing its
runs. A fork carries its parent's seal (the same program, arguments and config) or none.

The key lives in ``$OPDSL_SEAL_KEY``, else ``$XDG_CONFIG_HOME/opdsl/seal.key`` (by default
under ``~/.config``), made on first use, readable by its owner alone; confined commands never
see it (the sandbox binds ``/dev/null`` in its place). Whoever can read it can seal runs as yours.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import stat
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from interpreters.journal._base import Journal, JournalError, RunRecord
from state import canonical_json

__all__ = [
    "FOREIGN",
    "SEAL",
    "SealKeyError",
    "config_of",
    "foreign",
    "key_path",
    "seal_key",
    "seal_record",
    "sealed_if_can",
    "unsealed",
    "vouch_for",
]

SEAL = "seal"
"""The config's key that holds a run's seal."""
FOREIGN = "foreign"
"""The key :func:`config_of` sets to why a run is not the user's own (absent when it is)."""
_KEY_BYTES = 32
_DOMAIN = b"opdsl run seal 1\n"


class SealKeyError(JournalError):
    """The seal key cannot be read or made, or others could read it."""


def key_path() -> Path:
    """Where the seal key is: ``$OPDSL_SEAL_KEY``, else ``opdsl/seal.key`` in the user's
    config folder (``$XDG_CONFIG_HOME``, else ``~/.config``)."""
    named = os.environ.get("OPDSL_SEAL_KEY")
    if named:
        path = Path(named).expanduser()
        if not path.is_absolute():  # a key of each folder it is run in: one a command could leave
            raise SealKeyError(f"OPDSL_SEAL_KEY is a relative path ({named}); give an absolute one")
        return path
    config = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):  # unset, or relative: ignored, as the XDG spec says
        try:
            config = str(Path.home() / ".config")
        except RuntimeError:
            raise SealKeyError(
                "no home folder to keep the seal key in; set OPDSL_SEAL_KEY to a file of yours"
            ) from None
    return Path(config) / "opdsl" / "seal.key"


_KEYS: dict[Path, bytes] = {}
# the path each setting of the variables key_path reads gave (a run's start asks for the key
# more than once)
_PATHS: dict[tuple[str | None, ...], Path] = {}


def seal_key() -> bytes:
    """The user's seal key, made on first use (32 random bytes, mode 0600 in a folder of mode
    0700). A key file that others may read or write is refused: anyone who can read it can
    seal a run as the user's."""
    env = os.environ
    setting = (env.get("OPDSL_SEAL_KEY"), env.get("XDG_CONFIG_HOME"), env.get("HOME"))
    path = _PATHS.get(setting)
    if path is None:
        path = key_path()
        if len(_PATHS) < 16:
            _PATHS[setting] = path
    key = _KEYS.get(path)
    if key is None:
        key = _KEYS[path] = _read_or_make(path)
    return key


def _make(path: Path) -> None:
    """A new key at ``path`` unless one is there: written whole beside it, then linked into
    place, so that a process that comes first to a missing key never reads a part of one."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists():
        return
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".seal-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(_KEY_BYTES).hex().encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another process's came first: that one
            os.link(temp, path)
    finally:
        os.unlink(temp)


def _read_or_make(path: Path) -> bytes:
    try:
        _make(path)
        # never blocks (a FIFO in its place), never follows a link
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            text = os.read(fd, 4 * _KEY_BYTES) if stat.S_ISREG(info.st_mode) else b""
        finally:
            os.close(fd)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):
            why = "a folder on its path is a file"
        elif exc.errno == errno.ELOOP:
            why = "it is a symbolic link"
        raise SealKeyError(
            f"the seal key {path} cannot be read or made ({why}); set OPDSL_SEAL_KEY to a "
            "file of your own"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise SealKeyError(f"the seal key {path} is not a regular file")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise SealKeyError(
            f"the seal key {path} is not yours alone (owner uid {info.st_uid}, mode "
            f"{stat.S_IMODE(info.st_mode):o}): whoever can read it can seal runs as yours; "
            "remove it and a new one is made (your runs are then foreign until `opdsl trust` "
            f"vouches for them), or, if no one else could have read or written it, chmod 600 {path}"
        )
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        raise SealKeyError(
            f"the seal key {path} is not {_KEY_BYTES} bytes in hex; remove it and a new one "
            "is made (runs sealed with it are then foreign until `opdsl trust` vouches for them)"
        )
    return key


_DIGESTS: dict[tuple[Any, ...], str] = {}
"""Seals made lately, by what they were made of (a run's start seals the caller's record,
checks that seal, then seals the run: the first two are the same for every run)."""
_KEPT_TEXT = 4096  # a record holding more (a large state) is not kept alive for its seal


def _digest(record: RunRecord, config: Mapping[str, Any], read_from: str | None = None) -> str:
    """The seal of ``record`` with ``config``: what it is (its id, program, arguments, the
    state it started with, the run and checkpoint it was forked from) and its config.
    ``read_from``: the text ``config`` was read from, unchanged (the seal is then kept)."""
    state = None if record.state_json is None else json.loads(record.state_json)
    fixed = [record.run_id, record.program, json.loads(record.args_json), state]
    fixed += [record.parent_run, record.fork_checkpoint]
    key: tuple[Any, ...] | None = None
    texts = (record.args_json, record.state_json or "", read_from or "")
    if read_from is not None and sum(map(len, texts)) <= _KEPT_TEXT:
        key = (seal_key(), record.run_id, record.program, record.args_json, record.state_json)
        key += (record.parent_run, record.fork_checkpoint, read_from)
        found = _DIGESTS.get(key)
        if found is not None:
            return found
    rest = {k: v for k, v in config.items() if k != SEAL}
    message = canonical_json([*fixed, rest]).encode()
    made = hmac.new(seal_key(), _DOMAIN + message, hashlib.sha256).hexdigest()
    if key is not None:
        if len(_DIGESTS) >= 256:
            _DIGESTS.clear()
        _DIGESTS[key] = made
    return made


def _parsed(record: RunRecord) -> dict[str, Any]:
    try:
        config = json.loads(record.config_json or "{}")
    except (ValueError, RecursionError):
        raise JournalError(f"run {record.run_id}: its recorded config is not JSON") from None
    if not isinstance(config, dict):
        raise JournalError(
            f"run {record.run_id}: its recorded config is a JSON {type(config).__name__}, "
            "not an object"
        )
    return config


def _reason(record: RunRecord, config: Mapping[str, Any]) -> str | None:
    source = config.get("imported_from")
    if source:
        return f"was imported from {source}"
    seal = config.get(SEAL)
    if isinstance(seal, str):
        try:
            want = _digest(record, config, record.config_json)
        except (ValueError, RecursionError):
            want = ""  # its arguments or state are not JSON: never sealed
        if want and hmac.compare_digest(seal.encode("utf-8", "replace"), want.encode()):
            return None
    return (
        "is not sealed as yours (written by another user, on another machine, by an opdsl "
        "before seals or while your seal key could not be read, or changed since; `opdsl "
        "trust` vouches for a run you know)"
    )


def foreign(record: RunRecord) -> str | None:
    """Why ``record`` is not a run of this user's own (``was imported from FILE``, ``is not
    sealed as yours (...)``), or None when its seal holds."""
    return _reason(record, _parsed(record))


def config_of(record: RunRecord) -> dict[str, Any]:
    """The config ``record`` holds, with :data:`FOREIGN` set to why it is foreign (what every
    decision to trust it reads), or left out when its seal holds; a config that is not a JSON
    object is a :class:`JournalError`."""
    config = _parsed(record)
    reason = _reason(record, config)  # a config this user sealed holds no FOREIGN
    config.pop(FOREIGN, None)
    if reason is not None:
        config[FOREIGN] = reason
    return config


def unsealed(config_json: str) -> str:
    """``config_json`` without a seal (what leaves this machine, or was not sealed here); a
    config that is not JSON as it is."""
    try:
        config = json.loads(config_json or "{}")
    except (ValueError, RecursionError):
        return config_json
    if not isinstance(config, dict) or (SEAL not in config and FOREIGN not in config):
        return config_json
    config.pop(SEAL, None)
    config.pop(FOREIGN, None)
    return canonical_json(config)


def seal_record(record: RunRecord) -> RunRecord:
    """``record`` with its config sealed as this user's (a run they start, or vouch for)."""
    config = json.loads(record.config_json or "{}")
    as_read = FOREIGN not in config and "imported_from" not in config
    config.pop(FOREIGN, None)
    config.pop("imported_from", None)  # a run the user vouches for is theirs, not imported
    config[SEAL] = _digest(record, config, record.config_json if as_read else None)
    return record.model_copy(update={"config_json": canonical_json(config)})


def sealed_if_can(record: RunRecord) -> RunRecord:
    """:func:`seal_record`, or ``record`` as it is, said in a warning, when the seal key
    cannot be had: the run goes on, and is resumed as a foreign one is."""
    try:
        return seal_record(record)
    except SealKeyError as exc:
        warnings.warn(f"run not sealed as yours: {exc}", stacklevel=3)
        return record


def vouch_for(journal: Journal, run_ids: Iterable[str]) -> list[RunRecord]:
    """Seal the runs ``run_ids`` of ``journal`` as the user's own (``opdsl trust``): from now
    on they resume and replay with the code, model, workspace and MCP servers they name, as
    runs the user started do. Returns the runs sealed now (one already sealed is left as it
    is). Every run is looked up and its seal made before any is written."""
    records = [journal.run(run_id) for run_id in dict.fromkeys(run_ids)]
    configs = {}
    for record in records:
        if foreign(record) is None:
            continue
        try:
            configs[record.run_id] = seal_record(record).config_json
        except (ValueError, RecursionError):
            raise JournalError(
                f"run {record.run_id}: its arguments or state are not JSON (or nested too "
                "deep to read); it cannot be sealed"
            ) from None
    for run_id, config in configs.items():
        journal.set_config(run_id, config)
    return [r for r in records if r.run_id in configs]
