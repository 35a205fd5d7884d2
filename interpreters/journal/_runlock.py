"""Run locks the kernel holds, beside the lock rows a journal keeps.

A run's lock row names its holder (pid, host name, start time), but whether that process
still lives can only be guessed from outside it: a process in another PID namespace under the
same host name looks dead, and one in a container that is gone looks alive for ever. So a
writer also holds a byte of one file beside the journal (``runs.db-runlocks``) locked, the
run's own byte, with an open-file-description lock (Linux's ``F_OFD_SETLK``): every process on
the machine sees it, whatever its namespace, and the kernel lets go when the process ends,
however it ends. SQLite's WAL mode needs every process that writes a journal on one machine,
so the kernel of that machine knows every holder.

The lock row names the lock file it was taken in (its device and inode): a file deleted or
replaced since holds none of the old locks, so a row naming another file is judged by its pid,
as one without a kernel lock is. Where such locks cannot be had (another system, a file that
is not a regular one, no right to write it) the rows alone decide, as before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import struct
import threading
import weakref
from pathlib import Path

__all__ = ["KernelLocks", "SUFFIX"]

SUFFIX = "-runlocks"
"""The lock file's name after the journal's (the sandbox's ``RUN_LOCKS`` hides it from
workspace commands)."""

_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_GETLK: int | None = getattr(fcntl, "F_OFD_GETLK", None)
# struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for an open-file-description lock)
_FLOCK = struct.Struct("hhqqi4x")
# a link is not followed, a FIFO does not block the open, no child is handed it
_FLAGS = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK

_OPEN: weakref.WeakSet[KernelLocks] = weakref.WeakSet()
"""Every lock file held open in this process: a child made by ``fork`` lets go of its copies
(an open file description is shared: the child's unlock, or its living on after the parent
died, would be the parent's)."""


def _forgotten_in_child() -> None:
    for locks in list(_OPEN):
        locks._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forgotten_in_child)


def _byte(run_id: str) -> int:
    """The run's byte of the lock file: 56 bits of its id's SHA-256 (two runs would share one
    once in 2**28 pairs, and then one waits for the other)."""
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:7], "big")


def _lock(kind: int, run_id: str) -> bytes:
    """A ``struct flock`` of ``kind`` (a write lock, an unlock) over the run's byte."""
    return _FLOCK.pack(kind, os.SEEK_SET, _byte(run_id), 1, 0)


class KernelLocks:
    """The lock file of the journal at ``journal`` (its real path, taken now): opened by
    :meth:`prepare` or the first lock taken, and held open until :meth:`close` (closing it
    lets go of every lock this object holds)."""

    def __init__(self, journal: Path) -> None:
        real = Path(os.path.realpath(journal))
        self.journal = real
        self.path = real.with_name(real.name + SUFFIX)
        self._fd: int | None = None
        #: the lock file as ``DEVICE:INODE``, once open
        self.file = ""
        self._usable = _OFD_SETLK is not None and _OFD_GETLK is not None
        #: the runs whose bytes this object holds
        self._held: set[str] = set()
        self._mutex = threading.Lock()

    def _open(self, *, create: bool) -> int | None:
        """The lock file, opened for writing (made when ``create``: :meth:`_made`); None where
        kernel locks cannot be had."""
        if self._fd is not None or not self._usable:
            return self._fd
        fd: int | None
        try:
            fd = os.open(self.path, _FLAGS)
        except FileNotFoundError:
            fd = self._made() if create else None
        except OSError:  # a link, a folder, no right to write it
            fd = None
        if fd is None:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # a FIFO or a device planted there
            os.close(fd)
            self._usable = False
            return None
        self._fd, self.file = fd, f"{info.st_dev}:{info.st_ino}"
        _OPEN.add(self)
        return fd

    def prepare(self) -> None:
        """Make and open the lock file now (a journal opened for writing does, so that it is
        there before any workspace command starts, which gets a stand-in at its path)."""
        with self._mutex:
            self._open(create=True)

    def _made(self) -> int | None:
        """The lock file made and opened: rights for the classes that may write the journal,
        its group, and its owner when root makes it."""
        try:
            journal = os.stat(self.journal)
        except OSError:
            return None
        # read and write for the classes that may write the journal, nothing for the rest:
        # whoever can open it can lock it, and a lock on the whole file stops every writer
        given = stat.S_IMODE(journal.st_mode)
        mode = 0o600 | (0o060 if given & 0o020 else 0) | (0o006 if given & 0o002 else 0)
        try:
            fd = os.open(self.path, _FLAGS | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:  # another process made it first
            try:
                return os.open(self.path, _FLAGS)
            except OSError:
                return None
        except OSError:
            return None
        with contextlib.suppress(OSError):
            os.fchmod(fd, mode)  # not narrowed by the umask, as SQLite's own files are not
        with contextlib.suppress(OSError):  # the journal's group (its writers may share one)
            os.fchown(fd, journal.st_uid if os.geteuid() == 0 else -1, journal.st_gid)
        return fd

    def take(self, run_id: str) -> bool | None:
        """Lock the run's byte: True when taken now, False when another holds it (or this
        object already does: it is being written), None where kernel locks cannot be had."""
        with self._mutex:
            if run_id in self._held:
                return False
            fd = self._open(create=True)
            if fd is None:
                return None
            assert _OFD_SETLK is not None
            try:
                fcntl.fcntl(fd, _OFD_SETLK, _lock(fcntl.F_WRLCK, run_id))
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    return False
                if exc.errno in (errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
                    self._usable = False  # a file system without them
                    return None
                raise
            self._held.add(run_id)
            return True

    def holds(self, run_id: str) -> bool:
        """Whether this object holds the run's byte."""
        return run_id in self._held

    def free(self, run_id: str) -> None:
        """Let go of the run's byte (nothing when this object does not hold it)."""
        with self._mutex:
            if run_id not in self._held or self._fd is None:
                return
            self._held.discard(run_id)
            assert _OFD_SETLK is not None
            with contextlib.suppress(OSError):  # it goes with the file when that is closed
                fcntl.fcntl(self._fd, _OFD_SETLK, _lock(fcntl.F_UNLCK, run_id))

    def held_elsewhere(self, run_id: str) -> bool | None:
        """Whether another open file of the machine holds the run's byte (this object's own
        lock is not seen); None where that cannot be told."""
        with self._mutex:
            fd = self._open(create=False)
        if fd is None:
            return None
        assert _OFD_GETLK is not None
        try:
            found = fcntl.fcntl(fd, _OFD_GETLK, _lock(fcntl.F_WRLCK, run_id))
        except OSError:
            return None
        return bool(_FLOCK.unpack(found)[0] != fcntl.F_UNLCK)

    def close(self) -> None:
        with self._mutex:
            self._held.clear()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _forget(self) -> None:
        """In a child made by ``fork``: let go of this process's copy of the lock file, and
        of nothing the parent holds."""
        self._held = set()
        self._mutex = threading.Lock()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # the parent's own copy keeps its locks
            self._fd = None

    def __del__(self) -> None:
        # a journal dropped unclosed lets go of its runs, as its SQLite connection does
        with contextlib.suppress(Exception):
            self.close()
