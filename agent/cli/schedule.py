"""Commands of the schedule family: `agent cron ...`, `agent heartbeat ...`, `agent serve`.

`cron list` and `heartbeat list` need no model: nothing here imports the Anthropic SDK,
croniter or yaml at import time.
"""

from __future__ import annotations

from datetime import datetime

import click

from agent.cli import complete
from agent.cli.common import (AgentGroup, after_change, get_vault, quiet_logs, report_recovery,
                              vault_option)
from agent.vault.change import Change
from agent.clock import now as clock_now


def _when(t: datetime | None) -> str:
    return t.astimezone().strftime("%a %Y-%m-%d %H:%M") if t else "-"


def _table(rows: list[list[str]], head: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [head, *rows])


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
    from agent.serve import jobs

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
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job (JSON Lines).")
@vault_option
def cron_list(as_json):
    """List the jobs: id, name, schedule, next run (local time), last status; a job held
    for your approval says so."""
    from agent.stores import cron as cronfile

    vault = get_vault()
    cf = cronfile.read(vault.root)
    for problem in cf.problems:
        click.echo(f"Skipped: {problem}", err=True)
    if as_json:                 # the jobs as cron.json holds them, and whether one is held
        from agent.cli.output import records

        records(dict(j.to_json(), held=j.held) for j in cf.jobs)
        return
    if not cf.jobs:
        click.echo('No cron jobs. Add one: agent cron add NAME --message TEXT --every 1h')
        return
    from agent.stores import delivery

    rows = []
    here = vault.host()
    for j in cf.jobs:
        nxt = _when(j.state.next_run) if j.enabled else "disabled"
        if j.held:
            nxt = "held"
        host = j.host or f"{here} (to be claimed)"
        rows.append([j.id, j.name, j.schedule.describe(), host, nxt,
                     _status(j.state.last_status, j.state.last_error)])
    click.echo(_table(rows, ["ID", "NAME", "SCHEDULE", "HOST", "NEXT RUN", "LAST"]))
    for j in cf.jobs:          # a job that does not run, or a reply not delivered, is never silent
        if j.held:
            click.echo(f"{j.id}  {j.name}: held, awaiting your approval: made by the model, "
                       f"it delivers to {j.deliver}; agent cron approve {j.id} (or remove it)")
        line = delivery.describe(j.state.delivery, _when)
        if line:
            click.echo(f"{j.id}  {j.name}: {line}")


@cron.command("approve")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@vault_option
def cron_approve(job_id):
    """Let a job the model made with a delivery target run (only to a chat you allowed)."""
    from agent.config import load_settings
    from agent.serve import jobs
    from agent.serve.delivery import refusal

    vault = get_vault()
    settings = load_settings(vault.root)
    job, sha = jobs.approve(vault, job_id, clock_now(),
                            lambda target: refusal(vault.root, settings, target))
    if sha is None:
        click.echo(f"{job.label()} ({job.id}) is not held; nothing to approve.")
        return
    after_change(vault)
    click.echo(f"Approved {job.label()} ({job.id}): it delivers to {job.deliver}, next run "
               f"{_when(job.state.next_run)}  ({sha[:7]})")


@cron.command("move")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@click.argument("host", metavar="HOST")
@vault_option
def cron_move(job_id, host):
    """Give a job to another machine (by its `agent.host` name): only that one runs it."""
    from agent.serve import jobs

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
    from agent.serve import jobs

    vault = get_vault()
    job, sha = jobs.remove(vault, job_id)
    after_change(vault)
    click.echo(f"Removed {job.label()} ({job.id})  ({(sha or '')[:7]})")


def _toggle(job_id: str, enabled: bool):
    from agent.serve import jobs

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


@cron.command("run")
@click.argument("job_id", metavar="ID", shell_complete=complete.jobs)
@vault_option
def cron_run(job_id):
    """Run a job now, in the foreground (its schedule is unchanged)."""
    from agent.stores import cron as cronfile
    from agent.serve import cron as serve_cron
    from agent.llm import make_provider

    vault = get_vault()
    job = cronfile.read(vault.root).find(job_id)
    quiet_logs()
    provider = make_provider()
    outcome = serve_cron.run_job_now(vault, provider, job.id, clock_now(),
                                     on_text=lambda s: click.echo(s, nl=False))
    after_change(vault)
    click.echo("")
    if outcome.status != "ok":
        raise click.ClickException(f"{job.label()} ({job.id}) {outcome.status}: {outcome.error}")
    click.echo(f"Ran {job.label()} ({job.id})  ({(outcome.sha or 'no change')[:7]})", err=True)


# ---- agent heartbeat --------------------------------------------------------------------


@click.group(cls=AgentGroup)
@vault_option
def heartbeat():
    """Heartbeats (heartbeat/*.md): prompts the agent runs every interval inside active hours."""


