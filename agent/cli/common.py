"""What every command shares: the --vault option, opening the vault, reporting repairs."""

from __future__ import annotations

from pathlib import Path

import click

from agent.errors import UserError
from agent.vault.repo import Vault, resolve_path


class AgentGroup(click.Group):
    """Turns our own user errors into a one-line message and exit status 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as e:
            err = click.ClickException(str(e))
            err.exit_code = getattr(e, "exit_code", 1)
            raise err from None


def _set_vault(ctx, param, value):
    if value is not None:
        ctx.meta["agent.vault.repo"] = value
    return value


def vault_option(f):
    """`--vault PATH` on a command (also accepted before the command name)."""
    return click.option("--vault", "vault_path", metavar="PATH", expose_value=False,
                        is_eager=True, callback=_set_vault,
                        help="The vault folder (default: $AGENT_VAULT, else ~/.agent/vault).")(f)


def vault_path() -> tuple[Path, bool]:
    ctx = click.get_current_context()
    return resolve_path(ctx.meta.get("agent.vault.repo"))


def get_vault() -> Vault:
    """The vault this command works on; the default one is made on first use."""
    path, is_default = vault_path()
    if is_default and not path.exists():
        vault, _ = Vault.init(path)
        click.echo(f"Created a new vault at {path}", err=True)
        return vault
    return Vault.open(path)


def report_recovery(vault: Vault) -> None:
    for line in vault.recovered:
        click.echo(f"Recovered: {line}", err=True)
    vault.recovered = []


def after_change(vault: Vault) -> None:
    """Bring derived state (the search index) up to date after a commit."""
    from agent.search import index
    index.refresh(vault, after_commit=True)
