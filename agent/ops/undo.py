"""Undo: an agent change reverted with a new commit (`agent undo`, `/undo` in a
conversation, the web page's Undo button). The one implementation every front-end calls; the
revert itself (which commit, the conflict check) is agent.vault.history's.

    done = undo(vault)                            # the newest agent change, any session
    turn = undo_last_turn(vault, "telegram/42")   # the newest turn of that conversation
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.vault import history
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.history import Commit
    from agent.vault.repo import Vault


def undo(vault: Vault, ref: str | None = None, *, session: str | None = None) -> history.Undone:
    """Revert the agent commit `ref` (else the newest agent change not undone yet, of
    `session`'s turns when given) and bring the search index up to date. Raises
    history.NothingToUndo or history.UndoConflict, each saying what to do."""
    done = history.undo(vault, ref, session=session)
    if done.sha is not None:
        from agent.search import index

        index.refresh(vault, after_commit=True)
    return done


def undoable(commit: Commit, agent_email: str) -> bool:
    """Whether a commit is one `undo` may revert (the agent's, not the vault's birth nor
    an undo)."""
    return commit.email == agent_email and commit.kind not in history.NEVER_UNDONE


@dataclass
class TurnUndo:
    """What `/undo` did: `said` for the person; `changed` when a commit was made."""
    said: str
    changed: bool
    sha: str | None = None


def undo_last_turn(vault: Vault, session: str) -> TurnUndo:
    """`/undo`: revert the newest turn commit of `session` not yet undone. Nothing to
    undo and a conflict are answers, not errors: the conversation goes on."""
    try:
        done = undo(vault, session=session)
    except history.NothingToUndo as e:
        return TurnUndo(str(e), False)
    except history.UndoConflict as e:
        return TurnUndo(f"Cannot undo {e.commit.short} ({e.commit.subject}): later changes "
                        f"touch the same lines. Nothing was changed.", False)
    c = done.commit
    if done.sha is None:
        return TurnUndo(f"Nothing to undo: {c.short} ({c.subject}) changes nothing any more.",
                        False)
    return TurnUndo(f"Undid {c.short} ({c.subject}) in {done.sha[:7]}.", True, done.sha)
