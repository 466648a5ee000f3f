"""A scheduled run done now or when due: a cron job's or a heartbeat's turn, run so that
it never fails its caller (a failure is its outcome), and recorded: a job's run in
cron.json in the same commit as its turn, a heartbeat's in serve's state file. The one
implementation `agent serve`, `agent cron run`, `agent heartbeat run` and the web page
call (through agent.ops.jobs.run_now and agent.ops.heartbeats.run_now).

A run's problems go to serve's log (`agent.serve`), where its runs are reported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, TYPE_CHECKING

from agent import schedule as sched
from agent.oneline import shorten
from agent.config import load_settings
from agent.errors import UserError
from agent.fs import atomic
from agent.llm import Provider, ProviderError
from agent.stores import cronfile
from agent.stores import delivery
from agent.stores import heartbeatfile
from agent.stores import sessions
from agent.stores.cronfile import CRON_FILE, CronFileError, Job
from agent.vault.change import Change
from agent.vault.repo import Vault

if TYPE_CHECKING:
    from agent.chat.turn import TurnResult
    from agent.config import Settings

log = logging.getLogger("agent.serve")


@dataclass
class Outcome:
    status: str                 # ok | quiet | error | interrupted | skipped
    sha: str | None = None
    error: str | None = None
    reply: str = ""


def run_turn(vault: Vault, provider: Provider, session: str, text: str, now: datetime,
             **options: Any) -> tuple[TurnResult | None, str | None]:
    """run_turn (agent.chat.turn, with its keyword `options`), with failures as (None,
    message): a failed run is recorded, never fatal."""
    from agent.chat.turn import run_turn

    try:
        return run_turn(vault, provider, session, text, now, **options), None
    except UserError as e:
        return None, str(e) or type(e).__name__
    except ProviderError as e:           # the loop records API errors itself; this is a
        return None, f"{type(e).__name__}: {e}"   # failure outside its model calls
    except KeyboardInterrupt:
        return None, "interrupted"


def short(text: str | None, n: int = 72) -> str:
    return shorten(text, n)



# ---- cron jobs ------------------------------------------------------------------------


def job_text(job: Job, due: datetime | None, now: datetime) -> str:
    """What the model is told when a job runs: its message, then which job is running
    (after it, so the commit subject made from the text starts with the message)."""
    when = (due or now).astimezone(sched.zone(job.schedule.tz))
    how = f"due {when:%a %Y-%m-%d %H:%M %Z}" if due else "run by hand"
    return (f"{job.message}\n\n(Scheduled job \"{job.name}\", {job.schedule.describe()}, "
            f"{how}: this message was scheduled earlier and is running now; do what it asks.)")


def _recorder(job_id: str, now: datetime, due: datetime | None, following: datetime | None,
              problems: list[str]) -> Callable[[Vault, str, str | None], list[str]]:
    """A function writing a run's result into cron.json as it is (call under the lock)."""
    def record(vault: Vault, status: str, error: str | None) -> list[str]:
        try:
            before = cronfile.read_text(vault.root)
            if before is None:
                return []
            cf = cronfile.loads(before)
        except CronFileError as e:
            problems.append(f"the run's state was not recorded: {e}")
            return []
        job = cf.get(job_id)
        if job is None:                       # removed while it ran
            return []
        if not job.runs_on(vault.host()):
            # Another machine's job (run here by hand): its state is that machine's.
            return []
        if due is not None and job.state.next_run == due:
            job.state.next_run = following    # else someone rescheduled it meanwhile
        job.state.last_run = now
        job.state.last_status = status
        job.state.last_error = error
        if status == "ok" and job.deliver:          # sent after the commit (delivery.py)
            job.state.delivery = delivery.pending(job.deliver, now)
        if (status == "ok" and due is not None and job.delete_after_run
                and job.state.next_run is None and job.state.delivery is None):
            cf.remove(job_id)       # (one with a reply to deliver goes once it is delivered)
        after = cronfile.dumps(cf)
        if after == before:
            return []
        vault.write_text(CRON_FILE, after)
        return [CRON_FILE]
    return record


