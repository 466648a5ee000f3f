"""What a turn may do to the vault: `TurnVault`, the verbs both the real vault
(agent.vault.repo.Vault) and a turn's staged one (agent.vault.staged.StagedVault) offer,
each explicitly. A tool is handed the staged one: it reads and writes files and says
where its commands will write, but never reverts, checks out or runs git."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ContextManager, Protocol

from agent.vault.change import Change, Identity


class TurnVault(Protocol):
    root: Path
    state: Path

    def rel(self, path: str | os.PathLike[str]) -> str:
        """A vault-relative path, refusing anything outside the vault."""
        ...

    def read_text(self, rel: str) -> str:
        ...

    def write_text(self, rel: str, text: str) -> object:
        ...

    def append_lines(self, rel: str, lines: list[str], header: str | None = None) -> object:
        ...

    def delete(self, rel: str) -> None:
        ...

    def locked(self) -> ContextManager[object]:
        ...

    def commit(self, change: Change, paths: list[str] | None = None) -> str | None:
        ...

    def head(self) -> str | None:
        ...

    def files(self, *patterns: str) -> list[str]:
        ...

    def host(self, known: str | None = None) -> str:
        ...

    def agent_identity(self) -> Identity:
        ...
