"""The vault: a Git repository of plain files, and the one place git runs.

    from agent.vault import Vault, Change
    vault = Vault.open(path)
    with vault.locked():
        vault.append_lines("memory/2026-11-20.md", ["- 14:05 bought milk"])
        vault.commit(Change("note", "add 1 line to memory/2026-11-20.md"))

`Vault` (repo) owns its parts: `vault.lock` (lock.VaultLock), `vault.journal`
(journal.Journal), `vault.writes` (writes.Writes), `vault.identity`; each is typed
against the narrow protocol of what it asks of its owner (parts), never the Vault.
What the vault knows of the product's files it is told when opened: a `Layout`
(layout; the product's is agent.ops.vaults.LAYOUT). `TurnVault` (turnvault) is what a
turn may do to the vault, offered by the Vault and by a turn's `StagedVault` (staged).
The rest: git (the one runner), gitstate, change (commit messages), history,
timetravel, branches, rewrite (forgetting), prune, edit, attributes (git config).

The names below load on first use, so importing a submodule costs only that submodule.
"""

from __future__ import annotations

_EXPORTS = {
    "Vault": "agent.vault.repo", "NotAVault": "agent.vault.repo",
    "VaultError": "agent.vault.git", "GitError": "agent.vault.git",
    "Change": "agent.vault.change", "Identity": "agent.vault.change",
    "StagedVault": "agent.vault.staged", "TurnVault": "agent.vault.turnvault",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - sorted() gives a list; ruff reads only literals


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agent.vault' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
