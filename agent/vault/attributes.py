"""The merge drivers' settings in the vault's .git/config: given as keys and values by
the vault's layout (agent.vault.layout), written here because here is where git runs.

`.gitattributes` names a driver per path (`MEMORY.md merge=agent-facts`, agent.stores.kinds);
the vault's git config says how to run it (`python -m agent.sync.mergedriver facts %O
%A %B %P`, agent.sync.mergedriver.git_config). The drivers themselves live with sync,
above the formats they merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Configurable(Protocol):
    def git(self, *args: str, check: bool = True) -> str:
        ...


def configure(repo: _Configurable, settings: Sequence[tuple[str, str]],
              have: dict[str, str] | None = None) -> None:
    """Write `settings` (key, value) to the repository's .git/config (also for a
    person's own `git pull`), each only when it differs.

    The settings live in .git/config, which is not versioned, so a clone or a move
    to another Python sets them again; unchanged settings are not rewritten.
    `have`: the config already read (key -> value), to spare a `git config`."""
    if not settings:
        return
    if have is None:
        import re
        keys = "|".join(re.escape(key) for key, _ in settings)
        current = repo.git("config", "--get-regexp", f"^({keys})$", check=False)
        have = dict(line.split(" ", 1) for line in current.splitlines() if " " in line)
    for key, value in settings:
        if have.get(key) != value:
            repo.git("config", key, value)
