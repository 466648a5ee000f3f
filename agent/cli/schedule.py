"""Commands of the schedule family: `agent cron ...`, `agent heartbeat ...`, `agent serve`.

`cron list` and `heartbeat list` need no model: nothing here imports the Anthropic SDK,
croniter or yaml at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import click

from agent.cli import complete
from agent.cli.common import (AgentGroup, after_change, get_vault, json_option, quiet_logs,
                              report_recovery, settings_of, vault_option)
from agent.cli.output import table
from agent.clock import now as clock_now

if TYPE_CHECKING:
    from agent.llm import Provider
    from agent.ops.runs import Outcome
    from agent.vault.repo import Vault


def _when(t: datetime | None) -> str:
    return t.astimezone().strftime("%a %Y-%m-%d %H:%M") if t else "-"


def _status(status: str | None, error: str | None) -> str:
    if not status:
        return "never ran"
    if error and status in ("error", "interrupted"):
        short = error if len(error) <= 50 else error[:47] + "..."
        return f"{status}: {short}"
    return status


# ---- agent cron -----------------------------------------------------------------------


@click.group(cls=AgentGroup)
@vault_option
def cron():
    """Scheduled jobs (cron.json): a message the agent runs at a time, every interval, or on a cron expression."""


@cron.command("add")
@click.argument("name")
@click.option("--message", "-m", required=True, help="What the agent is asked when the job runs.")
@click.option("--at", "at", metavar="TIME", help="Once, at HH:MM today or an ISO 8601 time.")
@click.option("--every", metavar="DURATION", help="Every interval: 90s, 30m, 2h, 1d.")
@click.option("--cron", "expr", metavar="EXPR", help='A cron expression, e.g. "0 9 * * *".')
@click.option("--tz", metavar="ZONE", help="Time zone of --cron/--at (e.g. Europe/Paris; default local).")
@click.option("--session", metavar="KEY", shell_complete=complete.sessions,
              help="Session to run in (default cron/<id>).")
@click.option("--misfire", type=click.Choice(["run_once", "skip"]), default="run_once",
              show_default=True, help="When a run was missed while agent serve was not running.")
@click.option("--delete-after-run/--keep-after-run", default=None,
              help="Remove the job once it ran (default: yes for --at, no otherwise).")
@click.option("--host", metavar="NAME", help="The machine that runs it, for a vault synced "
              "between machines (default: this one; `agent status` shows its name).")
@click.option("--deliver", metavar="TARGET",
              help="Send the reply to a chat: telegram/<chat id> (agent serve delivers it).")
@vault_option
def cron_add(name, message, at, every, expr, tz, session, misfire, delete_after_run, deliver,
             host):
    """Add a job: agent cron add daily --message "plan my day" --cron "0 9 * * *"."""
    from agent.ops import jobs

    vault = get_vault()
    job, sha = jobs.add(vault, name, message, clock_now(), at=at, every=every, cron=expr, tz=tz,
                        session=session, misfire=misfire, delete_after_run=delete_after_run,
                        deliver=deliver, host=host)
    report_recovery(vault)
    after_change(vault)
    to = f", delivered to {job.deliver}" if job.deliver else ""
    click.echo(f"Added {job.label()} ({job.id}): {job.schedule.describe()}, next run "
               f"{_when(job.state.next_run)}{to}  ({(sha or '')[:7]})")


@cron.command("list")
@json_option("One JSON object per job (JSON Lines).")
@vault_option
def cron_list(as_json):
    """List the jobs: id, name, schedule, next run (local time), last status; a job held
    for your approval says so."""
    from agent.ops import jobs

    vault = get_vault()
    listing = jobs.list_jobs(vault)
    for problem in listing.problems:
        click.echo(f"Skipped: {problem}", err=True)
    if as_json:                 # the jobs as cron.json holds them, and whether one is held
        from agent.cli.output import records

        records(dict(j.job.to_json(), held=j.job.held) for j in listing.jobs)
        return
    if not listing.jobs:
        click.echo('No cron jobs. Add one: agent cron add NAME --message TEXT --every 1h')
        return
    from agent.stores import delivery

    rows = [[j.job.id, j.job.name, j.job.schedule.describe(), j.host,
             j.why_not or _when(j.next),
             _status(j.job.state.last_status, j.job.state.last_error)] for j in listing.jobs]
    click.echo(table(rows, ["ID", "NAME", "SCHEDULE", "HOST", "NEXT RUN", "LAST"]))
    for j in (listed.job for listed in listing.jobs):
        # a job that does not run, or a reply not delivered, is never silent
        if j.held:
            what = f"it delivers to {j.deliver}" if j.deliver else \
                "a schedule your own message did not ask for"
            click.echo(f"{j.id}  {j.name}: held, awaiting your approval: made by the model, "
                       f"{what}; agent cron approve {j.id} (or remove it)")
        line = delivery.describe(j.state.delivery, _when)
        if line:
            click.echo(f"{j.id}  {j.name}: {line}")


@cron.command("edit")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@click.option("--name", metavar="NAME", help="A new name.")
@click.option("--message", "-m", help="A new message: what the agent is asked when it runs.")
@click.option("--at", "at", metavar="TIME", help="Now once, at HH:MM today or an ISO 8601 time.")
@click.option("--every", metavar="DURATION", help="Now every interval: 90s, 30m, 2h, 1d.")
@click.option("--cron", "expr", metavar="EXPR", help='Now on a cron expression, e.g. "0 9 * * *".')
@click.option("--tz", metavar="ZONE", help="Time zone of the new --cron/--at.")
@vault_option
def cron_edit(job_id, name, message, at, every, expr, tz):
    """Change a job's name, message or schedule, keeping the rest (its id, its history)."""
    from agent.ops import jobs

    if (name, message, at, every, expr, tz) == (None,) * 6:
        raise click.UsageError("Say what to change: --name, --message, or a new schedule "
                               "(--at, --every or --cron).")
    vault = get_vault()
    job, sha = jobs.edit(vault, job_id, clock_now(), name=name, message=message, at=at,
                         every=every, cron=expr, tz=tz)
    if sha is None:
        click.echo(f"{job.label()} ({job.id}) is already so; nothing changed.")
        return
    report_recovery(vault)
    after_change(vault)
    nxt = _when(job.state.next_run) if job.enabled and not job.held else \
        ("held" if job.held else "disabled")
    click.echo(f"Edited {job.label()} ({job.id}): {job.schedule.describe()}, next run {nxt}  "
               f"({sha[:7]})")


