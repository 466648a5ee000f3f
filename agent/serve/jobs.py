"""cron.json in a vault: every change read, made and written under the vault lock.

`agent cron`, `agent serve` and the model's cron tools all change the same file, maybe
at the same moment; each change re-reads the file under the lock, so none is lost, and
is written atomically (`vault.write_text`) and committed with a sentence saying what
changed. A file that does not parse is never written: the change is refused with its
line and column.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from agent import schedule as sched
from agent.stores import cron as cronfile
from agent.stores.cron import CRON_FILE, CronFile, Job
from agent.vault.change import Change
from agent.vault.repo import check_host


def text_of(root) -> str | None:
    return cronfile.read_text(root)


def change(vault, fn: Callable[[CronFile], Change | None]) -> tuple[Change | None, str | None]:
    """Apply `fn` to cron.json as it is under the lock and commit; (the change, sha).

    `fn` changes the CronFile in place and returns what it did as a `Change` (the
    commit's message), or None when there is nothing to do (then nothing is written).
    """
    # Refuse a broken file before taking the lock: taking it would commit the broken
    # hand edit as the user's, though nothing else happens.
    current = text_of(vault.root)
    if current is not None:
        cronfile.loads(current)
    with vault.locked():
        before = text_of(vault.root)
        cron = cronfile.loads(before) if before is not None else CronFile()
        done = fn(cron)
        if done is None:
            return None, None
        after = cronfile.dumps(cron)
        if after == before:
            return done, None
        vault.write_text(CRON_FILE, after)
        return done, vault.commit(done)


def add(vault, name: str, message: str, now: datetime, *, at=None, every=None, cron=None,
        tz=None, session=None, misfire="run_once", delete_after_run=None,
        deliver=None, host: str | None = None) -> tuple[Job, str | None]:
    """Add a job (validated before the file is touched) that runs on `host` (default:
    this machine); the job and the commit's sha."""
    schedule = sched.make_schedule(at=at, every=every, cron=cron, tz=tz, now=now)
    host = check_host(host) if host else vault.host()
    made: list[Job] = []

    def fn(cf: CronFile):
        job = cronfile.new_job(cf, name, message, schedule, now, session=session,
                            misfire=misfire, delete_after_run=delete_after_run, deliver=deliver,
                            host=host)
        cf.jobs.append(job)
        made.append(job)
        return Change("cron", f"add {job.label()} ({job.schedule.describe()})")

    _, sha = change(vault, fn)
    return made[0], sha


def approve(vault, ref: str, now: datetime, refusal: Callable[[str], str | None]
            ) -> tuple[Job, str | None]:
    """Let a held job (one the model made with a delivery target) run; refused, with
    why, when `refusal(target)` says its chat is not one the person allowed. Its next
    run is reckoned from now, so times passed while it was held do not come due."""
    out: list[Job] = []

    def fn(cf: CronFile):
        job = cf.find(ref)
        out.append(job)
        if not job.held:
            return None
        why = refusal(job.deliver)
        if why:
            raise sched.ScheduleError(f"{job.label()} ({job.id}) was not approved: {why}")
        job.approved = True
        due = job.state.next_run
        if due is None or due <= now:
            job.state.next_run = (sched.next_run(job.schedule, now, anchor=due)
                                  if job.schedule.kind != "at" else
                                  (job.schedule.at if job.schedule.at > now else None))
        return Change("cron", f"approve {job.label()} (delivers to {job.deliver})",
                      trailers={"Job": job.id})

    _, sha = change(vault, fn)
    return out[0], sha


def remove(vault, ref: str) -> tuple[Job, str | None]:
    gone: list[Job] = []

    def fn(cf: CronFile):
        job = cf.find(ref)
        cf.remove(job.id)
        gone.append(job)
        return Change("cron", f"remove {job.label()}")

    _, sha = change(vault, fn)
    return gone[0], sha


def set_enabled(vault, ref: str, enabled: bool, now: datetime) -> tuple[Job, str | None]:
    """Enable or disable a job; an enabled job's next run is reckoned again from now, so
    the times it missed while disabled do not all come due at once."""
    out: list[Job] = []

    def fn(cf: CronFile):
        job = cf.find(ref)
        out.append(job)
        if job.enabled == enabled:
            return None
        job.enabled = enabled
        if enabled:
            due = job.state.next_run
            if due is None or due <= now:
                job.state.next_run = (sched.next_run(job.schedule, now, anchor=due)
                                      if job.schedule.kind != "at" else
                                      (job.schedule.at if job.schedule.at > now else None))
        return Change("cron", f"{'enable' if enabled else 'disable'} {job.label()}")

    _, sha = change(vault, fn)
    return out[0], sha


def move(vault, ref: str, host: str) -> tuple[Job, str | None]:
    """Give a job to the machine named `host`: from the next sync on, only it runs it."""
    host = check_host(host)
    out: list[Job] = []

    def fn(cf: CronFile):
        job = cf.find(ref)
        out.append(job)
        if job.host == host:
            return None
        was = job.host
        job.host = host
        return Change("cron", f"move {job.label()} to {host}" + (f" (from {was})" if was else ""),
                      trailers={"Job": job.id})

    _, sha = change(vault, fn)
    return out[0], sha

