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
