"""`agent models`: which model answers chat and the dream, through which provider
(agent/ops/models.py); `agent doctor` checks that each answers."""

from __future__ import annotations

import click

from agent.cli.common import get_vault, vault_option


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per model (JSON Lines).")
@vault_option
def models_cmd(as_json):
    """List the configured models, their providers, and which answers chat and dream."""
    from dataclasses import asdict

    from agent.ops.models import configured

    rows = configured(get_vault())
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


COMMANDS = [models_cmd]
