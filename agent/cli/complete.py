"""Tab completion of what a command's argument names in the vault: session keys, job ids,
sub-agent run ids, review numbers and setting names (click's `shell_complete=`).

A completion reads the vault the command would use and never changes or makes one; a
vault it cannot read completes nothing rather than print an error into the shell."""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem

from agent.errors import UserError
from agent.vault.repo import Vault, resolve_path


def _vault(ctx: click.Context) -> Vault | None:
    path, _ = resolve_path(ctx.meta.get("agent.vault.repo"))
    if not (path / "agent.toml").is_file():     # (the default vault is not made for this)
        return None
    try:
        return Vault.open(path)
    except (UserError, OSError):
        return None


def _items(pairs, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(value, help=help or None) for value, help in pairs
            if value.startswith(incomplete)]


def _from_vault(list_them):
    """A shell_complete callback offering what list_them(vault) yields: (value, help)."""
    def complete(ctx, param, incomplete):
        try:
            vault = _vault(ctx)
            return _items(list_them(vault), incomplete) if vault is not None else []
        except (UserError, OSError, ValueError):   # a broken store: nothing to offer
            return []
    return complete


def _sessions(vault: Vault):
    from agent.stores import sessions
    return ((key, None) for key in sessions.list_sessions(vault.root))


def _jobs(vault: Vault):
    from agent.stores import cronfile
    return ((j.id, j.name) for j in cronfile.read(vault.root).jobs)


def _runs(vault: Vault):
    from agent.chat import subagents
    return ((r.id, None) for r in subagents.list_runs(vault))


def _review(vault: Vault):
    from agent.ops import review as reviewing
    return ((str(i.number), f"{i.op} {i.file}") for i in reviewing.pending(vault))


def _settings(ctx, param, incomplete):
    from agent import config as cfg
    return _items(((k.key, k.help) for k in cfg.SCHEMA), incomplete)


sessions = _from_vault(_sessions)
jobs = _from_vault(_jobs)
runs = _from_vault(_runs)
review_numbers = _from_vault(_review)
settings = _settings
