"""The merge drivers the vault's own formats use, as git configuration and attributes.

`.gitattributes` names a driver per path (`MEMORY.md merge=agent-facts`); the vault's
git config says how to run it (`python -m agent.sync.mergedriver facts %O %A %B %P`).
The vault writes these settings (it runs git); the drivers themselves live with sync
(agent/sync/mergedriver.py), above the formats they merge.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

DRIVERS = {
    "agent-lines": "append-only lines (session transcripts, daily notes)",
    "agent-facts": "facts (MEMORY.md, USER.md)",
    "agent-cron": "cron.json, job by job",
    "agent-set": "a set of lines (.dream_cursor)",
}

ATTRIBUTES = [
    "sessions/**/*.jsonl merge=agent-lines",
    "memory/*.md merge=agent-lines",
    "MEMORY.md merge=agent-facts",
    "USER.md merge=agent-facts",
    "cron.json merge=agent-cron",
    ".dream_cursor merge=agent-set",
    ".dream_ledger.jsonl merge=agent-lines",
    ".dream_rejected.jsonl merge=agent-lines",
]


# What shlex.quote leaves unquoted (its _find_unsafe: ASCII \w and these).
_BARE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def git_config() -> list[tuple[str, str]]:
    """The `merge.<driver>.*` settings that make git run these drivers."""
    exe = sys.executable
    if not exe or set(exe) - _BARE:     # else shlex.quote leaves it as it is (unloaded)
        import shlex
        exe = shlex.quote(exe)
    out = []
    for name, what in DRIVERS.items():
        kind = name.removeprefix("agent-")
        out.append((f"merge.{name}.name", f"agent: {what}"))
        out.append((f"merge.{name}.driver", f"{exe} -m agent.sync.mergedriver {kind} %O %A %B %P"))
    return out


def configure_merge_drivers(vault: Vault, have: dict[str, str] | None = None) -> None:
    """Point the vault's git at its merge drivers (also for a person's own `git pull`).

    The settings live in .git/config, which is not versioned, so a clone or a move
    to another Python sets them again; unchanged settings are not rewritten.
    `have`: the config already read (key -> value), to spare a `git config`."""
    if have is None:
        current = vault.git("config", "--get-regexp", r"^merge\.agent-", check=False)
        have = dict(line.split(" ", 1) for line in current.splitlines() if " " in line)
    for key, value in git_config():
        if have.get(key) != value:
            vault.git("config", key, value)
