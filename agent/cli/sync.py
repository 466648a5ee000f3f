"""Commands that keep one vault on several machines: `agent sync` and `agent clone`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from agent.cli.common import after_change, get_vault, report_recovery, vault_option
from agent.vault import sync as syncing


@click.command("sync")
@click.option("--remote", metavar="NAME", help="The remote to sync with (default: the "
              "branch's upstream, else origin).")
@click.option("--no-push", is_flag=True, help="Fetch and merge only; push nothing.")
@click.option("--json", "as_json", is_flag=True, help="What came in and went out, as JSON.")
@vault_option
def sync_cmd(remote, no_push, as_json):
    """Fetch, merge and push the vault through its git remote, losing nothing."""
    vault = get_vault()
    result = syncing.sync(vault, remote=remote, push=not no_push)
    report_recovery(vault)
    after_change(vault)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    click.echo("\n".join(getattr(result, "forgotten", []) + [result.line()]))
    for path in result.kept_both:
        click.echo(f"  kept both versions of {path}", err=True)


@click.command("clone")
@click.argument("url")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--host", metavar="NAME", help="This machine's name, which its cron jobs and "
              "heartbeats are marked with (default: the hostname).")
def clone_cmd(url, path, host):
    """Make a vault on this machine from a remote (a path, ssh or https URL)."""
    if path is None:
        name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
        path = Path(name or "vault")
    vault = syncing.clone(url, path, host=host)
    after_change(vault)
    click.echo(f"Cloned {url} into {vault.root} (this machine: {vault.host()})")
    click.echo(f"Use it with --vault {vault.root} or `export AGENT_VAULT={vault.root}`; "
               f"`agent sync` keeps it in step.")


COMMANDS = [sync_cmd, clone_cmd]
