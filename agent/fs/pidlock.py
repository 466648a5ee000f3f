"""A lock file held with an flock and this process's pid written in it (`.agent/lock`,
`.agent/serve.lock`, the dream's lock). The kernel drops an flock when its process dies,
so a killed holder never leaves a stale lock; the pid only says who holds it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


class PidLock:
    """`acquire()` takes the lock (False when another process holds it: `holder` is then
    what that process wrote, its pid); `release()` lets it go."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd: int | None = None
        self.holder: str | None = None      # the pid text of whoever holds it, when busy
        self.previous: str | None = None    # the pid text a dead holder left behind

    def acquire(self, block: bool = False) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            self.holder = _pid_text(fd)
            os.close(fd)
            return False
        self.previous = _pid_text(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return True

    def busy(self) -> str | None:
        """Whether another process holds the lock, without taking it or writing to it:
        the pid text it wrote ("?" when it wrote none), or None when it is free."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_text(fd) or "?"
        finally:
            os.close(fd)                # (closing lets go of a lock taken here)
        return None

    def release(self, clear: bool = False) -> None:
        """Unlock and close; `clear` empties the file first (a clean exit leaves no pid)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        if clear:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def pid_of(text: str | None) -> int | None:
    """The pid in a lock file's text, or None."""
    try:
        return int(text or 0) or None
    except ValueError:
        return None


def _pid_text(fd: int) -> str | None:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or None
    except OSError:
        return None
