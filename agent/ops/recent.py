"""What was noted and learned lately: the daily notes of the last days and the facts
added to MEMORY.md and USER.md since (the MCP server's `recent` tool renders it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from agent.fs import safe
from agent.stores import memory
from agent.vault import history
from agent.vault.repo import Vault


@dataclass
class Recent:
    since: datetime                    # the start of the first day looked at
    notes: list[tuple[str, str]]       # (daily note's path, its text), oldest first
    facts: list[str]                   # "- fact  (MEMORY.md, when)", each line once


def recent(vault: Vault, days: int, now: datetime) -> Recent:
    """The daily notes of the last `days` days (today included) and the facts added
    since the first of them. A note file is read through the one safe read: one linked
    out of the vault raises UnsafeFile naming it."""
    notes = []
    for back in range(days - 1, -1, -1):
        rel = memory.daily_path((now - timedelta(days=back)).date())
        text = safe.read_text(vault.root, rel, errors="replace")
        if text is not None:
            notes.append((rel, text))
    since = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return Recent(since, notes, facts_since(vault, since))


def facts_since(vault: Vault, since: datetime) -> list[str]:
    facts = [f"{line.strip()}  ({rel}, {when})" for when, rel, line in
             history.added_lines(vault, list(memory.MEMORY_FILES), since.isoformat())
             if memory.FACT.match(line)]
    # A fact added then changed again: show each line once, at its last change.
    seen, unique = set(), []
    for f in reversed(facts):
        key = f.rsplit("  (", 1)[0]
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return list(reversed(unique))