def execute_job(vault: Vault, provider: Provider, job: Job, now: datetime, *, due: datetime | None,
                following: datetime | None, settings: Settings | None = None,
                on_text: Callable[[str], None] | None = None) -> Outcome:
    """Run `job`'s turn and record the run in cron.json: in the turn's commit, or, when
    the turn was cut short before it was saved, in a commit of its own."""
    problems: list[str] = []
    record = _recorder(job.id, now, due, following, problems)
    recorded: list[tuple[str, str | None]] = []

    def on_save(error: str | None, interrupted: bool) -> None:
        # The turn is being saved: its commit carries the run's record too.
        if interrupted:
            status, why = "interrupted", "stopped before the reply was complete"
        elif error:
            status, why = "error", error
        else:
            status, why = "ok", None
        record(vault, status, why)
        recorded.append((status, why))

    # The job's message is the transcript's user line, but nobody typed it: marked, so
    # explicit learning never counts it as the person's ask (agent.dream.learning).
    result, failure = run_turn(vault, provider, job.session, job_text(job, due, now), now,
                               kind="cron", settings=settings, on_text=on_text, on_save=on_save,
                               line_extra={sessions.JOB: job.id})
    sha = getattr(result, "sha", None)
    if recorded:
        status, error = recorded[0]
    else:
        if result is not None and result.interrupted:
            status, error = "interrupted", "stopped before the reply was complete"
        elif result is not None and result.error:
            status, error = "error", str(result.error)
        elif failure == "interrupted":
            status, error = "interrupted", "stopped before the turn was saved"
        elif failure:
            status, error = "error", failure
        else:
            status, error = "ok", None
        with vault.locked():
            if record(vault, status, error):
                what = {"error": "failed", "interrupted": "was interrupted"}.get(status, "ran")
                reason = f": {short(error)}" if error else ""
                sha = vault.commit(Change("cron", f"{job.label()} {what}{reason}",
                                          trailers={"Job": job.id})) or sha
    for p in problems:
        log.warning("cron %s (%s): %s", job.label(), job.id, p)
    return Outcome(status, sha, error, getattr(result, "reply", "") or "")


def run_job_now(vault: Vault, provider: Provider, job_id: str, now: datetime, *,
                on_text: Callable[[str], None] | None = None) -> Outcome:
    """`agent cron run`: run a job at once; its next run stays as it was."""
    with vault.locked():
        job = cronfile.read(vault.root).find(job_id)
    return execute_job(vault, provider, job, now, due=None, following=None,
                       settings=load_settings(vault.root), on_text=on_text)


# ---- heartbeats ----------------------------------------------------------------------


def pending_for(target: str | None, now: datetime, status: str,
                text: str | None = None) -> dict[str, Any] | None:
    """The record a run leaves: pending when it went well and has somewhere to go."""
    if target is None or status != "ok":
        return None
    if text is not None and (not text.strip() or text.strip() == heartbeatfile.OK):
        return None
    return delivery.pending(target, now, text)


def execute_heartbeat(vault: Vault, provider: Provider, hb: heartbeatfile.Heartbeat, now: datetime, *,
                      settings: Settings | None = None, on_text: Callable[[str], None] | None = None) -> Outcome:
    """Run a heartbeat's prompt; a reply of HEARTBEAT_OK with no change leaves no trace."""
    result, failure = run_turn(vault, provider, hb.session, hb.message(), now, kind="heartbeat",
                               settings=settings, on_text=on_text, discard_reply=heartbeatfile.OK)
    if result is None:
        return Outcome("interrupted" if failure == "interrupted" else "error", None, failure)
    if getattr(result, "interrupted", False):
        return Outcome("interrupted", result.sha, "stopped before the reply was complete")
    if getattr(result, "error", None):
        return Outcome("error", result.sha, str(result.error))
    reply = (result.reply or "").strip()
    if result.sha is None and reply == heartbeatfile.OK:
        return Outcome("quiet", None, None, reply)
    return Outcome("ok", result.sha, None, reply)


def record_heartbeat(vault: Vault, hb: heartbeatfile.Heartbeat, now: datetime, outcome: Outcome,
                     *, advance: bool = True) -> None:
    with vault.locked():
        state = heartbeatfile.read_state(vault.state)
        e = heartbeatfile.entry(state, hb, now)
        e["last_run"] = sched.iso(now)
        e["last_status"] = outcome.status
        e["last_error"] = outcome.error
        if hb.deliver:
            record = pending_for(hb.deliver, now, outcome.status, outcome.reply)
            if record is not None:
                e["delivery"] = record
        if advance:
            e["next_run"] = sched.iso(heartbeatfile.after_run(hb, now))
        atomic.write_json(vault.state / heartbeatfile.STATE_FILE, state)


def run_heartbeat_now(vault: Vault, provider: Provider, hb: heartbeatfile.Heartbeat, now: datetime, *,
                      on_text: Callable[[str], None] | None = None) -> Outcome:
    """`agent heartbeat run`: run one heartbeat at once; it counts as its run, so serve
    runs it next one interval (or its next cron time) from now."""
    outcome = execute_heartbeat(vault, provider, hb, now, settings=load_settings(vault.root),
                                on_text=on_text)
    record_heartbeat(vault, hb, now, outcome)
    return outcome
