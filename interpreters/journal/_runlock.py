"""Run locks the kernel holds, beside the lock rows a journal keeps.

A run's lock row names its holder (pid, host name, start time), but whether that process
still lives can only be guessed from outside it: a process in another PID namespace under the
same host name looks dead, and one in a container that is gone looks alive for ever. So a
writer also holds a byte of one file beside the journal (``runs.db-runlocks``) locked, the
run's own byte, with an open-file-description lock (Linux's ``F_OFD_SETLK``): every process on
the machine sees it, whatever its namespace, and the kernel lets go when the process ends,
however it ends. SQLite's WAL mode needs every process that writes a journal on one machine,
so the kernel of that machine knows every holder.

Where such locks cannot be had (another system, a file that is not a regular one) the rows
alone decide, as before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import struct
from pathlib import Path

__all__ = ["KernelLocks", "SUFFIX"]

SUFFIX = "-runlocks"
"""The lock file's name after the journal's."""

_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_GETLK: int | None = getattr(fcntl, "F_OFD_GETLK", None)
# struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for an open-file-description lock)
_FLOCK = struct.Struct("hhqqi4x")


def _byte(run_id: str) -> int:
    """The run's byte of the lock file: 56 bits of its id's SHA-256 (two runs would share one
    once in 2**28 pairs, and then one waits for the other)."""
    return int.from_bytes(
        hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()[:7], "big"
    )


class KernelLocks:
    """The lock file of the journal at ``journal``: opened at the first lock taken, and held
    open until :meth:`close` (closing it lets go of every lock this object holds)."""

    def __init__(self, journal: Path) -> None:
        self.path = journal.with_name(journal.name + SUFFIX)
        self._fd: int | None = None
        self._usable = _OFD_SETLK is not None and _OFD_GETLK is not None

    def _file(self, *, create: bool) -> int | None:
        """The lock file, opened for writing (made with the journal's permissions when
        ``create``); None where kernel locks cannot be had."""
        if self._fd is not None or not self._usable:
            return self._fd
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            mode = stat.S_IMODE(self.path.with_name(self.path.name[: -len(SUFFIX)]).stat().st_mode)
        except OSError:
            mode = 0o600
        try:
            fd = os.open(self.path, flags | (os.O_CREAT if create else 0), mode & 0o666)
        except OSError:  # not there (a reader), a link, a folder, no right to write it
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device planted there
            os.close(fd)
            self._usable = False
            return None
        self._fd = fd
        return fd

    def take(self, run_id: str) -> bool | None:
        """Lock the run's byte: True when taken (or held already through this object), False
        when another holds it, None where kernel locks cannot be had."""
        fd = self._file(create=True)
        if fd is None:
            return None
        assert _OFD_SETLK is not None
        try:
            fcntl.fcntl(
                fd, _OFD_SETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, _byte(run_id), 1, 0)
            )
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            if exc.errno in (errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
                self._usable = False  # a file system without them
                return None
            raise
        return True

    def free(self, run_id: str) -> None:
        """Let go of the run's byte (nothing when this object does not hold it)."""
        if self._fd is None:
            return
        assert _OFD_SETLK is not None
        unlock = _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, _byte(run_id), 1, 0)
        with contextlib.suppress(OSError):  # it goes with the file when that is closed
            fcntl.fcntl(self._fd, _OFD_SETLK, unlock)

    def held_elsewhere(self, run_id: str) -> bool | None:
        """Whether another open file of the machine holds the run's byte (this object's own
        lock is not seen); None where that cannot be told."""
        fd = self._file(create=False)
        if fd is None:
            return None
        assert _OFD_GETLK is not None
        probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, _byte(run_id), 1, 0)
        try:
            found = fcntl.fcntl(fd, _OFD_GETLK, probe)
        except OSError:
            return None
        return bool(_FLOCK.unpack(found)[0] != fcntl.F_UNLCK)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        # a journal dropped unclosed lets go of its runs, as its SQLite connection does
        self.close()
