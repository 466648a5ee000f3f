"""Cron tools: cron_add, cron_list, cron_remove — the model's `agent cron`.

They validate exactly as the command does (agent/schedule.py, agent/stores/cronfile.py). Their change to cron.json
is staged as a function of the file's text (`ctx.vault.update`), so when the turn is
saved it is applied again to cron.json as it is then, under the vault lock: state that
`agent serve` wrote meanwhile is kept.
"""

from __future__ import annotations

from typing import Literal

from agent import schedule as sched
from agent.stores import cronfile
from agent.stores.cronfile import CRON_FILE
from agent.chat.tools.asked import asked_for
from agent.chat.tools.registry import ToolError, current_context, tool
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.turnvault import TurnVault


def _load(text: str | None) -> cronfile.CronFile:
    return cronfile.loads(text) if text is not None else cronfile.CronFile()


def _text(vault: TurnVault) -> str | None:
    """cron.json as this turn sees it (with its staged changes)."""
    return vault.current(CRON_FILE)


def _when(t) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M %Z") if t else "none"


@tool(writes=True)
def cron_add(name: str, message: str, at: str | None = None, every: str | None = None,
             cron: str | None = None, tz: str | None = None, session: str | None = None,
             misfire: Literal["run_once", "skip"] = "run_once", deliver: str | None = None) -> str:
    """Schedule a job: at a time, every interval, or on a cron expression, the agent is
    sent `message` in its own session. Give exactly one of at, every or cron. Use it for
    reminders ("remind me at 15:00 to call Anna") and recurring tasks.

    Args:
        name: A short name for the job, such as "daily-plan" or "call Anna".
        message: What the agent is asked when the job runs, written as an instruction to itself.
        at: Once, at this time: HH:MM today or ISO 8601 such as 2026-11-21T09:00.
        every: Repeat every interval: 90s, 30m, 2h, 1d.
        cron: A five-field cron expression such as "0 9 * * 1-5" (09:00 on weekdays).
        tz: IANA time zone of at/cron, such as Europe/Paris (default: local time).
        session: Session key to run in (default cron/<id>).
        misfire: If the time passes while the agent is not running: run_once or skip.
        deliver: Where the job's reply is sent, such as telegram/123456789 (the chat id of
            a telegram/<chat id> session); leave it out to only record the reply. A job
            with a delivery target waits for the person's approval before it runs, and
            so does any job whose schedule the person's own message did not ask for.
    """
    ctx = current_context()
    schedule = sched.make_schedule(at=at, every=every, cron=cron, tz=tz, now=ctx.now)  # before staging
    asked = asked_for(ctx.asked, schedule, ctx.now)
    made: list[cronfile.Job] = []

    def add(text: str | None) -> str:
        cf = _load(text)
        job = cronfile.add(cf, name, message, ctx.now, at=at, every=every, expr=cron, tz=tz,
                           session=session, misfire=misfire,
                           job_id=made[0].id if made else None, host=ctx.vault.host(),
                           deliver=deliver, created_by="model", asked=asked)
        if not made:
            made.append(job)
        return cronfile.dumps(cf)

    ctx.vault.update(CRON_FILE, add)
    job = made[0]
    if job.held:
        why = (f"reply to be delivered to {job.deliver}" if job.deliver else
               "not a schedule the person's own message asked for")
        return (f"Added job \"{job.name}\" (id {job.id}): {job.schedule.describe()}, session "
                f"{job.session}, {why}. It is held: it does not run until the person "
                f"approves it with `agent cron approve {job.id}`; tell them so.")
    return (f"Added job \"{job.name}\" (id {job.id}): {job.schedule.describe()}, next run "
            f"{_when(job.state.next_run)}, session {job.session}"
            + (f", reply delivered to {job.deliver}." if job.deliver else "."))


@tool
def cron_list() -> str:
    """List the scheduled jobs: id, name, schedule, enabled, next run, last status."""
    ctx = current_context()
    cf = _load(_text(ctx.vault))
    if not cf.jobs:
        return "No scheduled jobs."
    lines = []
    for j in cf.jobs:
        status = j.state.last_status or "never ran"
        if j.state.last_error and status in ("error", "interrupted"):
            status += f" ({j.state.last_error})"
        if j.held:
            status += "; held: awaiting the person's approval (agent cron approve)"
        lines.append(f"- {j.id} \"{j.name}\": {j.schedule.describe()}; "
                     f"{'next run ' + _when(j.state.next_run) if j.enabled else 'disabled'}; "
                     f"last: {status}; message: {j.message}")
    return "\n".join(lines)


@tool(writes=True)
def cron_remove(id: str) -> str:
    """Remove a scheduled job.

    Args:
        id: The job's id, as cron_list shows it (or its name when no other job has it).
    """
    ctx = current_context()
    gone: list[cronfile.Job] = []

    def remove(text: str | None) -> str:
        cf = _load(text)
        try:
            job = cf.find(id)
        except sched.ScheduleError:
            if gone:            # already removed by someone else meanwhile: nothing to do
                return text
            raise
        cf.remove(job.id)
        if not gone:
            gone.append(job)
        return cronfile.dumps(cf)

    if _text(ctx.vault) is None:
        raise ToolError("There are no scheduled jobs to remove.")
    ctx.vault.update(CRON_FILE, remove)
    return f"Removed job \"{gone[0].name}\" (id {gone[0].id})."
