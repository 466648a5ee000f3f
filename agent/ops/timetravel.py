"""Time travel: what the agent knew at a moment, a fact's timeline, and bringing back a
line that a dream, an undo or a hand edit removed. The operations every front-end
(the CLI, the MCP server) calls."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

from agent.oneline import shorten
from agent.errors import UserError
from agent.stores import memory
from agent.fs import safe
from agent.vault import timetravel as tt
from agent.vault.change import Change
from agent.vault.repo import Vault

if TYPE_CHECKING:
    from agent.search.query import Hit


FACT_FILES = memory.MEMORY_FILES


@dataclass
class AsOf:
    sha: str
    line: str          # "abc1234 2026-11-20 14:02 dream: +3 facts ..."
    text: str


def show_as_of(vault: Vault, rel: str, when: str) -> AsOf:
    """The text of vault file `rel` as it was at WHEN (a date or a commit)."""
    rel = vault.rel(rel)
    sha, line = tt.resolve(vault, when)
    text = tt.file_at(vault, sha, rel)
    if text is None:
        raise UserError(f"{rel} did not exist as of {when} ({line}).")
    return AsOf(sha, line, text)


def search_as_of(vault: Vault, query: str, when: str, limit: int = 10,
                 **kw: Any) -> tuple[list[Hit], str]:
    """(hits, "abc1234 ...") of a search over the vault as it was at WHEN: the messages
    up to then and the memory files as they were (a throwaway copy, words only)."""
    from agent.search import index

    sha, line = tt.resolve(vault, when)
    dest = tt.copy_at(vault, sha, vault.state / "as-of" / f"{sha[:12]}-{os.getpid()}")
    try:
        then = Vault.open(dest)
        index.refresh(then)
        hits = index.search(then, query, limit, mode="words", **kw)
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    return hits, line


def history(vault: Vault, text: str) -> list[tt.Event]:
    events = tt.fact_history(vault, text, FACT_FILES)
    if not events:
        raise UserError(f"No line of MEMORY.md or USER.md has ever held {text!r}.")
    return events


def render_history(events: list[tt.Event]) -> str:
    out = []
    for e in events:
        source = ", ".join(f"{k} {v}" for k, v in e.trailers.items()
                           if k in ("Session", "Turn", "Batch", "Client", "Restored-From",
                                    "Reverts", "Cursor"))
        out.append(f"{e.date[:16].replace('T', ' ')}  {e.kind:<8} {e.sha[:7]}  {e.subject}")
        out.append(f"    by {e.author}" + (f"; source: {source}" if source else ""))
        if e.old is not None:
            out.append(f"    - {e.old.strip()}")
        if e.new is not None:
            out.append(f"    + {e.new.strip()}")
    return "\n".join(out) + "\n"


@dataclass
class Restored:
    rel: str
    line: str
    sha: str | None
    removed_in: tt.Event


def restore(vault: Vault, text: str) -> Restored:
    """Bring back the line of MEMORY.md or USER.md holding `text` that was removed most
    recently, under the heading it had, as one commit `restore: …`."""
    events = tt.fact_history(vault, text, FACT_FILES)
    gone = [e for e in events if e.kind in ("removed", "updated") and e.old is not None]
    needle = " ".join(text.split()).lower()
    for rel in FACT_FILES:
        now = safe.read_text(vault.root, rel) or ""
        for row in now.splitlines():
            if needle in " ".join(row.split()).lower() and memory.FACT.match(row):
                raise UserError(f"{rel} still has it: {row.strip()} (nothing to restore).")
    if not gone:
        raise UserError(f"No removed line of MEMORY.md or USER.md holds {text!r}"
                        + (" (it was never in them)." if not events else "."))
    last = gone[-1]
    assert last.old is not None         # gone holds only events with an old line
    fact = last.old.strip().lstrip("-*+").strip()
    before = tt.file_at(vault, f"{last.sha}^", last.file) or ""
    section = heading_above(before, last.old)
    with vault.locked():
        old = safe.read_text(vault.root, last.file)
        vault.write_text(last.file, memory.add_fact(old, fact, section, memory.TITLES[last.file]))
        sha = vault.commit(Change(
            "restore", _short(fact),
            body=(f"Brings back the line of {last.file} that {last.sha[:7]} "
                  f"({last.subject}, {last.date[:10]}, by {last.author}) "
                  f"{'removed' if last.kind == 'removed' else 'changed'}"
                  + (f", under {section}." if section else ".")),
            trailers={"Restored-From": f"{last.sha}^:{last.file}"}))
    return Restored(last.file, f"- {fact}", sha, last)


def _short(text: str, limit: int = 60) -> str:
    return shorten(text, limit, placeholder="…", at_word=True)


def heading_above(text: str, line: str) -> str | None:
    """The heading of the section that holds `line` in `text`, or None."""
    heading = None
    for row in text.splitlines():
        m = memory.HEADING.match(row)
        if m and len(m.group(1)) > 1:
            heading = m.group(2).strip()
        if row == line:
            return heading
    return None
