"""The person's approvals on this machine: what they said yes to, in a JSON file that no
sync, clone or commit ever carries.

    {"version": 1, "servers": {"github": {...}}}        # .agent/mcp-approved.json
    {"version": 1, "keys": {"OPENROUTER_API_KEY https://openrouter.ai": {...}}}

Each file holds one section of named entries. A vault file (agent.toml first) may come
from a synced remote, a clone or a restored backup, so what it asks for that reaches
outside the vault waits for an entry here: an MCP server's command line
(agent.chat.mcp_client.approval keeps its file in the vault's `.agent/`), a key sent
to a host (agent.config.keys keeps its file in the person's config folder, for every
vault of this machine: the key is this machine's). An entry is changed under a lock
and the file replaced atomically, so two commands approving at once lose neither.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.fs import atomic

VERSION = 1


def config_dir() -> Path:
    """The person's folder of this machine's own settings: `$XDG_CONFIG_HOME/agent`,
    else `~/.config/agent` (where agent.sync.crypt keeps the device key too). Never
    inside a vault."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agent"


class Approvals:
    """One section of named approvals in the JSON file at `path`."""

    def __init__(self, path: Path, section: str) -> None:
        self.path = Path(path)
        self.section = section

    def _read(self) -> dict[str, Any]:
        data = atomic.read_json(self.path, default=None)
        if not isinstance(data, dict) or not isinstance(data.get(self.section), dict):
            return {"version": VERSION, self.section: {}}
        return data

    def entries(self) -> dict[str, dict[str, Any]]:
        """Every approval of the section (an entry that is not an object is none)."""
        return {k: v for k, v in self._read()[self.section].items() if isinstance(v, dict)}

    def get(self, name: str) -> dict[str, Any] | None:
        return self.entries().get(name)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The file's data, to change; written back when the block ends without error."""
        # Its owner's only: the folder may hold this machine's device key too
        # (agent.sync.crypt.keys).
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path.with_name(f".{self.path.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            yield data
            atomic.write_json(self.path, data)

    def put(self, name: str, entry: dict[str, Any]) -> None:
        """Approve `name` as `entry` says (replacing what was approved before)."""
        with self._locked() as data:
            data[self.section][name] = entry

    def drop(self, name: str) -> bool:
        """Take back the approval of `name`; False when there was none."""
        if self.get(name) is None:
            return False
        with self._locked() as data:
            data[self.section].pop(name, None)
        return True
