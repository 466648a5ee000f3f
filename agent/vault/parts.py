"""What a part of the vault asks of the `Vault` that owns it, as narrow protocols.

A part (the lock, the journals, the identities, a rewrite's journal) is handed the
Vault that owns it, but is typed against the few verbs it uses, declared here or
beside it, never against `Vault` itself: so no part imports agent.vault.repo, even
for its annotations, and the package has no import cycle (tests/test_layout.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from agent.vault.layout import Layout


class Repository(Protocol):
    """Where the vault is, and git run in it: what every part asks."""

    root: Path              # the work tree
    state: Path             # .agent/: this machine's own state, never committed
    git_dir: Path           # the repository folder (.git, or where a gitfile points)
    recovered: list[str]    # what the last repair did, for the front-end to report
    layout: Layout          # what the vault was told about the product's files

    def git(self, *args: str, check: bool = True, env: dict[str, str] | None = None,
            input: str | None = None) -> str:
        ...

    def head(self) -> str | None:
        ...

    def dirty_paths(self) -> list[str]:
        ...


class StaleLocks(Protocol):
    """The lock's one verb another part uses: remove what a killed git left."""

    def clear_stale_git_locks(self, wait: float = 2.0) -> None:
        ...
