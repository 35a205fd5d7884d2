"""Content by reference (a claim-check): what a run holds travels through Temporal as hashes,
its text kept once in a content store that every worker and client reaches.

Temporal keeps every payload (a workflow's input and result, each activity's input and result)
in the run's history, and refuses one over the server's ``limit.blobSize.error`` (2 MiB by
default). A long conversation is far more than that, so what recurs is stored once and named:

- a payload with ``pieces`` (the pieces of content its texts refer to, ``journal._content``)
  is written with each piece in the store and only their hashes in the payload (encoding
  ``json/opdsl-pieces``);
- a payload still over :attr:`ContentCodec.threshold` is written whole to the store and
  stands in the history as its hash (encoding ``binary/opdsl-stored``).

:class:`ContentCodec` does both, as Temporal's payload codec: it runs on every client and
worker, outside the workflow sandbox, before a payload leaves and after one arrives, so the
workflow sees whole values and its determinism is untouched (a piece is named by the SHA-256
of its text and never changes: every read of a hash gives the bytes the first write gave, and
a read checks it). A piece is in the store, written and synced, before the payload that names
it is sent: a worker that dies leaves nothing a reference needs behind it.

The store is an interface of two methods (:class:`ContentStore`); :class:`DirectoryStore`
keeps each piece as an immutable file named by its hash, written atomically. On one machine
any folder does; for a cluster of machines every worker and client must see the same folder
(a shared file system) or a store of their own built on a bucket. Where the content lives is
chosen by ``OPDSL_TEMPORAL_CONTENT`` (see :func:`content_store`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final, final

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from op import Fatal, OpdslError

__all__ = [
    "DEFAULT_PAYLOAD_LIMIT",
    "ENV",
    "NO_STORE_HINT",
    "TemporalLimit",
    "ContentCodec",
    "ContentMissing",
    "ContentStore",
    "DirectoryStore",
    "content_store",
    "size_text",
]

ENV: Final = "OPDSL_TEMPORAL_CONTENT"
"""Where the content of runs on Temporal lives: a folder, or ``inline`` for none (content
travels in the payloads themselves, under Temporal's payload limit)."""

INLINE: Final = "inline"

DEFAULT_PAYLOAD_LIMIT: Final = 2 * 1024 * 1024
"""Temporal's ``limit.blobSize.error`` unless the server says otherwise."""

KNOWN_FOR: Final = 600.0
"""Seconds a codec trusts that what it put is still stored (it puts it again after)."""

_PIECES: Final = b"json/opdsl-pieces"
_STORED: Final = b"binary/opdsl-stored"
_STORE_KEY: Final = "opdsl-store"
_MARK: Final = b'"pieces":{"'  # a payload's non-empty top-level pieces (sorted, compact JSON)


NO_STORE_HINT: Final = (
    f"give every worker and client a content store ({ENV}=FOLDER, a folder they all reach) "
    "so content travels by reference, or raise the server's limit.blobSize.error"
)
"""What to do about a payload over the limit when content travels inline."""


def size_text(n: int) -> str:
    """A size for people: ``2.00 MiB``, ``64 KiB``."""
    return f"{n / 1024 / 1024:.2f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB"


class ContentMissing(OpdslError):
    """A reference names content the store does not hold (or holds with other bytes)."""


class TemporalLimit(OpdslError, Fatal):
    """A run would pass one of Temporal's limits: it ends there, saying which and what to do."""


def _name(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # as journal._content.digest hashes it


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


class ContentStore(ABC):
    """Immutable content named by the SHA-256 of its bytes. ``put`` returns once the content
    is durable; a name put once is never put with other bytes."""

    #: where the content is, for people (in errors)
    where: str = "?"
    #: a name of this store, the same for every process that shares it
    ident: str = ""

    @abstractmethod
    def put(self, blobs: Mapping[str, bytes]) -> None:
        """Store ``blobs`` (name: bytes) durably; a name already there is left as it is."""

    @abstractmethod
    def get(self, names: Iterable[str]) -> dict[str, bytes]:
        """The stored content among ``names`` (one not there is left out), each checked
        against its name (:class:`ContentMissing` when the bytes are not what it says)."""

    def listed(self) -> Iterable[tuple[str, float]]:
        """Every stored name, with when it was stored (``collect_garbage``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list what it holds")

    def delete(self, names: Iterable[str]) -> int:
        """Remove ``names`` (``collect_garbage``); returns how many went."""
        raise NotImplementedError(f"{type(self).__name__} cannot remove what it holds")


@final
class DirectoryStore(ContentStore):
    """Content as files: ``ROOT/ab/abcdef...`` (the name's first two hex digits make the
    folder), each written to a temporary file, synced and renamed into place, so a reader
    sees a whole file or none. ``ROOT/store-id`` names the store (made once, at random):
    two processes that print the same id share the content.

    ``sync``: fsync each file and its folder before :meth:`put` returns (off only for
    throwaway stores: a machine that loses power loses what was not synced).
    """

    def __init__(self, root: str | os.PathLike[str], *, sync: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.sync = sync
        self.where = str(self.root)
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.ident = self._ident()
        except OSError as exc:
            raise ContentMissing(
                f"cannot use {self.root} as the content store of runs on Temporal: {exc}"
            ) from None

    def _ident(self) -> str:
        path = self.root / "store-id"
        with contextlib.suppress(FileNotFoundError):
            return path.read_text().strip()
        tmp = self.root / f".store-id.{secrets.token_hex(8)}"
        tmp.write_text(secrets.token_hex(16) + "\n")
        try:
            os.link(tmp, path)  # the first writer wins; a racing second reads its id
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return path.read_text().strip()

    def path(self, name: str) -> Path:
        return self.root / name[:2] / name

    def put(self, blobs: Mapping[str, bytes]) -> None:
        folders: set[Path] = set()
        for name, data in blobs.items():
            target = self.path(name)
            try:
                if target.stat().st_size == len(data):
                    # there already (a file cut short is written again): marked as stored
                    # now, so that a collection in progress keeps it (see ``_gc``)
                    os.utime(target)
                    continue
            except FileNotFoundError:
                pass
            folder = target.parent
            folder.mkdir(exist_ok=True)
            tmp = folder / f".{name}.{secrets.token_hex(4)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if self.sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
            folders.add(folder)
        if self.sync:
            for folder in folders:  # the renames themselves survive a power loss
                fd = os.open(folder, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def get(self, names: Iterable[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for name in names:
            try:
                data = self.path(name).read_bytes()
            except FileNotFoundError:
                continue
            if _name(data) != name:
                # set aside, so that the next writer of the content puts it back
                with contextlib.suppress(OSError):
                    self.path(name).replace(self.path(name).with_suffix(".bad"))
                raise ContentMissing(
                    f"the content store at {self.where} holds {name} with other bytes (the "
                    f"file {self.path(name)} was changed: it is set aside as .bad, and written "
                    "again by the next run that has the content)"
                )
            out[name] = data
        return out

    def listed(self) -> Iterable[tuple[str, float]]:
        for folder in self.root.iterdir():
            if not (folder.is_dir() and len(folder.name) == 2):
                continue
            for path in folder.iterdir():
                name = path.name
                if len(name) == 64 and name.startswith(folder.name):
                    with contextlib.suppress(FileNotFoundError):
                        yield name, path.stat().st_mtime

    def delete(self, names: Iterable[str]) -> int:
        gone = 0
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                self.path(name).unlink()
                gone += 1
        return gone


def default_root() -> Path:
    """The content store when ``OPDSL_TEMPORAL_CONTENT`` is not set: the user's data folder,
    the same for every process of the user on this machine."""
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "opdsl" / "temporal-content"


def content_store(spec: ContentStore | str | os.PathLike[str] | None = None) -> ContentStore | None:
    """The store ``spec`` names: a store as it is, a folder, ``"inline"`` for none; None reads
    ``OPDSL_TEMPORAL_CONTENT`` (a folder or ``inline``), else :func:`default_root`."""
    if isinstance(spec, ContentStore):
        return spec
    if spec is None:
        spec = os.environ.get(ENV) or default_root()
    if str(spec) == INLINE:
        return None
    return DirectoryStore(spec)


class _Recent:
    """The content this process wrote or read lately, by name, up to ``limit`` bytes: a
    payload encoded here is decoded here (a workflow's activity, its result) without a read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.items: OrderedDict[str, bytes] = OrderedDict()

    def get(self, name: str) -> bytes | None:
        data = self.items.get(name)
        if data is not None:
            self.items.move_to_end(name)
        return data

    def add(self, name: str, data: bytes) -> None:
        if name in self.items or len(data) > self.limit // 4:
            return
        self.items[name] = data
        self.size += len(data)
        while self.size > self.limit:
            _, old = self.items.popitem(last=False)
            self.size -= len(old)


@final
class ContentCodec(PayloadCodec):
    """Temporal's payload codec for opdsl (see the module docstring).

    ``store``: where content goes (None: nowhere; payloads travel whole, and one that names
    content in a store is refused with a reason). ``payload_limit``: the server's payload limit
    (``limit.blobSize.error``), which the workflow and the activities check against when there
    is no store. ``threshold``: a payload larger than this is stored whole (once its pieces
    are out, only a journal carried or returned is: kept small, so a run that continues as new
    does not start its new history with its old journal).
    """

    def __init__(
        self,
        store: ContentStore | None,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        threshold: int = 16 * 1024,
        recent_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.payload_limit = payload_limit
        self.threshold = min(threshold, max(1024, payload_limit // 4))
        self._recent = _Recent(recent_bytes)
        # names this process put lately, by when: not put again for a while (well within the
        # hour a garbage collection spares what was stored, or touched, lately)
        self._known: dict[str, float] = {}

    # -- the store, through the caches -----------------------------------------------------

    async def _put(self, blobs: dict[str, bytes]) -> None:
        store = self.store
        assert store is not None
        now = time.monotonic()
        known = self._known
        fresh = {n: b for n, b in blobs.items() if now - known.get(n, -KNOWN_FOR) >= KNOWN_FOR}
        if fresh:
            await asyncio.to_thread(store.put, fresh)
            if len(known) > 1_000_000:
                known.clear()
            known.update(dict.fromkeys(fresh, now))
        for name, data in blobs.items():
            self._recent.add(name, data)

    async def _get(self, names: Sequence[str], what: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        wanted: list[str] = []
        for name in names:
            data = self._recent.get(name)
            if data is None:
                wanted.append(name)
            else:
                out[name] = data
        if wanted:
            store = self.store
            if store is None:
                raise ContentMissing(
                    f"{what} is kept in a content store, and this process has none "
                    f"({ENV}=inline): give it the store its workers use ({ENV}=FOLDER)"
                )
            found = await asyncio.to_thread(store.get, wanted)
            for name in wanted:
                data = found.get(name)
                if data is None:
                    raise ContentMissing(
                        f"{what} names {name}, which is not in the content store at "
                        f"{store.where} (store {store.ident}): every worker and client of a "
                        f"run must reach the same content store ({ENV}: a folder they all "
                        "share)"
                    )
                self._recent.add(name, data)
                out[name] = data
        return out

    # -- the codec -------------------------------------------------------------------------

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if self.store is None:
            return list(payloads)
        return [await self._encode(p) for p in payloads]

    async def _encode(self, payload: Payload) -> Payload:
        out = payload
        if payload.metadata.get("encoding") == b"json/plain" and _MARK in payload.data:
            data = json.loads(payload.data)
            pieces = data.get("pieces") if isinstance(data, dict) else None
            if isinstance(pieces, dict) and pieces:
                # named by what they hold, whatever the payload called them (a piece named
                # wrongly is then a reference the workflow's checks refuse, not a bad file)
                blobs = {_name(b): b for b in (_bytes(str(t)) for t in pieces.values())}
                await self._put(blobs)
                data["pieces"] = list(blobs)
                out = Payload(
                    metadata={**payload.metadata, "encoding": _PIECES, _STORE_KEY: self._ident},
                    data=json.dumps(data, separators=(",", ":"), sort_keys=True).encode(),
                )
        if out.ByteSize() > self.threshold:
            whole = out.SerializeToString(deterministic=True)
            name = _name(whole)
            await self._put({name: whole})
            out = Payload(
                metadata={"encoding": _STORED, _STORE_KEY: self._ident}, data=name.encode()
            )
        return out

    @property
    def _ident(self) -> bytes:
        return b"" if self.store is None else self.store.ident.encode()

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._decode(p) for p in payloads]

    async def _decode(self, payload: Payload) -> Payload:
        encoding = payload.metadata.get("encoding")
        if encoding == _STORED:
            name = payload.data.decode()
            stored = (await self._get([name], f"a payload ({self._origin(payload)})"))[name]
            payload = Payload.FromString(stored)
            encoding = payload.metadata.get("encoding")
        if encoding != _PIECES:
            return payload
        data = json.loads(payload.data)
        names = data.get("pieces")
        if not (isinstance(data, dict) and isinstance(names, list)):
            raise ContentMissing("a payload of pieces has no list of them")
        found = await self._get(names, f"a payload's content ({self._origin(payload)})")
        data["pieces"] = {n: _text(found[n]) for n in names}
        metadata = {k: v for k, v in payload.metadata.items() if k != _STORE_KEY}
        metadata["encoding"] = b"json/plain"
        return Payload(
            metadata=metadata,
            data=json.dumps(data, separators=(",", ":"), sort_keys=True).encode(),
        )

    def _origin(self, payload: Payload) -> str:
        ident = payload.metadata.get(_STORE_KEY, b"").decode()
        return f"written to store {ident or '?'}"
