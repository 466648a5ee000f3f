"""`agent models`: which model answers chat and the dream, through which provider
(agent/ops/models.py); `agent doctor` checks that each answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agent.cli.common import get_vault, json_option, vault_option

if TYPE_CHECKING:
    from agent.ops.models import Listing


@click.command("models")
@json_option("One JSON object per model (JSON Lines).")
@click.option("--served", is_flag=True,
              help="Also ask each provider's server what it serves (one call each; a local "
                   "server that lists no such name is asked for one token).")
@vault_option
def models_cmd(as_json, served):
    """List the configured models, their providers, and which answers chat and dream."""
    from dataclasses import asdict

    from agent.ops.models import configured

    vault = get_vault()
    rows = configured(vault)
    listings = _serve(vault, rows) if served else {}
    if as_json:
        from agent.cli.output import records

        records(asdict(r) for r in rows)
        return
    width = max(len(r.model) for r in rows)
    for r in rows:
        where = "this machine" if r.local else r.url
        click.echo(f"{r.model:<{width}}  {', '.join(r.roles)}")
        click.echo(f"{'':<{width}}    {r.provider} ({r.api} API at {where}), key: {r.key}, "
                   f"context {r.context_window:,} tokens")
        if r.served is not None:
            click.echo(f"{'':<{width}}    {r.served}")
    for name, found in listings.items():
        said = (f"cannot say: {found.problem}" if found.problem is not None else
                ", ".join(found.ids) or "nothing")
        click.echo(f"{name} at {found.url} lists: {said}")


def _serve(vault, rows) -> dict[str, "Listing"]:
    """Each row's `served` line filled from its provider's server; the listings by
    provider, for the lines that end the table."""
    from agent.config import load_settings
    from agent.llm import make_provider
    from agent.llm.spec import split
    from agent.ops.models import listing, served

    router = make_provider(load_settings(vault.root), max_retries=0, timeout=15, lazy=True)
    listings: dict[str, Listing] = {}
    for r in rows:
        found = listings.get(r.provider) or listings.setdefault(r.provider,
                                                               listing(router, r.provider))
        bare = split(r.model)[1]
        if found.problem is not None:
            r.served = f"not checked: {found.problem}"
        else:
            r.served = served(router, found, bare).describe(bare, found.ids)
    return listings


COMMANDS = [models_cmd]
