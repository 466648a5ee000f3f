"""`agent forget`: remove a phrase from every file and every commit, here and on every
clone at its next sync, and print a receipt that proves it."""

from __future__ import annotations

import json
import sys

import click

from agent.cli.common import get_vault, json_option, read_stdin, report_recovery, vault_option
from agent.errors import UserError


@click.command("forget")
@click.argument("text", nargs=-1)
@click.option("--message", "message_id", metavar="ID",
              help="Forget the text of one transcript message (its id, as agent search shows).")
@click.option("--fact", is_flag=True,
              help="TEXT names one line of MEMORY.md or USER.md: forget that whole line.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option("The receipt as JSON.")
@vault_option
def forget_cmd(text, message_id, fact, yes, as_json):
    """Remove a phrase from every file and commit, here and on every clone.

    Shows where it is first (files and commits, with counts) and asks. Then the text
    becomes [forgotten] in the files and in every commit of every branch (authors,
    dates and messages kept), old copies are pruned, the search index and vectors are
    rebuilt, the remote is updated (--force-with-lease), and a tombstone (a salted hash,
    never the text) is shown to every other clone at its next `agent sync`, which does
    the same once its person accepts it there (`agent sync accept`). A kill at any
    instant is finished or undone by the next command.
    Give TEXT as an argument or on stdin (so it stays out of your shell history:
    agent forget < file).
    """
    from agent.clock import now
    from agent.ops import forget as op

    vault = get_vault()
    phrase = " ".join(text)
    if message_id:
        if phrase:
            raise UserError("Give either TEXT or --message ID, not both.")
        phrase = op.message_text(vault, message_id)
    elif not phrase and not sys.stdin.isatty():
        phrase = read_stdin("forget").rstrip("\n")
    if not phrase:
        raise click.ClickException('Nothing to forget: give the text, as in agent forget '
                                   '"my bank password"')
    if fact:
        phrase = op.fact_text(vault, phrase)
    phrase = op.check_phrase(phrase)
    found = op.survey(vault, phrase)
    if found.empty:
        click.echo("Nothing to forget: no file and no commit holds that text.")
        return
    if not as_json:
        click.echo("Found in:")
        click.echo("\n".join(found.lines()))
    if not yes:
        if not sys.stdin.isatty():
            raise UserError("Forgetting rewrites history: confirm on a terminal, or pass "
                            "--yes.")
        click.confirm("Replace it by [forgotten] everywhere, rewriting history on every "
                      "branch and the remote?", abort=True)
    receipt = op.forget(vault, phrase, now())
    report_recovery(vault)
    if as_json:
        click.echo(json.dumps(receipt.as_dict()))
    else:
        click.echo(_receipt_text(receipt))
    if not receipt.verified:
        sys.exit(1)


def _receipt_text(r) -> str:
    out = ["Forgotten. Receipt:"]
    for path, n in sorted(r.survey.files.items()):
        out.append(f"  {path}: {n} line{'s' * (n != 1)} now read [forgotten]")
    out.append(f"  history: {r.rewritten} commit{'s' * (r.rewritten != 1)} rewritten on every "
               f"branch (authors, dates and messages kept); reflogs expired, old objects pruned")
    if r.state_files:
        out.append(f"  local state: {', '.join(r.state_files)}")
    out.append(f"  tombstone {r.tombstone} in .forgotten ({(r.commit or '')[:7]}): other "
               f"clones are shown it at their next agent sync, and forget it once accepted "
               f"there (agent sync accept)")
    if r.pushed:
        out.append(f"  remote: {r.pushed} rewritten (--force-with-lease)")
    if r.push_problem:
        out.append(f"  remote: {r.push_problem}")
    out.append("Verification (occurrences left):")
    for place, n in r.checks.items():
        out.append(f"  {place}: {n}{'  ✓' if not n else '  STILL THERE'}")
    if len(r.survey.text) < 12:
        out.append("The tombstone holds a salted, slow hash of the text, never the text; a "
                   "text this short could still be guessed from it by trying candidates.")
    if r.pushed:
        out.append("A copy made before now (another clone not yet synced, a backup, a fork) "
                   "keeps it until it syncs or is deleted.")
    return "\n".join(out)


COMMANDS = [forget_cmd]
