"""Commands that keep one vault on several machines: `agent sync` (and its held changes:
`sync held`, `sync accept`, `sync reject`) and `agent clone`."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from agent.cli.common import after_change, get_vault, json_option, report_recovery, vault_option
from agent.ops.vaults import LAYOUT
from agent.sync import clone as cloning
from agent.sync import remotes as syncing
from agent.vault.gitstate import head_from_files


@click.group("sync", invoke_without_command=True)
@click.option("--remote", metavar="NAME", help="The remote to sync with (default: the "
              "branch's upstream, else origin).")
@click.option("--no-push", is_flag=True, help="Fetch and merge only; push nothing.")
@json_option("What came in and went out, as JSON.")
@vault_option
@click.pass_context
def sync_cmd(ctx, remote, no_push, as_json):
    """Fetch, merge and push the vault through its git remote, losing nothing.

    Incoming changes to agent.toml, AGENTS.md, .gitattributes, .gitignore, skills/,
    heartbeat/ and cron jobs that deliver somewhere are held until you decide:
    `agent sync held`, then `agent sync accept` or `agent sync reject`. So is a forget
    made elsewhere (a .forgotten tombstone): until then nothing is merged or pushed."""
    if ctx.invoked_subcommand is not None:
        return
    vault = get_vault()
    before = head_from_files(vault.root)
    result = syncing.sync(vault, remote=remote, push=not no_push)
    report_recovery(vault)
    # The search index is left to the next search, which refreshes it first anyway (from
    # the commit it last saw: one `git diff` there): a sync need not load SQLite and the
    # index to re-read what came in, about a fifth of plain git's own time for a pull.
    # (`agent serve` refreshes it after a sync that brought commits, in the background.)
    after_change(vault, index=False)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    click.echo("\n".join(result.forgotten + [result.line()]))
    if result.held_line():
        click.echo(result.held_line())
    for line in result.refused_lines():
        click.echo(line, err=True)
    for path in result.kept_both:
        click.echo(f"  kept both versions of {path}", err=True)
    if before is None or head_from_files(vault.root) != before:
        from agent.chat.mcp_client import APPROVED_FILE
        if (vault.state / APPROVED_FILE).exists():     # else no approval here can lapse
            from agent.chat.mcp_client.client import lapsed
            for line in lapsed(vault):
                click.echo(line, err=True)


@sync_cmd.command("held")
@json_option("The held changes as JSON Lines, one "
             "object each (with its diff).")
@vault_option
def held_cmd(as_json):
    """Show each incoming change waiting for your decision, as a diff."""
    from agent.sync import held
    vault = get_vault()
    items = held.pending(vault)
    if as_json:
        for h in items:
            click.echo(json.dumps({**asdict(h), "diff": held.diff(vault, h)}))
        return
    if not items:
        click.echo("No held changes.")
        return
    for h in items:
        click.echo(f"held: {h.label()} from {h.host} ({h.source}"
                   f"{f', commit {h.commit[:7]}' if h.commit else ''})")
        click.echo(held.diff(vault, h))
        click.echo("")
    n = len(items)
    click.echo(f"{n} held change{'s' * (n != 1)}: `agent sync accept [FILE]` takes, "
               f"`agent sync reject [FILE]` drops.")


@sync_cmd.command("accept")
@click.argument("which", metavar="[FILE]", required=False)
@vault_option
def accept_cmd(which):
    """Take a held change (all of them without FILE), in one commit."""
    from agent.sync import held
    vault = get_vault()
    chosen, sha = held.accept(vault, which)
    report_recovery(vault)
    after_change(vault)
    what = ", ".join(h.label() for h in chosen)
    if any(h.tombstone is not None for h in chosen):
        click.echo(f"Accepted {what}: this vault's history is rewritten without it, old "
                   f"copies pruned" + (f" ({sha[:7]})" if sha else "")
                   + "; `agent sync` merges and pushes.")
        return
    click.echo(f"Accepted {what}" + (f" ({sha[:7]})" if sha else " (it was already so)"))


@sync_cmd.command("reject")
@click.argument("which", metavar="[FILE]", required=False)
@vault_option
def reject_cmd(which):
    """Drop a held change (all of them without FILE); this machine keeps its version."""
    from agent.sync import held
    vault = get_vault()
    chosen = held.reject(vault, which)
    click.echo(f"Rejected {', '.join(h.label() for h in chosen)}: this machine keeps its "
               f"version, and the same change is not held again.")


@click.command("clone")
@click.argument("url")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--host", metavar="NAME", help="This machine's name, which its cron jobs and "
              "heartbeats are marked with (default: the hostname).")
@click.option("--expect", metavar="FINGERPRINT", help="An encrypted remote's fingerprint, "
              "as `agent remote trust` printed it: anything else is refused.")
def clone_cmd(url, path, host, expect):
    """Make a vault on this machine from a remote (a path, ssh or https URL).

    Its agent.toml, AGENTS.md, .gitattributes, .gitignore, skills, heartbeats and cron
    jobs are held, as `agent sync` holds a remote's change to them: the clone runs on
    the files `agent init` makes until you accept the remote's (`agent sync held`,
    `agent sync accept`)."""
    if path is None:
        name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
        path = Path(name or "vault")
    vault = cloning.clone(url, path, host=host, expect=expect, layout=LAYOUT)
    after_change(vault)
    click.echo(f"Cloned {url} into {vault.root} (this machine: {vault.host()})")
    from agent.sync import held
    waiting = held.pending(vault)
    if waiting:
        click.echo(f"held: {', '.join(h.label() for h in waiting)} (until you decide, this "
                   f"vault runs on the settings `agent init` makes: `agent --vault "
                   f"{vault.root} sync held` shows them, `sync accept` takes them)")
    click.echo(f"Use it with --vault {vault.root} or `export AGENT_VAULT={vault.root}`; "
               f"`agent sync` keeps it in step.")


COMMANDS = [sync_cmd, clone_cmd]
