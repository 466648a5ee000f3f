"""`.agent/serve.lock`: one `agent serve` per vault.

An flock held for the life of the process, with its pid in the file. The kernel drops
it when the process dies, so a killed serve never leaves a stale lock.
"""

from __future__ import annotations

import os

from agent.errors import UserError
from agent.fs.pidlock import PidLock, pid_of
from agent.vault.repo import Vault

LOCK_FILE = "serve.lock"


class ServeRunning(UserError):
    """Another `agent serve` holds this vault."""


class ServeLock:
    """`.agent/serve.lock`: an flock held for the life of the process, with its pid."""

    def __init__(self, vault: Vault):
        self.path = vault.state / LOCK_FILE
        self.root = vault.root
        self.lock = PidLock(self.path)
        self.previous: int | None = None      # the pid of a dead serve whose lock we took

    @property
    def fd(self) -> int | None:
        return self.lock.fd

    def acquire(self) -> "ServeLock":
        if not self.lock.acquire():
            pid = pid_of(self.lock.holder)
            who = f"pid {pid}" if pid else "another process"
            raise ServeRunning(f"agent serve is already running on {self.root} ({who}); "
                               f"stop it first{f' (kill {pid})' if pid else ''}")
        self.previous = pid_of(self.lock.previous)
        assert self.lock.fd is not None          # acquired: the file is open
        os.fsync(self.lock.fd)
        return self

    def release(self) -> None:
        self.lock.release(clear=True)


def holder(vault: Vault) -> int | None:
    """The pid of the `agent serve` holding this vault's lock (0 when it wrote none yet),
    or None when none runs. Takes nothing: a shared flock tried and let go."""
    import fcntl

    try:
        fd = os.open(vault.state / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            return pid_of(os.pread(fd, 32, 0).decode(errors="replace").strip()) or 0
        except OSError:
            return 0
    finally:
        os.close(fd)              # (closing lets go of a lock taken here)
    return None
