"""`.agent/serve.lock`: one `agent serve` per vault.

An flock held for the life of the process, with its pid in the file. The kernel drops
it when the process dies, so a killed serve never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from agent.errors import UserError
from agent.vault.repo import Vault

LOCK_FILE = "serve.lock"


class ServeRunning(UserError):
    """Another `agent serve` holds this vault."""


class ServeLock:
    """`.agent/serve.lock`: an flock held for the life of the process, with its pid."""

    def __init__(self, vault: Vault):
        self.path = vault.state / LOCK_FILE
        self.root = vault.root
        self.fd: int | None = None
        self.previous: int | None = None      # the pid of a dead serve whose lock we took

    def acquire(self) -> "ServeLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            who = f"pid {pid}" if pid else "another process"
            raise ServeRunning(f"agent serve is already running on {self.root} ({who}); "
                               f"stop it first{f' (kill {pid})' if pid else ''}") from None
        self.previous = _read_pid(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (ValueError, OSError):
        return None