@cron.command("approve")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@vault_option
def cron_approve(job_id):
    """Let a job the model made run (one with a delivery target: only to a chat you allowed)."""
    from agent.config import load_settings
    from agent.ops import jobs
    from agent.serve.delivery import refusal

    vault = get_vault()
    settings = load_settings(vault.root)
    job, sha = jobs.approve(vault, job_id, clock_now(),
                            lambda target: refusal(vault.root, settings, target))
    if sha is None:
        click.echo(f"{job.label()} ({job.id}) is not held; nothing to approve.")
        return
    after_change(vault)
    where = f"it delivers to {job.deliver}, " if job.deliver else ""
    click.echo(f"Approved {job.label()} ({job.id}): {where}next run "
               f"{_when(job.state.next_run)}  ({sha[:7]})")


@cron.command("move")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@click.argument("host", metavar="HOST")
@vault_option
def cron_move(job_id, host):
    """Give a job to another machine (by its `agent.host` name): only that one runs it."""
    from agent.ops import jobs

    vault = get_vault()
    job, sha = jobs.move(vault, job_id, host)
    if sha is None:
        click.echo(f"{job.label()} ({job.id}) already runs on {host}.")
        return
    after_change(vault)
    tail = "" if host == vault.host() else "; it stops running here once both machines sync"
    click.echo(f"Moved {job.label()} ({job.id}) to {host}{tail}  ({sha[:7]})")


@cron.command("remove")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@vault_option
def cron_remove(job_id):
    """Remove a job (by id, or by name when only one job has it)."""
    from agent.ops import jobs

    vault = get_vault()
    job, sha = jobs.remove(vault, job_id)
    after_change(vault)
    click.echo(f"Removed {job.label()} ({job.id})  ({(sha or '')[:7]})")


