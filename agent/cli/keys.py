"""`agent keys`: where each key agent.toml sends may go on this machine (agent.config.keys):
`agent keys` lists the pairs, `agent keys approve VARIABLE ORIGIN` and `agent keys revoke
VARIABLE ORIGIN` decide; and the question a command asks at a terminal before its
first model call (`ask`)."""

from __future__ import annotations

import json
import os
import sys

import click

from agent.cli.common import get_vault, json_option, settings_of, vault_option
from agent.config import keys


@click.group("keys", invoke_without_command=True)
@json_option("One JSON object per pair (JSON Lines).")
@vault_option
@click.pass_context
def keys_group(ctx, as_json):
    """Show where each key agent.toml sends may go on this machine (approve, revoke).

    A provider's key (key_env) and Telegram's bot token go only to their vendor, or to
    a host you approved here, whatever a synced or cloned agent.toml says. Approvals
    are kept in ~/.config/agent/keys.json, for every vault of this machine.
    """
    if ctx.invoked_subcommand is not None:
        return
    from agent.ops.keys import pairs
    rows = []
    for p in pairs(settings_of(get_vault())):
        state = p.state()
        rows.append({"variable": p.env, "origin": p.origin, "where": p.where, "state": state,
                     "set": bool(os.environ.get(p.env, "").strip())})
    shown = {(r["variable"], r["origin"]) for r in rows}
    for env, origin, when in keys.approved():
        if (env, origin) not in shown:
            rows.append({"variable": env, "origin": origin, "where": "", "state": "approved",
                         "set": bool(os.environ.get(env, "").strip()), "approved": when})
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        return
    if not rows:
        click.echo("No key is sent anywhere: no provider of agent.toml needs one.")
        return
    for r in rows:
        what = {"tied": "its vendor's own address", "approved": "approved on this machine",
                "unapproved": f"NOT approved: agent keys approve {r['variable']} {r['origin']}",
                "refused": "refused: a vendor's key goes only to that vendor"}[r["state"]]
        where = f"  ({r['where']})" if r["where"] else "  (not used by this vault)"
        click.echo(f"${r['variable']} -> {r['origin']}: {what}{where}")


@keys_group.command("approve")
@click.argument("variable")
@click.argument("origin", metavar="ORIGIN")
@click.option("--yes", "-y", is_flag=True, help="Approve without asking.")
def approve_cmd(variable, origin, yes):
    """Let the key in $VARIABLE go to ORIGIN (scheme, host and port) on this machine."""
    from agent.clock import now
    pair = keys.Pair(variable, keys.origin(origin), "agent keys approve")
    if pair.state() in ("tied", "approved"):
        click.echo(f"${variable} may go to {pair.origin} already.")
        return
    if pair.state() == "unapproved" and not yes and not click.confirm(
            f"Send ${variable} to {pair.origin} whenever a vault of this machine asks to?",
            default=False):
        raise click.ClickException(f"${variable} is not approved for {pair.origin}.")
    keys.approve(pair, now())
    click.echo(f"Approved: ${variable} may go to {pair.origin} on this machine.")


@keys_group.command("revoke")
@click.argument("variable")
@click.argument("origin", metavar="ORIGIN")
def revoke_cmd(variable, origin):
    """Take back the approval of $VARIABLE for ORIGIN: it goes there no more."""
    if not keys.revoke(variable, origin):
        raise click.ClickException(f"${variable} was not approved for {keys.origin(origin)}.")
    click.echo(f"Revoked: ${variable} goes to {keys.origin(origin)} no more.")


def ask(settings, model: str | None = None) -> None:
    """At a terminal, before a command's first model call: for each key agent.toml's
    models (and `model`, a --model) would send to a host this machine has not approved,
    ask; yes approves it
    here. Without a terminal nothing is asked, and the call is refused with the line
    saying how to approve."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    from agent.clock import now
    from agent.ops.keys import pairs
    for pair in pairs(settings, used=True, model=model):
        if pair.state() != "unapproved" or not os.environ.get(pair.env, "").strip():
            continue
        click.echo(f"{pair.where} in agent.toml sends ${pair.env} to {pair.origin}, which "
                   f"this machine has not approved.", err=True)
        if click.confirm(f"Send ${pair.env} to {pair.origin}, now and from now on?",
                         default=False, err=True):
            keys.approve(pair, now())
            click.echo(f"Approved: ${pair.env} may go to {pair.origin} on this machine "
                       f"(agent keys revoke {pair.env} {pair.origin} takes it back).", err=True)


COMMANDS = [keys_group]
