"""`agent dream`: consolidate new archive entries into MEMORY.md and USER.md."""

from __future__ import annotations

import sys

import click

from agent.cli.common import (after_change, get_vault, json_option, report_recovery, settings_of,
                              vault_option)
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault


class _Progress:
    """Progress lines on stderr: rewritten in place on a terminal, else each change once."""

    def __init__(self):
        self.tty = sys.stderr.isatty()
        self.last = None
        self.open = False

    def __call__(self, line: str) -> None:
        key = line.split(" [")[0]
        if self.tty and " [" in line:
            click.echo("\r\033[K" + line, nl=False, err=True)
            self.open = True
            return
        self.end()
        if key != self.last:
            click.echo(line, err=True)
        self.last = key

    def end(self):
        if self.open:
            click.echo("", err=True)
            self.open = False


def _print_status(vault: Vault) -> None:
    from agent.dream import dream_status
    st = dream_status(vault)
    click.echo(f"cursor:       {st['cursor']}")
    click.echo(f"archive:      newest {st['newest']}, {st['waiting']} "
               f"entr{'ies' if st['waiting'] != 1 else 'y'} waiting")
    if st.get("conflicts"):
        click.echo(f"conflicts:    {st['conflicts']} sync-conflict block"
                   f"{'s' * (st['conflicts'] != 1)} in memory, for the next dream to settle")
    if st.get("review"):
        n = st["review"]
        click.echo(f"review:       {n} proposal{'s' * (n != 1)} wait{'s' * (n == 1)} for "
                   f"review (`agent review`)")
    flight = st["in_flight"]
    if flight is None:
        click.echo("in flight:    none")
    elif flight.get("problem"):
        click.echo(f"in flight:    {flight['problem']}")
    else:
        phase = flight["phase"]
        what = {"analyst": "analyst batch", "editor": "editor batch",
                "analyst_done": "analyst finished, editor not yet submitted",
                "editor_done": "finished, not yet applied"
                               + (" (previewed by --dry-run)" if flight["previewed"] else "")}[phase]
        batch = f" {flight['batch']}" if flight.get("batch") else ""
        click.echo(f"in flight:    {what}{batch} (archive {flight['first']}..{flight['through']}, "
                   f"{flight['entries']} entr{'y' if flight['entries'] == 1 else 'ies'}, {flight['model']}), "
                   f"started {flight['started']}")
        if flight.get("batch"):
            _print_live(flight["batch"], flight["model"])
    failure = st.get("last_failure")
    if failure:
        click.echo(f"last failure: {failure.get('at')}: archive {failure.get('first', failure.get('cursor', 0) + 1)}.."
                   f"{failure.get('through')}: {failure.get('message')}")


def _print_live(batch_id: str, model: str) -> None:
    from agent.llm import ProviderError, make_provider
    from agent.llm.spec import NoApiKey

    provider = make_provider(settings_of(get_vault()), lazy=True)
    try:
        batches = provider.batching(model)
        if batches is None:
            click.echo(f"              (the provider of {model} has no batch API now)")
            return
        batch = batches.batch_retrieve(batch_id)
    except NoApiKey as e:
        click.echo(f"              ({e} to see the batch's live status)")
        return
    except ProviderError as e:
        click.echo(f"              live status unavailable: {e}")
        return
    click.echo(f"              {batch.describe()}")


def _print_report(out) -> None:
    report = out.report
    if report is None:
        return
    for line in report.describe():
        click.echo(f"  {line}")
    for note in report.notes:
        click.echo(note)


def _print_cost(out) -> None:
    from agent.vault.change import tokens
    if not out.usage:
        return
    click.echo(f"Tokens: {tokens(out.usage)}")
    prices = "batch prices" if out.mode == "batch" else "full price (plain Messages calls)"
    if out.free:
        click.echo(f"Cost: none ({out.model} answers on this machine).")
    elif out.cost is None:
        click.echo(f"Estimated cost: unknown (no price on record for {out.model}).")
    else:
        click.echo(f"Estimated cost at {prices}: ${out.cost:.4f} (from list prices for the "
                   f"model's family; an estimate, not a bill).")


@click.command()
@click.option("--no-wait", is_flag=True,
              help="Submit (or move the batch in flight on) and return; the next run picks it up.")
@click.option("--sync", is_flag=True,
              help="Plain Messages API calls instead of batches: faster, full price.")
