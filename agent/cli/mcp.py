"""`agent mcp` (serve the vault to MCP clients), and the MCP servers the agent uses as
tools: `agent mcp list`, `agent mcp approve NAME`, `agent mcp revoke NAME`."""

from __future__ import annotations


import click

from agent.cli.common import get_vault, json_option, report_recovery, vault_option


@click.group("mcp", invoke_without_command=True)
@click.option("--read-only", is_flag=True,
              help="Offer the reading tools only (search, recent, history, why).")
@click.option("--review", is_flag=True,
              help="Let this client accept and reject the dream's proposals (review_decide); "
                   "put it only in the command line of the client you review with.")
@vault_option
@click.pass_context
def mcp_group(ctx, read_only, review):
    """Serve the vault as memory to MCP clients (Claude Code, Claude Desktop) over stdio.

    Tools: search, remember, note, recent, history, why, review_list; resources:
    MEMORY.md, USER.md and today's note. Every write is one commit `mcp(<client>): ...`.
    A client decides reviews (review_decide) only when its command line has --review. A
    client starts this command itself; see the README for the configuration snippet.
    """
    if ctx.invoked_subcommand is not None:
        return
    vault = get_vault()
    from agent.mcp_server.server import serve
    serve(vault, read_only=read_only, review=review)
    report_recovery(vault)


@mcp_group.command("list")
@click.option("--timeout", type=float, default=None, metavar="SECONDS",
              help="How long each server may take to start (default: its startup_timeout).")
@json_option("One JSON object per server (JSON Lines).")
@vault_option
def list_cmd(timeout, as_json):
    """Show the MCP servers of agent.toml, whether each is approved on this machine,
    whether it starts, and its tools (only approved servers are started)."""
    from agent.chat.mcp_client.client import describe_servers, survey
    vault = get_vault()
    if as_json:
        rows = survey(vault, timeout=timeout)
        from agent.cli.output import records

        records(rows)                       # JSON Lines, one server a line
        ok = all(not r["enabled"] or (r["approval"] == "approved" and r["starts"]) for r in rows)
    else:
        lines, ok = describe_servers(vault, timeout=timeout)
        for line in lines:
            click.echo(line)
    if not ok:
        raise SystemExit(1)


@mcp_group.command("approve")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Approve without asking.")
@vault_option
def approve_cmd(name, yes):
    """Let agent chat and agent serve start MCP server NAME on this machine.

    Shows the exact command line (command, args, environment variable names, folder,
    and the vault folders it can load code from) and asks first. The approval is kept
    in .agent/ (never in git); if the command line or any file in those folders
    changes (by a sync, say), the server is unapproved again.
    """
    from agent.chat.mcp_client import approval
    from agent.chat.mcp_client.client import find
    from agent.clock import now
    vault = get_vault()
    c = find(vault, name)
    state = approval.status(vault.root, c)
    if state == "approved":
        click.echo(f"{name} is already approved on this machine.")
        return
    click.echo(f"MCP server {name} (agent.toml)"
               + (", changed since it was approved:" if state == "changed" else ":"))
    for line in approval.describe(vault.root, c):
        click.echo(line)
    if state == "changed" and approval.changes(vault.root, c):
        click.echo(f"  changed  {', '.join(approval.changes(vault.root, c))}")
    if state == "unpinnable":
        raise click.ClickException(f"{name} is not approved.")
    if not yes and not click.confirm("Start it, outside the sandbox, whenever agent chat or "
                                     "agent serve runs?", default=False):
        raise click.ClickException(f"{name} is not approved.")
    approval.approve(vault.root, c, now())
    click.echo(f"Approved {name} on this machine.")


@mcp_group.command("revoke")
@click.argument("name")
@vault_option
def revoke_cmd(name):
    """Take back the approval of MCP server NAME on this machine: it is not started
    until approved again."""
    from agent.chat.mcp_client import approval
    vault = get_vault()
    if not approval.revoke(vault.root, name):
        raise click.ClickException(f"{name} is not approved on this machine.")
    click.echo(f"Revoked {name}: it is not started until approved again.")


COMMANDS = [mcp_group]
