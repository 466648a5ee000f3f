"""`agent why TEXT`: where a line of MEMORY.md or USER.md came from."""

from __future__ import annotations

import json

import click

from agent.cli.common import get_vault, vault_option


@click.command("why")
@click.argument("text", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="The story as one JSON object, for scripts.")
@click.option("--history", is_flag=True, help="The timeline of every line that held TEXT: "
              "added, updated, removed, restored, with commit, source and who.")
@vault_option
def why_cmd(text, as_json, history):
    """Tell where the line of MEMORY.md or USER.md that best matches TEXT came from.

    Newest first: the commit that wrote it (a hand edit, remember in a chat turn or from
    an MCP client, a dream, a sync merge), its source (the conversation; the archive
    entries and messages a dream stood on), and earlier versions of the line.
    """
    from agent.ops import why
    vault = get_vault()
    if history:
        from agent.ops import timetravel
        events = timetravel.history(vault, " ".join(text))
        click.echo(json.dumps([e.to_json() for e in events], ensure_ascii=False, indent=1)
                   if as_json else timetravel.render_history(events), nl=as_json)
        return
    story = why.explain(vault, " ".join(text))
    if as_json:
        click.echo(json.dumps(story.to_json(), ensure_ascii=False, indent=1))
    else:
        click.echo(why.render(story), nl=False)


COMMANDS = [why_cmd]
