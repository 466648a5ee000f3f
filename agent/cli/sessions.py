"""Commands about the conversations themselves: `agent sessions` (which there are) and
`agent archive` (compact them now). The doing is agent.ops.sessions'; this module parses
and prints."""

from __future__ import annotations

import sys

import click

from agent.oneline import shorten
from agent.cli import complete
from agent.cli.common import (get_vault, json_option, name_vault, quiet_logs, report_recovery,
                              vault_option)
from agent.ops.sessions import DEFAULT_SESSION


# ---- agent archive ------------------------------------------------------------------------


@click.command("archive")
@click.option("--session", metavar="KEY", shell_complete=complete.sessions,
              help=f"The conversation (default {DEFAULT_SESSION}).")
@click.option("--all", "all_", is_flag=True, help="Every conversation of the vault.")
@vault_option
def archive_cmd(session, all_):
    """Archive conversations now, so the dream sees recent talk.

    Compacts the whole window of the conversation (or of every one) into an archive
    entry with a model-written topic and summary.
    """
    from agent.ops import sessions as ops
    from agent.stores import sessions

    if session and all_:
        raise click.UsageError("Give --session KEY or --all, not both.")
    vault = get_vault()
    if all_:
        keys = ops.oldest_first(vault, sessions.list_sessions(vault.root))
    elif session:
        keys = [ops.check_known(vault, session)]
    else:
        keys = [sessions.check_key(DEFAULT_SESSION)]
    from agent.config import load_settings
    from agent.llm import make_provider, sdk_of
    from agent.llm.preload import preload

    settings = load_settings(vault.root)
    preload(sdk_of(settings))
    quiet_logs()
    from agent.cli.keys import ask
    ask(settings)
    from agent.chat.compact import CompactError
    from agent.clock import now

    provider = make_provider(settings)
    failed, done = 0, []
    for key in keys:
        def shown(entry, left=None, key=key):
            more = f", about {left // 1024:,} KB of imported history left" if left else ""
            click.echo(f"{key}: archive entry {entry} ({ops.topic(vault, entry)}){more}")
        try:
            made = ops.archive(vault, provider, key, now, on_entry=shown)
        except CompactError as e:
            failed += 1
            click.echo(str(e), err=True)
            continue
        except KeyboardInterrupt:
            kept = (f"{', '.join(done)} archived; " if done else "")
            click.echo(f"\n[interrupted: {kept}{key} is unchanged]", err=True)
            sys.exit(130)
        report_recovery(vault)
        if not made:
            click.echo(f"{key}: nothing to archive")
        else:
            done.append(key)
    if not keys:
        click.echo("No conversations yet.")
    if done:
        name_vault(vault)
    if failed:
        sys.exit(1)


# ---- agent sessions -----------------------------------------------------------------------


def _short(text: str, width: int) -> str:
    return shorten(text, width)


@click.command("sessions")
@json_option("A JSON array, for scripts.")
@vault_option
def sessions_cmd(as_json):
    """List the conversations: messages, first and last time, the last line."""
    import json
    import shutil

    from agent.ops import sessions as ops

    vault = get_vault()
    found = ops.list_sessions(vault)
    titles = ops.titles(vault, found)
    if as_json:
        click.echo(json.dumps([{"session": s.key, "title": titles.get(s.key),
                                "messages": s.messages, "first": s.first,
                                "last": s.last, "last_speaker": s.last_speaker,
                                "last_text": s.last_text} for s in found],
                              ensure_ascii=False, indent=2))
        return
    if not found:
        click.echo('No conversations yet. Start one: agent chat -m "hello"')
        return

    def when(ts):
        return ts[:16].replace("T", " ") if ts else "-"

    head = ["SESSION", "MESSAGES", "FIRST", "LAST", "LAST LINE"]
    rows = [[s.key, str(s.messages), when(s.first), when(s.last),
             f"{s.last_speaker}: {s.last_text}" if s.last_speaker else s.last_text]
            for s in found]
    if titles:           # imported conversations are known by their titles
        head[4] = "TITLE / LAST LINE"
        rows = [r[:4] + [f"{titles[r[0]]}: {r[4]}" if r[0] in titles else r[4]] for r in rows]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    if sys.stdout.isatty():             # fit the terminal; a pipe or a file gets it whole
        width = shutil.get_terminal_size((100, 24)).columns
        room = max(20, width - sum(widths) - 2 * 4)
    else:
        room = max(len(r[4]) for r in [head, *rows])
    for r in [head, *rows]:
        cells = [r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2].ljust(widths[2]),
                 r[3].ljust(widths[3]), _short(r[4], room)]
        click.echo("  ".join(cells).rstrip())


COMMANDS = [archive_cmd, sessions_cmd]
