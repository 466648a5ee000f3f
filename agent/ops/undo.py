"""Undo: revert an agent commit with a new commit, the one operation `agent undo` and
the web page's Undo button call."""

from __future__ import annotations

from agent.vault import history


def undo(vault, sha: str | None = None) -> history.Undone:
    """Revert the newest agent commit, or the one `sha` names (NothingToUndo,
    UndoConflict: UserErrors saying why not); the search index follows."""
    done = history.undo(vault, sha)
    if done.sha:
        from agent.search import index

        index.refresh(vault, after_commit=True)
    return done


def undoable(commit, agent_email: str) -> bool:
    """Whether a commit is one `undo` may revert (the agent's, not the vault's birth nor
    an undo)."""
    return commit.email == agent_email and commit.kind not in history.NEVER_UNDONE
