"""The slash commands a conversation understands wherever it happens (the terminal,
Telegram): what `/new`, `/undo` and `/memory` do, as plain text for the channel to
show. The channels only parse and print; the doing is here, once.
"""

from __future__ import annotations

from datetime import datetime

from agent.errors import UserError
from agent.stores import memory
from agent.vault import history



def new_conversation(vault, provider, session: str, now: datetime) -> str:
    """`/new`: archive the conversation's window and start afresh; says what happened."""
    from agent.chat.compact import CompactError, compact_session

    try:
        entry = compact_session(vault, provider, session, now, force=True)
    except CompactError as e:
        return f"{e} The conversation goes on as it was."
    from agent.chat import working

    working.clear(vault.root, session)       # a fresh conversation recalls afresh
    if entry is None:
        return "Nothing to archive; this is already a fresh conversation."
    return f"Archived as entry {entry} ({topic(vault, entry)}). A fresh conversation starts."


def topic(vault, entry_id: int) -> str:
    from agent.stores import archive

    found = archive.find(vault.root, entry_id)
    return "" if found is None else archive.load(vault.root, found).topic


def undo_last_turn(vault, session: str) -> tuple[str, bool]:
    """`/undo`: revert the newest turn commit of `session` not yet undone; (what
    happened, whether the vault changed)."""
    try:
        done = history.undo(vault, session=session)
    except history.NothingToUndo as e:
        return str(e), False
    except history.UndoConflict as e:
        return (f"Cannot undo {e.commit.short} ({e.commit.subject}): later changes touch the "
                f"same lines. Nothing was changed."), False
    c = done.commit
    if done.sha is None:
        return f"Nothing to undo: {c.short} ({c.subject}) changes nothing any more.", False
    return f"Undid {c.short} ({c.subject}) in {done.sha[:7]}.", True


def memory_files(vault) -> list[tuple[str, str]]:
    """`/memory`: (name, text) of MEMORY.md and USER.md as they are on disk."""
    from agent.fs import safe

    out = []
    for name in memory.MEMORY_FILES:
        try:
            text = safe.read_text(vault.root, name)
        except UserError as e:          # a link out of the vault, too big: say so
            text = f"(unreadable: {e})"
        out.append((name, "(missing)" if text is None else text.rstrip("\n")))
    return out
