"""`agent review`: the dream's proposals, accepted, rejected or edited one by one."""

from __future__ import annotations

import json

import click

from agent.cli import complete
from agent.cli.common import after_change, get_vault, json_option, vault_option
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault


def _reviewer(vault: Vault) -> str:
    who = vault.identity.user()
    return f"{who.name} <{who.email}>"


def _print_list(items) -> None:
    if not items:
        click.echo("Nothing waits for review.")
        return
    branches = list(dict.fromkeys(i.branch for i in items))
    click.echo(f"{len(items)} proposal{'s' * (len(items) != 1)} wait{'s' * (len(items) == 1)} "
               f"for review (on {', '.join(branches)}):")
    for item in items:
        click.echo("")
        for line in item.lines():
            click.echo(line)
    click.echo("")
    click.echo("agent review accept N... | reject N... [--because TEXT] | edit N")


def _print_outcome(out, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(out.to_json(), ensure_ascii=False, indent=2))
        return
    if out.left:
        n = len(out.left)
        click.echo(f"Left {n} proposal{'s' * (n != 1)} that came from another machine "
                   f"({', '.join(str(i.number) for i in out.left)}): `agent review` shows "
                   f"where from; accept each by its number if you want it.")
    if not out.done and not out.stale:
        if not out.left:
            click.echo("Nothing waits for review.")
        return
    verb = "Accepted" if out.decision == "accept" else "Rejected"
    for item in out.done:
        click.echo(f"{verb} {item.number}: {item.kind} {item.file}: "
                   f"{item.old if item.op == 'delete' else item.new}")
    for item in out.stale:
        click.echo(f"Not applied {item.number} (stale: {item.stale}); it still waits: "
                   f"reject it, or edit the file by hand.")
    for sha, subject in zip(out.commits, out.subjects):
        click.echo(f"Committed {sha[:7]} {subject}")
    for branch in out.closed:
        click.echo(f"Nothing waits on {branch} any more: branch deleted.")


def _decide(picks, every, decision, as_json, *, because="", new_text=None):
    from agent.ops import review
    from agent.clock import now

    if not picks and not every:
        raise click.UsageError("Give the numbers of the proposals (see `agent review`), or --all.")
    vault = get_vault()
    out = review.decide(vault, None if every else list(picks), decision, now(),
                        _reviewer(vault), because=because, new_text=new_text)
    if out.commits:
        after_change(vault)
    _print_outcome(out, as_json)
    if out.stale and not out.done:
        raise SystemExit(1)


@click.group(invoke_without_command=True)
@json_option("One JSON object per pending edit (JSON Lines).")
@vault_option
@click.pass_context
def review(ctx, as_json):
    """List the dream's proposals and accept, reject or edit them.

    Without a subcommand: the proposals waiting (by default a dream's updates and
    removals; see [dream] review in agent.toml), numbered, with their source."""
    if ctx.invoked_subcommand is not None:
        return
    from agent.ops import review as reviewing

    vault = get_vault()
    # A branch whose proposals went another way (an undo of its dream) goes here too.
    reviewing.tidy(vault)
    items = reviewing.pending(vault)
    if as_json:
        from agent.cli.output import records

        records(i.to_json() for i in items)     # JSON Lines, one pending edit a line
        return
    _print_list(items)


@review.command()
@click.argument("numbers", nargs=-1, shell_complete=complete.review_numbers)
@click.option("--all", "every", is_flag=True, help="Accept every proposal waiting.")
@json_option("What was done, as JSON.")
@vault_option
def accept(numbers, every, as_json):
    """Apply proposals N... to MEMORY.md/USER.md in one commit per dream."""
    _decide(numbers, every, "accept", as_json)


@review.command()
@click.argument("numbers", nargs=-1, shell_complete=complete.review_numbers)
@click.option("--all", "every", is_flag=True, help="Reject every proposal waiting.")
@click.option("--because", default="", metavar="TEXT", help="Why (kept with the rejection).")
@json_option("What was done, as JSON.")
@vault_option
def reject(numbers, every, because, as_json):
    """Reject proposals N...: recorded, so no later dream proposes them again."""
    _decide(numbers, every, "reject", as_json, because=because)


@review.command()
@click.argument("number", shell_complete=complete.review_numbers)
@json_option("What was done, as JSON.")
@vault_option
def edit(number, as_json):
    """Edit proposal N's new text in $EDITOR, then accept it."""
    from agent.ops import review as reviewing

    items = {str(i.number): i for i in reviewing.pending(get_vault())}
    item = items.get(number)
    if item is None:
        raise click.ClickException(f"No proposal {number!r} waits for review "
                                   f"(`agent review` lists them).")
    text = click.edit(item.new + "\n", extension=".md", require_save=True)
    if text is None:
        raise click.ClickException("The editor closed without saving: nothing was changed.")
    line = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    _decide([number], False, "accept", as_json, new_text=line)


COMMANDS = [review]
