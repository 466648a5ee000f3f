"""`agent doctor`: one screen saying what works and what to do about what does not.

Each check gives ok, warn or fail with one line, and for what is not ok one line on
how to fix it (agent/ops/doctor.py). Exit status 0 only when every check is ok.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from agent.cli.common import get_vault, json_option, vault_option
from agent.ops.doctor import run_checks


@click.command()
@json_option("The checks as a JSON array, for scripts.")
@click.option("--fix", is_flag=True,
              help="First repair what can be repaired safely: an interrupted sync is "
                   "finished, or given up when git refuses its commit (your files and "
                   "edits are kept).")
@vault_option
def doctor(as_json, fix):
    """Check the API key, models, git, the sandbox, the index and the vault's files."""
    vault = get_vault()
    if fix:
        for line in vault.journal.repair_checkout():
            click.echo(f"Fixed: {line}", err=as_json)
    checks = run_checks(vault, _telegram)
    bad = [c for c in checks if c.status != "ok"]
    if as_json:
        click.echo(json.dumps({"vault": str(vault.root), "ok": not bad,
                               "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        click.echo(f"vault {vault.root}")
        width = max(len(c.name) for c in checks)
        marks = {"ok": click.style("ok  ", fg="green"), "warn": click.style("warn", fg="yellow"),
                 "fail": click.style("FAIL", fg="red", bold=True)}
        for c in checks:
            click.echo(f"{marks[c.status]}  {c.name:<{width}}  {c.detail}")
            if c.fix:
                click.echo(f"      {'':<{width}}  -> {c.fix}")
        click.echo("All is well." if not bad else
                   f"{len(bad)} problem{'s' * (len(bad) != 1)}.")
    if bad:
        raise SystemExit(1)


COMMANDS = [doctor]


def _telegram(settings):
    """The Telegram channel's own check (python-telegram-bot is loaded only for it)."""
    from agent.serve.channels.telegram import check

    return check(settings)
