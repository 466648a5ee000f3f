"""What the vault is told about the product's files when it is opened: `Layout`.

The vault knows git, not which file is what (shared/DESIGN.md section 7). What it must
still act on, it asks a `Layout` it is handed by whoever opens it
(`Vault.open(path, layout)`): the product's layout is agent.stores.layout's rules,
composed with the merge drivers and the search index's cleanup by agent.ops.vaults. A
vault opened with none (`GIT_ONLY`) is a plain repository: every change may be
committed, a new one gets no merge rules, a rewrite drops no derived state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

# A cleanup of state derived from the vault's files (the search index), given the
# vault's state folder (.agent/): what it deletes is its owner's knowledge, not the
# vault's, which only calls it when a history rewrite made that state hold what is gone.
Cleanup = Callable[[Path], object]


class Layout(Protocol):
    """The narrow interface through which the vault asks about the product's files."""

    # The lines of .gitattributes a new vault starts with (which format merges how).
    attributes: Sequence[str]

    def git_config(self) -> list[tuple[str, str]]:
        """The settings of the vault's own .git/config (its merge drivers)."""
        ...

    def hand_edit_problems(self, root: Path, dirty: Sequence[str]) -> dict[str, str]:
        """Of the hand-edited files `dirty`, those whose format is broken, each with why
        (a cron.json that does not parse): left uncommitted until they are fixed."""
        ...

    def commit_problem(self, root: Path, rel: str) -> str | None:
        """Why the changed file `rel` must stay uncommitted (what another clone's sync
        would refuse), or None: a commit may take it."""
        ...

    def derived(self) -> Sequence[Cleanup]:
        """The cleanups of state derived from the files, run after a history rewrite."""
        ...

    def keeps_both(self) -> Sequence[str]:
        """The merge drivers that settle a clash by keeping both versions: an undo runs
        without them, so that a clash makes it refuse."""
        ...


class GitOnly:
    """The layout of a plain repository: no file has a format the vault must check."""

    attributes: Sequence[str] = ()

    def git_config(self) -> list[tuple[str, str]]:
        return []

    def hand_edit_problems(self, root: Path, dirty: Sequence[str]) -> dict[str, str]:
        return {}

    def commit_problem(self, root: Path, rel: str) -> str | None:
        return None

    def derived(self) -> Sequence[Cleanup]:
        return ()

    def keeps_both(self) -> Sequence[str]:
        return ()


GIT_ONLY: Layout = GitOnly()


def drop_derived(layout: Layout, state: Path) -> None:
    """Run every cleanup of derived state the layout registered."""
    for cleanup in layout.derived():
        cleanup(state)
