"""Note and remember: a timestamped line in today's daily note, or a fact in MEMORY.md or
USER.md, each one commit. The one implementation `agent note` and the MCP server's
`note` and `remember` call; they only render. (The model's remember tool stages the
same store functions in its turn, saved with it.)

A pasted secret never lands in the vault: the text passes agent.redact's door first
(when the vault filters secrets), and what was kept out is said in the result.

    noted = note(vault, "call the dentist", now)
    print(noted.rel, noted.line)          # memory/2026-11-20.md - 14:02 call the dentist
    fact = remember(vault, "Prefers tea", "user", now, section="Preferences")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from agent import redact
from agent.errors import UserError
from agent.stores import holds, ledger, memory
from agent.fs import safe
from agent.vault.change import Change
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

TARGETS = ("daily", "memory", "user")

# (the file, the text as written) -> the commit saying who asked; default: by the person
Via = Callable[[str, str], Change]


@dataclass
class Noted:
    """What was kept where: `line` as written (a note's bullet, or a fact), its file,
    the commit (None: it was there already), and the kinds of secret kept out."""
    rel: str
    line: str
    sha: str | None
    added: bool = True                  # False: the fact was there already
    section: str | None = None
    kept: list[str] = field(default_factory=list)
    held: str = ""                      # the proposal's id when it waits for review


def note(vault: Vault, text: str, now: datetime, *, via: Via | None = None) -> Noted:
    """Append `- HH:MM text` to today's daily note and commit it. When the commit fails
    the text is never dropped silently: the UserError says whether it is in the file
    (journalled, committed by the next command) or gives it back."""
    body, kept = redact.door(vault.root, text)
    rel = memory.daily_path(now.date())
    line = memory.note_line(body, now)
    vault.writes.check_writable(rel)
    written = False
    try:
        with vault.locked():
            vault.append_lines(rel, [line], header=memory.daily_header(now.date()))
            written = True
            sha = vault.commit(via(rel, body) if via else Change("note", f"add 1 line to {rel}"))
    except UserError as e:
        raise UserError(f"{e}\n" + (f"Your note is in {rel} but not committed; the next "
                                     f"command that can commits it." if written else
                                     f"Your note was not saved: {body}")) from None
    return Noted(rel, line, sha, kept=kept)


def remember(vault: Vault, text: str, target: str, now: datetime, *, section: str | None = None,
             via: Via | None = None, hold: bool = False) -> Noted:
    """Keep `text` (folded onto one line): "daily" as a note of today, "memory" or
    "user" as a fact in MEMORY.md or USER.md under `section` (made when missing); a
    fact already there is not added twice. With `hold` (a model's write under `[dream]
    review = "all"`) the fact is not written but proposed for review (agent.stores.holds)."""
    if target not in TARGETS:
        raise UserError(f"remember: target must be daily, memory or user, not {target!r}")
    one = " ".join(text.split())
    if target == "daily":
        return note(vault, one, now, via=via)
    one, kept = redact.door(vault.root, one)
    rel = memory.MEMORY if target == "memory" else memory.USER
    section = section.strip() if section and section.strip() else None
    with vault.locked():
        old = safe.read_text(vault.root, rel)     # strict: it is rewritten
        new = memory.add_fact(old, one, section, memory.TITLES[rel])
        if new == (old or ""):
            return Noted(rel, one, None, added=False, section=section, kept=kept)
        if hold:
            return _hold(vault, rel, one, section, now, via, kept)
        vault.write_text(rel, new)
        sha = vault.commit(via(rel, one) if via else
                           Change("remember", f"add 1 fact to {rel}"))
    return Noted(rel, one, sha, section=section, kept=kept)


def _hold(vault: Vault, rel: str, fact: str, section: str | None, now: datetime,
          via: Via | None, kept: list[str]) -> Noted:
    """The fact proposed for review in one commit (call under the vault's lock)."""
    run = holds.run_of(vault.host(), now)
    op = {"op": "add", "file": rel, "section": section or "", "old": "", "new": f"- {fact}"}
    change = via(rel, fact) if via else Change("remember", f"add 1 fact to {rel}")
    who = change.trailers.get("Client")
    made = holds.records([op], run, now.isoformat(timespec="seconds"),
                         f"MCP client {who}" if who else "a command", how="asked to remember")
    old = safe.read_text(vault.root, ledger.LEDGER, limit=ledger.LEDGER_BYTES)
    text = holds.append(vault.state, made)(old)
    vault.write_text(ledger.LEDGER, text)
    n = ledger.loads(text.rstrip("\n").rsplit("\n", 1)[-1]) or {}
    sha = vault.commit(dataclasses.replace(
        change, subject=f"propose 1 fact for {rel} (held for review)"))
    return Noted(rel, fact, sha, added=False, section=section, kept=kept,
                 held=f"{run}#{n.get('n')}")