@click.option("--dry-run", is_flag=True, help="Show the diff that would be committed; change nothing.")
@click.option("--status", is_flag=True, help="Show the cursor, entries waiting and any batch in flight.")
@click.option("--cancel", is_flag=True,
              help="Cancel the dream in flight; memory and cursor stay as they are.")
@click.option("--max-entries", type=click.IntRange(min=1), metavar="N",
              help="Consolidate at most N archive entries in this run.")
@click.option("--allow-shrink", is_flag=True,
              help="Allow deleting more than a quarter of a file's facts in one run.")
@click.option("--poll-interval", type=float, default=5.0, hidden=True,
              help="Seconds between checks of a batch in flight.")
@json_option("With --status: one JSON object.")
@vault_option
def dream(no_wait, sync, dry_run, status, cancel, max_entries, allow_shrink, poll_interval,
          as_json):
    """Consolidate new archive entries into MEMORY.md and USER.md, and commit."""
    from agent import dream as dreaming
    from agent.llm import make_provider
    from agent.clock import now

    vault = get_vault()
    if as_json and not status:
        raise click.UsageError("--json goes with --status: agent dream --status --json")
    if status and as_json:
        from agent.cli.output import report

        report(dreaming.dream_status(vault))
        return
    if status:
        _print_status(vault)
        return
    if cancel:
        out = dreaming.cancel_dream(vault, make_provider(settings_of(vault), lazy=True))
        click.echo(out.message)
        return
    st = dreaming.dream_status(vault)
    if st.get("cursor_problem"):
        # Read as far as it is valid, it could count entries as new that were consolidated.
        raise click.ClickException(f"{st['cursor_problem']}; fix it (agent edit .dream_cursor) "
                                   f"before the dream runs again (agent doctor says how).")
    if st["in_flight"] is None and st["waiting"] == 0 and not st.get("conflicts"):
        # Said before any provider is made: nothing to do needs no key and calls no model.
        click.echo(f"Nothing to dream: no archive entries after the cursor ({st['cursor']}).")
        return
    from agent.cli.keys import ask
    ask(settings_of(vault))
    while True:
        progress = _Progress()
        try:
            out = dreaming.run_dream(vault, make_provider(settings_of(vault), lazy=True), now(), wait=not no_wait, sync=sync,
                                     dry_run=dry_run, max_entries=max_entries,
                                     allow_shrink=allow_shrink, progress=progress,
                                     poll_interval=poll_interval)
        except KeyboardInterrupt:
            progress.end()
            flight = dreaming.dream_status(vault)["in_flight"]
            if flight and flight.get("batch"):
                click.echo(f"Interrupted. The {flight['phase']} batch {flight['batch']} keeps running; "
                           f"`agent dream` picks it up (`agent dream --cancel` stops it).", err=True)
            else:
                click.echo("Interrupted; memory and cursor are unchanged.", err=True)
            sys.exit(130)
        finally:
            progress.end()
        report_recovery(vault)
        if out.kind == "failed":
            click.echo(out.message, err=True)
            _print_cost(out)
            sys.exit(1)
        if out.kind in ("committed", "no_changes"):
            after_change(vault)
            click.echo(f"Dream over archive {out.range}:")
            _print_report(out)
            if out.sha:
                click.echo(f"Committed {out.sha[:7]} {out.message}")
            else:
                click.echo(out.message)
            if out.branch:
                n = out.report.proposed
                click.echo(f"{n} edit{'s' * (n != 1)} wait{'s' * (n == 1)} for review on branch "
                           f"{out.branch} (`git diff main {out.branch}`): `agent review` lists "
                           f"them.")
            _print_cost(out)
            left = dreaming.dream_status(vault)["waiting"]
            if left and not no_wait and max_entries is None:
                # A life's export: one run a chunk of the oldest entries, each committed,
                # so a stop anywhere keeps what was done and the next `agent dream` goes on.
                click.echo(f"{left:,} entr{'ies' if left != 1 else 'y'} still wait; the next "
                           f"run takes them, oldest first.")
                continue
            return
        if out.kind == "dry_run":
            _print_report(out)
            if out.diff:
                click.echo(out.diff.rstrip("\n"))
            else:
                click.echo("No change to MEMORY.md or USER.md.")
            click.echo(out.message)
            _print_cost(out)
            return
        click.echo(out.message)
        return


COMMANDS = [dream]