def _toggle(job_id: str, enabled: bool):
    from agent.ops import jobs

    vault = get_vault()
    job, sha = jobs.set_enabled(vault, job_id, enabled, clock_now())
    if sha is None:
        click.echo(f"{job.label()} ({job.id}) is already {'enabled' if enabled else 'disabled'}.")
        return
    after_change(vault)
    tail = f", next run {_when(job.state.next_run)}" if enabled else ""
    click.echo(f"{'Enabled' if enabled else 'Disabled'} {job.label()} ({job.id}){tail}  ({sha[:7]})")


@cron.command("enable")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@vault_option
def cron_enable(job_id):
    """Enable a job (its next run is reckoned from now)."""
    _toggle(job_id, True)


@cron.command("disable")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@vault_option
def cron_disable(job_id):
    """Disable a job without removing it."""
    _toggle(job_id, False)


def _run_now(vault: Vault, label: str,
             run: Callable[[Provider, Callable[[str], None]], Outcome],
             quiet: str | None = None) -> None:
    """`run(provider, on_text)` (the turn of a job or a heartbeat, now), after the keys
    agent.toml sends are asked about, its reply streamed to the terminal and its outcome
    said (`quiet` for a heartbeat that had nothing to do)."""
    from agent.cli.keys import ask
    from agent.llm import make_provider

    quiet_logs()
    ask(settings_of(vault))
    provider = make_provider(settings_of(vault))
    outcome = run(provider, lambda s: click.echo(s, nl=False))
    after_change(vault)
    click.echo("")
    if outcome.status == "quiet" and quiet is not None:
        click.echo(quiet, err=True)
    elif outcome.status != "ok":
        raise click.ClickException(f"{label} {outcome.status}: {outcome.error}")
    else:
        click.echo(f"Ran {label}  ({(outcome.sha or 'no change')[:7]})", err=True)


@cron.command("run")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@vault_option
def cron_run(job_id):
    """Run a job now, in the foreground (its schedule is unchanged)."""
    from agent.ops import jobs

    vault = get_vault()
    job = jobs.find(vault, job_id)
    _run_now(vault, f"{job.label()} ({job.id})", lambda provider, on_text: jobs.run_now(
        vault, provider, job.id, clock_now(), on_text=on_text))


# ---- agent heartbeat --------------------------------------------------------------------


@click.group(cls=AgentGroup)
@vault_option
def heartbeat():
    """Heartbeats (heartbeat/*.md): prompts the agent runs every interval inside active hours."""


@heartbeat.command("list")
@json_option("One JSON object per heartbeat (JSON Lines).")
@vault_option
def heartbeat_list(as_json):
    """List the heartbeats: name, schedule, active hours, enabled, next and last run."""
    from agent.ops import heartbeats as ops

    vault = get_vault()
    listing = ops.list_heartbeats(vault)
    if as_json:
        from agent.cli.output import records

        for p in listing.problems:
            click.echo(f"skipped {p}", err=True)
        records({"name": b.heartbeat.name, "schedule": b.heartbeat.describe(),
                 "active": b.heartbeat.hours(), "enabled": b.heartbeat.enabled,
                 "state": b.state} for b in listing.heartbeats)
        return
    if not listing.heartbeats and not listing.problems:
        click.echo("No heartbeats: add heartbeat/<name>.md (frontmatter name, every or cron, "
                   "enabled; the body is the prompt).")
    if listing.heartbeats:
        from agent.stores import heartbeatfile

        rows = []
        for b in listing.heartbeats:
            hb, e = b.heartbeat, b.state
            last = _status(e.get("last_status"), e.get("last_error"))
            if e.get("last_run"):
                last += f" ({_when(heartbeatfile.due_time({'next_run': e['last_run']}))})"
            rows.append([hb.name, hb.describe(), hb.hours(), "yes" if hb.enabled else "no",
                         b.why_not or _when(b.next), last])
        click.echo(table(rows, ["NAME", "SCHEDULE", "ACTIVE", "ENABLED", "NEXT RUN", "LAST"]))
        from agent.stores import delivery
        for b in listing.heartbeats:
            line = delivery.describe(b.state.get("delivery"), _when)
            if line:
                click.echo(f"{b.heartbeat.name}: {line}")
    for p in listing.problems:
        click.echo(f"skipped {p}", err=True)


