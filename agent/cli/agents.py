"""`agent agents`: the sub-agent runs of the vault (agent/chat/subagents.py)."""

from __future__ import annotations

import json

import click

from agent.cli import complete
from agent.cli.common import get_vault, json_option, vault_option
from agent.cli.output import table
from agent.oneline import shorten


@click.group("agents", invoke_without_command=True)
@json_option("One JSON object per run (JSON Lines).")
@vault_option
@click.pass_context
def agents(ctx, as_json):
    """List sub-agent runs (running, done, failed, interrupted) and their parent turns."""
    if ctx.invoked_subcommand is not None:
        return
    from agent.chat import subagents

    vault = get_vault()
    runs = subagents.list_runs(vault)
    if as_json:
        from agent.cli.output import records

        records({"id": r.id, "status": r.status, "depth": r.depth, "parent": r.parent,
                 "prompt": r.prompt} for r in runs)
        return
    if not runs:
        click.echo("No sub-agent runs yet.")
        return
    # A run's prompt is the model's words: cut to a line, without terminal escapes.
    click.echo(table([[r.id, r.status, str(r.depth), r.parent or "?", shorten(r.prompt, 60)]
                      for r in runs], ["RUN", "STATUS", "DEPTH", "FROM", "PROMPT"]))


@agents.command("show")
@click.argument("run_id", metavar="RUN", shell_complete=complete.runs)
@vault_option
def show(run_id):
    """Print one run: its record, its prompt, what it did and its reply."""
    from agent.chat import subagents

    info = subagents.named_run(get_vault(), run_id)
    click.echo(f"run:     {info.id}")
    click.echo(f"status:  {info.status}")
    click.echo(f"parent:  {info.parent or '?'}")
    click.echo(f"depth:   {info.depth}")
    click.echo(f"started: {info.started}")
    click.echo(f"session: agent/{info.id}")
    if info.error:
        click.echo(f"error:   {info.error}")
    click.echo("")
    if not info.lines:
        click.echo(f"prompt:\n{info.prompt}")
        return
    from agent.llm.records import Text, ToolCall, ToolResult
    from agent.stores import sessions

    for m in info.lines:
        content = m.get("content")
        if isinstance(content, str):
            click.echo(f"[{m.get('role')}] {content}")
            continue
        for b in sessions.blocks(content):
            if isinstance(b, Text):
                click.echo(f"[{m.get('role')}] {b.text}")
            elif isinstance(b, ToolCall):
                click.echo(f"[tool call] {b.name} {json.dumps(b.input, ensure_ascii=False)}")
            elif isinstance(b, ToolResult):
                body = b.content if isinstance(b.content, str) else \
                    json.dumps(sessions.stored(b.content), ensure_ascii=False)
                if len(body) > 500:
                    body = body[:500] + " [...]"
                click.echo(f"[tool result{' (error)' if b.is_error else ''}] {body}")
        if m.get("interrupted"):
            click.echo("[interrupted]")


COMMANDS = [agents]
