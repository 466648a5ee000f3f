"""`agent mcp` (serve the vault to MCP clients) and `agent mcp list` (the MCP servers the
agent uses as tools)."""

from __future__ import annotations

import click

from agent.cli.common import get_vault, report_recovery, vault_option


@click.group("mcp", invoke_without_command=True)
@click.option("--read-only", is_flag=True,
              help="Offer the reading tools only (search, recent, history, why).")
@vault_option
@click.pass_context
def mcp_group(ctx, read_only):
    """Serve the vault as memory to MCP clients (Claude Code, Claude Desktop) over stdio.

    Tools: search, remember, note, recent, history, why; resources: MEMORY.md, USER.md
    and today's note. Every write is one commit `mcp(<client>): ...`. A client starts
    this command itself; see the README for the configuration snippet.
    """
    if ctx.invoked_subcommand is not None:
        return
    vault = get_vault()
    from agent.mcp.server import serve
    serve(vault, read_only=read_only)
    report_recovery(vault)


@mcp_group.command("list")
@click.option("--timeout", type=float, default=None, metavar="SECONDS",
              help="How long each server may take to start (default: its startup_timeout).")
@vault_option
def list_cmd(timeout):
    """Show the MCP servers of agent.toml, whether each starts, and its tools."""
    from agent.mcp.client import describe_servers
    vault = get_vault()
    lines, ok = describe_servers(vault, timeout=timeout)
    for line in lines:
        click.echo(line)
    if not ok:
        raise SystemExit(1)


COMMANDS = [mcp_group]
