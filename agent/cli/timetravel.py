"""Time travel commands: `agent show FILE --as-of WHEN` and `agent restore TEXT`
(`agent search --as-of` and `agent why --history` are options of those commands)."""

from __future__ import annotations

import json

import click

from agent.cli.common import after_change, get_vault, json_option, report_recovery, vault_option


@click.command("show")
@click.argument("file")
@click.option("--as-of", "when", metavar="WHEN",
              help="The moment: a date or what `git log --until` takes (2026-11-20, "
                   "'3 days ago', 'yesterday 18:00'), or a commit. Default: now (HEAD).")
@json_option("The commit and the text, as JSON.")
@vault_option
def show_cmd(file, when, as_json):
    """Print a vault file as it was at a date or commit (--as-of WHEN).

    Any file: MEMORY.md, a daily note, a session. The commit it comes from is named on stderr, so the text can be piped.
    """
    from agent.ops import timetravel

    vault = get_vault()
    found = timetravel.show_as_of(vault, file, when or "HEAD")
    if as_json:
        click.echo(json.dumps({"commit": found.sha, "as_of": found.line, "text": found.text},
                              ensure_ascii=False))
        return
    click.echo(f"{vault.rel(file)} as of {found.line}", err=True)
    click.echo(found.text, nl=False)


@click.command("restore")
@click.argument("text", nargs=-1, required=True)
@json_option("What was restored, as JSON.")
@vault_option
def restore_cmd(text, as_json):
    """Bring back a removed line of MEMORY.md or USER.md holding TEXT, as one commit.

    The line (removed by a dream, an undo or a hand edit) goes back under its heading, in
    one commit `restore: …` that names the commit that removed it. The newest removal of a line holding TEXT is the one brought back; the commit says
    which commit removed it (and `agent why --history TEXT` shows the whole timeline).
    """
    from agent.ops import timetravel

    vault = get_vault()
    done = timetravel.restore(vault, " ".join(text))
    report_recovery(vault)
    after_change(vault)
    e = done.removed_in
    if as_json:
        click.echo(json.dumps({"file": done.rel, "line": done.line, "commit": done.sha,
                               "removed_in": e.to_json()}, ensure_ascii=False))
        return
    click.echo(f"Restored to {done.rel}: {done.line}  ({(done.sha or '')[:7]})")
    click.echo(f"  it was {'removed' if e.kind == 'removed' else 'changed'} in {e.sha[:7]} "
               f"{e.subject} ({e.date[:10]}, by {e.author})")


COMMANDS = [show_cmd, restore_cmd]
