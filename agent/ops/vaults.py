"""The agent's vault, opened with what the vault must know of the agent's files.

    vault = open_vault(path)             # Vault.open(path, LAYOUT)
    vault, what = init_vault(path)       # a new vault with the formats' merge rules

`LAYOUT` is the product's layout (agent.vault.layout.Layout): the formats' rules
(agent.stores.layout), the merge drivers' settings (sync runs them) and the cleanup of
the search index, which search registers (agent.search.db.drop) and the vault runs
after a history rewrite without knowing what it deletes. Each is loaded when called,
so a command that never commits a cron.json, merges or rewrites loads none of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent.stores.layout import ProductLayout
from agent.vault.repo import Vault


def _merge_drivers() -> list[tuple[str, str]]:
    from agent.sync import mergedriver

    return mergedriver.git_config()


def _search_index(state: Path) -> None:
    from agent.search import db

    db.drop(state)


LAYOUT = ProductLayout(git_config=_merge_drivers).register(_search_index)


def open_vault(path: str | os.PathLike[str]) -> Vault:
    """The vault at `path` with the product's layout (NotAVault says how to make one)."""
    return Vault.open(path, LAYOUT)


def init_vault(path: str | os.PathLike[str]) -> tuple[Vault, str]:
    """Make a vault at `path` with the product's layout (see Vault.init)."""
    return Vault.init(path, LAYOUT)
