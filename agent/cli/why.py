"""`agent why TEXT`: where a line of MEMORY.md or USER.md came from."""

from __future__ import annotations

import json

import click

from agent.cli.common import get_vault, json_option, vault_option


@click.command("why")
@click.argument("text", nargs=-1)
@json_option("The story as one JSON object, for scripts.")
@click.option("--history", is_flag=True, help="The timeline of every line that held TEXT: "
              "added, updated, removed, restored, with commit, source and who.")
@click.option("--last", is_flag=True, help="The memories the newest reply was shown (of "
              "the conversation with the latest turn, or of --session).")
@click.option("--reply", "reply_id", metavar="ID", help="The memories reply ID was shown "
              "(the id of its line in the transcript, as the web page shows it).")
@click.option("--session", metavar="KEY", help="With --last or --reply: the conversation "
              "(e.g. cli/default).")
@vault_option
def why_cmd(text, as_json, history, last, reply_id, session):
    """Tell where the line of MEMORY.md or USER.md that best matches TEXT came from.

    Newest first: the commit that wrote it (a hand edit, remember in a chat turn or from
    an MCP client, a dream, a sync merge), its source (the conversation; the archive
    entries and messages a dream stood on), and earlier versions of the line.

    With --last or --reply ID: what memory a reply was shown (lines of USER.md, MEMORY.md
    and the daily notes, retrieved messages, archive entries, skills), each with the
    commit that taught it.
    """
    from agent.ops import why
    if last or reply_id:
        _used(text, as_json, history, last, reply_id, session)
        return
    if session:
        raise click.UsageError("--session goes with --last or --reply ID.")
    if not text:
        raise click.UsageError("Give some words of a line (agent why Lisbon), or --last, "
                               "or --reply ID.")
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


def _used(text, as_json: bool, history: bool, last: bool, reply_id: str | None,
          session: str | None) -> None:
    """`agent why --last` / `--reply ID`: the record of the memories a reply was shown."""
    from agent.ops import used
    if text or history or (last and reply_id):
        raise click.UsageError("--last and --reply ID take no words and no --history, "
                               "and not each other.")
    vault = get_vault()
    reply = (used.last_reply(vault, session) if last
             else used.find_reply(vault, reply_id or "", session))
    report = used.used(vault, reply)
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False, indent=1))
    else:
        click.echo(used.render(report), nl=False)


COMMANDS = [why_cmd]