@heartbeat.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per heartbeat (JSON Lines).")
@vault_option
def heartbeat_list(as_json):
    """List the heartbeats: name, schedule, active hours, enabled, next and last run."""
    from agent.stores import heartbeat as hbmod

    vault = get_vault()
    beats, problems = hbmod.load_all(vault.root)
    state = hbmod.read_state(vault.state)
    if as_json:
        from agent.cli.output import records

        for p in problems:
            click.echo(f"skipped {p}", err=True)
        records({"name": hb.name, "schedule": hb.describe(), "active": hb.hours(),
                 "enabled": hb.enabled,
                 "state": state.get(hb.name) if isinstance(state.get(hb.name), dict) else {}}
                for hb in beats)
        return
    if not beats and not problems:
        click.echo("No heartbeats: add heartbeat/<name>.md (frontmatter name, every or cron, "
                   "enabled; the body is the prompt).")
    if beats:
        rows = []
        for hb in beats:
            e = state.get(hb.name) if isinstance(state.get(hb.name), dict) else {}
            same = e.get("sig") == hb.signature()
            nxt = _when(hbmod.due_time(e)) if hb.enabled and same else (
                "disabled" if not hb.enabled else "when serve starts")
            last = _status(e.get("last_status"), e.get("last_error"))
            if e.get("last_run"):
                last += f" ({_when(hbmod.due_time({'next_run': e['last_run']}))})"
            rows.append([hb.name, hb.describe(), hb.hours(), "yes" if hb.enabled else "no",
                         nxt, last])
        click.echo(_table(rows, ["NAME", "SCHEDULE", "ACTIVE", "ENABLED", "NEXT RUN", "LAST"]))
        from agent.stores import delivery
        for hb in beats:
            e = state.get(hb.name) if isinstance(state.get(hb.name), dict) else {}
            line = delivery.describe(e.get("delivery"), _when)
            if line:
                click.echo(f"{hb.name}: {line}")
    for p in problems:
        click.echo(f"skipped {p}", err=True)


def _find_heartbeat(vault, name: str):
    from agent.errors import did_you_mean
    from agent.stores import heartbeat as hbmod

    beats, problems = hbmod.load_all(vault.root)
    hb = next((b for b in beats if b.name == name), None)
    if hb is None:
        broken = [p for p in problems if p.startswith(f"{hbmod.FOLDER}/{name}.md")]
        if broken:
            raise click.ClickException(broken[0])
        known = ", ".join(b.name for b in beats) or "none"
        raise click.ClickException(f"No heartbeat {name!r} in heartbeat/."
                                   f"{did_you_mean(name, [b.name for b in beats])} "
                                   f"Heartbeats: {known}")
    return hb


def _toggle_heartbeat(name: str, enabled: bool) -> None:
    from agent.stores import heartbeat as hbmod

    vault = get_vault()
    with vault.locked():
        report_recovery(vault)
        hb = _find_heartbeat(vault, name)
        word = "enable" if enabled else "disable"
        if hb.enabled == enabled:
            click.echo(f"Heartbeat {hb.name} is already {word}d.")
            return
        text = hbmod.with_enabled(vault.read_text(hb.path), enabled, hb.path)
        if enabled and hb.host is None and vault.has_remote():
            # A vault on several machines: it runs on this one only.
            text = hbmod.with_field(text, "host", vault.host(), hb.path)
        vault.write_text(hb.path, text)
        sha = vault.commit(Change("heartbeat", f'{word} "{hb.name}"'))
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
    from agent.stores import heartbeat as hbmod

    if (every is None) == (expr is None):
        raise click.UsageError("Give exactly one of --every DURATION or --cron EXPR.")
    vault = get_vault()
    rel = f"{hbmod.FOLDER}/{name}.md"
    with vault.locked():
        report_recovery(vault)
        text = hbmod.new_file(name, message, every=every, cron=expr, active_hours=active_hours,
                              tz=tz, enabled=not disabled, deliver=deliver,
                              host=vault.host())
        beats, _ = hbmod.load_all(vault.root)
        if (vault.root / rel).exists() or any(b.name == name for b in beats):
            raise click.ClickException(f"A heartbeat named {name!r} exists already ({rel}); "
                                       f"choose another name or edit it: agent edit {rel}")
        vault.write_text(rel, text)
        hb = hbmod.parse({"name": name, **({"every": every} if every else {"cron": expr}),
                          "enabled": not disabled, "active_hours": active_hours, "tz": tz,
                          "deliver": deliver},
                         message, rel)
        sha = vault.commit(Change("heartbeat", f'add "{name}" ({hb.describe()})'))
    after_change(vault)
    state = "disabled" if disabled else f"active {hb.hours()}"
    click.echo(f"Added heartbeat {name} ({hb.describe()}, {state}): {rel}  ({(sha or '')[:7]})")


@heartbeat.command("run")
@click.argument("name")
@vault_option
def heartbeat_run(name):
    """Run a heartbeat now (even when disabled or outside its active hours)."""
    from agent.stores import heartbeat as hbmod
    from agent.serve import heartbeats as serve_heartbeats
    from agent.llm import make_provider

    vault = get_vault()
    hb = _find_heartbeat(vault, name)
    quiet_logs()
    provider = make_provider()
    outcome = serve_heartbeats.run_heartbeat_now(vault, provider, hb, clock_now(),
                                                 on_text=lambda s: click.echo(s, nl=False))
    after_change(vault)
    click.echo("")
    if outcome.status == "quiet":
        click.echo(f"{hb.name}: {hbmod.OK}, nothing to do (no commit, no transcript).", err=True)
    elif outcome.status != "ok":
        raise click.ClickException(f"heartbeat {hb.name} {outcome.status}: {outcome.error}")
    else:
        click.echo(f"Ran heartbeat {hb.name}  ({(outcome.sha or 'no change')[:7]})", err=True)


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
