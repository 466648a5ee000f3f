"""The product's layout: what the vault is told about its files when it is opened
(agent.vault.layout.Layout, which this class fits without importing the vault: the
stores know nothing of git).

    layout = ProductLayout(git_config=..., derived=[...])
    vault = Vault.open(path, layout)          # agent.ops.vaults does this

It answers, from the formats' own knowledge: the merge rules a new vault's
.gitattributes starts with (agent.stores.kinds), which hand edits are broken (a
cron.json that does not parse stays uncommitted), and what no commit may take (what
another clone's sync would refuse, agent.stores.kinds.disk_problem). What it is handed:
the merge drivers' git settings (sync runs the drivers) and the cleanups of state
derived from the files (search registers its index's), which it only passes on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from agent.stores import kinds

CRON_FILE = "cron.json"     # agent.stores.cronfile.CRON_FILE, named here without loading it

# A cleanup of derived state, given the vault's state folder (agent.vault.layout.Cleanup).
Cleanup = Callable[[Path], object]


def _cron_problem(root: Path) -> str | None:
    # The cron store (and the schedules it parses) loads only when cron.json was edited
    # by hand: a command with nothing of the kind to commit (a sync) does not pay for it.
    from agent.stores import cronfile

    return cronfile.hand_edit_problem(root)


# The checks a hand edit must pass before it is committed, by file.
HAND_EDIT_CHECKS: dict[str, Callable[[Path], str | None]] = {CRON_FILE: _cron_problem}


class ProductLayout:
    """The agent's files as the vault must know them (see the module's docstring)."""

    attributes: Sequence[str] = kinds.ATTRIBUTES

    def __init__(self, git_config: Callable[[], list[tuple[str, str]]] | None = None,
                 derived: Sequence[Cleanup] = ()):
        self._git_config = git_config
        self._derived = tuple(derived)

    def git_config(self) -> list[tuple[str, str]]:
        return self._git_config() if self._git_config else []

    def hand_edit_problems(self, root: Path, dirty: Sequence[str]) -> dict[str, str]:
        out = {}
        for rel, check in HAND_EDIT_CHECKS.items():
            if rel in dirty:
                problem = check(root)
                if problem:
                    out[rel] = problem
        return out

    def commit_problem(self, root: Path, rel: str) -> str | None:
        return kinds.disk_problem(root, rel)

    def derived(self) -> Sequence[Cleanup]:
        return self._derived

    def keeps_both(self) -> Sequence[str]:
        return kinds.KEEPS_BOTH

    def register(self, cleanup: Cleanup) -> ProductLayout:
        """This layout with one more cleanup of derived state (run after a rewrite)."""
        return ProductLayout(self._git_config, (*self._derived, cleanup))