def _toggle_heartbeat(name: str, enabled: bool) -> None:
    from agent.ops import heartbeats as ops

    vault = get_vault()
    try:
        hb, sha = ops.set_enabled(vault, name, enabled)
    finally:
        report_recovery(vault)
    word = "enable" if enabled else "disable"
    if sha is None:
        click.echo(f"Heartbeat {hb.name} is already {word}d.")
        return
    after_change(vault)
    click.echo(f"{word.capitalize()}d heartbeat {hb.name} ({hb.describe()}, active "
               f"{hb.hours()})  ({(sha or '')[:7]})")


@heartbeat.command("enable")
@click.argument("name")
@vault_option
def heartbeat_enable(name):
    """Enable a heartbeat (sets enabled: true in its file, nothing else changed)."""
    _toggle_heartbeat(name, True)


@heartbeat.command("disable")
@click.argument("name")
@vault_option
def heartbeat_disable(name):
    """Disable a heartbeat without removing its file."""
    _toggle_heartbeat(name, False)


@heartbeat.command("add")
@click.argument("name")
@click.option("--message", "-m", required=True, help="The prompt the agent runs each time.")
@click.option("--every", metavar="DURATION", help="Every interval: 30m, 2h, 1d.")
@click.option("--cron", "expr", metavar="EXPR", help='A cron expression, e.g. "0 8 * * *".')
@click.option("--active-hours", metavar="HH:MM-HH:MM", help="Only between these times (e.g. 08:00-22:00).")
@click.option("--tz", metavar="ZONE", help="Time zone (e.g. Europe/Paris; default local).")
@click.option("--disabled", is_flag=True, help="Add it disabled (enable it later).")
@click.option("--deliver", metavar="TARGET",
              help="Send a reply (not HEARTBEAT_OK) to a chat: telegram/<chat id>.")
@vault_option
def heartbeat_add(name, message, every, expr, active_hours, tz, disabled, deliver):
    """Add a heartbeat: agent heartbeat add inbox --every 2h -m "check my inbox note"."""
    from agent.ops import heartbeats as ops

    if (every is None) == (expr is None):
        raise click.UsageError("Give exactly one of --every DURATION or --cron EXPR.")
    vault = get_vault()
    try:
        hb, sha = ops.add(vault, name, message, every=every, cron=expr,
                          active_hours=active_hours, tz=tz, enabled=not disabled,
                          deliver=deliver)
    finally:
        report_recovery(vault)
    after_change(vault)
    state = "disabled" if disabled else f"active {hb.hours()}"
    click.echo(f"Added heartbeat {name} ({hb.describe()}, {state}): {hb.path}  "
               f"({(sha or '')[:7]})")


@heartbeat.command("run")
@click.argument("name")
@vault_option
def heartbeat_run(name):
    """Run a heartbeat now (even when disabled or outside its active hours)."""
    from agent.ops import heartbeats as ops
    from agent.stores import heartbeatfile

    vault = get_vault()
    hb = ops.find(vault, name)
    _run_now(vault, f"heartbeat {hb.name}", lambda provider, on_text: ops.run_now(
        vault, provider, hb.name, clock_now(), on_text=on_text),
        quiet=f"{hb.name}: {heartbeatfile.OK}, nothing to do (no commit, no transcript).")


# ---- agent serve ---------------------------------------------------------------------------


@click.command()
@click.option("--tick", type=float, default=5.0, show_default=True, metavar="SECONDS",
              help="How often to look for due work and hand edits.")
@click.option("--once", is_flag=True, help="Do one pass of due work, then exit.")
@vault_option
def serve(tick, once):
    """Run cron jobs, heartbeats, the nightly dream and idle compaction until stopped."""
    from agent.serve import server as serve_mod

    if tick <= 0:
        raise click.BadParameter("must be above zero", param_hint="--tick")
    vault = get_vault()
    code = serve_mod.main(vault, tick=tick, once=once)
    raise SystemExit(code)


COMMANDS = [cron, heartbeat, serve]
