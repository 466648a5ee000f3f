"""Scheduled jobs (cron.json): add, edit, remove, enable, disable, approve, move and list
them. The one implementation `agent cron`, `agent serve` and the web page call; they
only render. (The model's cron tools stage the same `agent.stores.cronfile.add` in its turn.)

Every change re-reads cron.json under the vault lock, so none is lost when a command,
serve and a conversation change it at the same moment, and is written atomically and
committed with a sentence saying what changed (agent.vault.edit). A file that does not
parse is never written: the change is refused with its line and column.

    job, sha = add(vault, "water", "remind me to drink", now, every="1h")
    listing = list_jobs(vault)            # the jobs, each with its next run

Running a job now (`run_now`) is a turn with the run recorded in its commit
(agent.ops.runs, which `agent serve` runs due jobs with too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, NamedTuple

from agent import schedule as sched
from agent.stores import cronfile
from agent.stores.cronfile import CRON_FILE, CronFile, Job
from agent.vault.change import Change
from agent.vault.edit import edit as edit_file
from agent.vault.identity import check_host
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.ops.runs import Outcome
    from agent.llm import Provider
    from agent.vault.repo import Vault


class Done(NamedTuple):
    """A job as a change left it, and the commit (None: nothing needed changing)."""
    job: Job
    sha: str | None


def change(vault: Vault, fn: Callable[[CronFile], Change | None]) -> tuple[Change | None, str | None]:
    """Apply `fn` to cron.json as it is under the lock and commit; (the change, sha).

    `fn` changes the CronFile in place and returns what it did as a `Change` (the
    commit's message), or None when there is nothing to do (then nothing is written).
    """
    # Refuse a broken file before taking the lock: taking it would commit the broken
    # hand edit as the user's, though nothing else happens.
    current = cronfile.read_text(vault.root)
    if current is not None:
        cronfile.loads(current)

    def step(before: str | None) -> tuple[str | None, Change | None]:
        cf = cronfile.loads(before) if before is not None else CronFile()
        done = fn(cf)
        return (cronfile.dumps(cf) if done is not None else None), done

    return edit_file(vault, CRON_FILE, step)


def _one(vault: Vault, ref: str, fn: Callable[[Job], Change | None]) -> Done:
    """`fn` on the job `ref` names (by id, or by a name only it has)."""
    out: list[Job] = []

    def on_file(cf: CronFile) -> Change | None:
        job = cf.find(ref)
        out.append(job)
        return fn(job)

    _, sha = change(vault, on_file)
    return Done(out[0], sha)


def _from_now(job: Job, now: datetime) -> None:
    """Reckon a job's next run again from now (enabled again, approved, rescheduled):
    the times it missed meanwhile do not all come due at once."""
    due = job.state.next_run
    if due is None or due <= now:
        job.state.next_run = (sched.next_run(job.schedule, now, anchor=due)
                              if job.schedule.kind != "at" else
                              (job.schedule.at if job.schedule.at is not None
                               and job.schedule.at > now else None))


def add(vault: Vault, name: str, message: str, now: datetime, *, at: str | None = None,
        every: str | None = None, cron: str | None = None, tz: str | None = None,
        session: str | None = None, misfire: str = "run_once",
        delete_after_run: bool | None = None, deliver: str | None = None,
        host: str | None = None) -> Done:
    """Add a job (validated before the file is touched) that runs on `host` (default:
    this machine)."""
    sched.make_schedule(at=at, every=every, cron=cron, tz=tz, now=now)   # before the lock
    host = check_host(host) if host else vault.host()
    made: list[Job] = []

    def fn(cf: CronFile) -> Change | None:
        job = cronfile.add(cf, name, message, now, at=at, every=every, expr=cron, tz=tz,
                           session=session, misfire=misfire,
                           delete_after_run=delete_after_run, deliver=deliver, host=host)
        made.append(job)
        return Change("cron", f"add {job.label()} ({job.schedule.describe()})")

    _, sha = change(vault, fn)
    return Done(made[0], sha)


def edit(vault: Vault, ref: str, now: datetime, *, name: str | None = None,
         message: str | None = None, at: str | None = None, every: str | None = None,
         cron: str | None = None, tz: str | None = None) -> Done:
    """Change a job's name, message or schedule (give one of at, every or cron for a new
    schedule; its next run is reckoned from now), keeping the rest of it."""
    schedule = (sched.make_schedule(at=at, every=every, cron=cron, tz=tz, now=now)
                if (at, every, cron) != (None, None, None) else None)
    if tz is not None and schedule is None:
        raise sched.ScheduleError("--tz goes with a new schedule: give --at, --every or --cron "
                                  "too")

    out: list[Job] = []

    def fn(cf: CronFile) -> Change | None:
        job = cf.find(ref)
        out.append(job)
        what: list[str] = []
        new_name = name.strip() if name is not None else None
        if new_name is not None and new_name != job.name:
            if not new_name:
                raise sched.ScheduleError("a cron job needs a name")
            same = next((j for j in cf.jobs if j.name == new_name), None)
            if same is not None:
                raise sched.ScheduleError(f'a cron job is already named "{new_name}" '
                                          f"({same.id}); choose another name")
            what.append(f'renamed from "{job.name}"')
            job.name = new_name
        if message is not None and message != job.message:
            if not message.strip():
                raise sched.ScheduleError(f'cron job "{job.name}" needs a message: what the '
                                          f"agent is asked when it runs")
            job.message = message
            what.append("new message")
        if schedule is not None and schedule != job.schedule:
            job.schedule = schedule
            job.state.next_run = sched.first_run(schedule, now)
            what.append(schedule.describe())
        if not what:
            return None
        return Change("cron", f"edit {job.label()}: {', '.join(what)}", trailers={"Job": job.id})

    _, sha = change(vault, fn)
    return Done(out[0], sha)


def approve(vault: Vault, ref: str, now: datetime, refusal: Callable[[str], str | None]) -> Done:
    """Let a held job (one the model made) run; refused, with why, when
    `refusal(target)` says its chat is not one the person allowed. Its next run is
    reckoned from now, so times passed while it was held do not come due."""
    def fn(job: Job) -> Change | None:
        if not job.held:
            return None
        why = refusal(job.deliver) if job.deliver else None
        if why:
            raise sched.ScheduleError(f"{job.label()} ({job.id}) was not approved: {why}")
        job.approved = True
        _from_now(job, now)
        what = f" (delivers to {job.deliver})" if job.deliver else ""
        return Change("cron", f"approve {job.label()}{what}", trailers={"Job": job.id})

    return _one(vault, ref, fn)


def remove(vault: Vault, ref: str) -> Done:
    gone: list[Job] = []

    def fn(cf: CronFile) -> Change | None:
        job = cf.find(ref)
        cf.remove(job.id)
        gone.append(job)
        return Change("cron", f"remove {job.label()}")

    _, sha = change(vault, fn)
    return Done(gone[0], sha)


def set_enabled(vault: Vault, ref: str, enabled: bool, now: datetime) -> Done:
    """Enable or disable a job; an enabled job's next run is reckoned again from now, so
    the times it missed while disabled do not all come due at once."""
    def fn(job: Job) -> Change | None:
        if job.enabled == enabled:
            return None
        job.enabled = enabled
        if enabled:
            _from_now(job, now)
        return Change("cron", f"{'enable' if enabled else 'disable'} {job.label()}")

    return _one(vault, ref, fn)


def enable(vault: Vault, ref: str, now: datetime) -> Done:
    return set_enabled(vault, ref, True, now)


def disable(vault: Vault, ref: str, now: datetime) -> Done:
    return set_enabled(vault, ref, False, now)


def move(vault: Vault, ref: str, host: str) -> Done:
    """Give a job to the machine named `host`: from the next sync on, only it runs it."""
    host = check_host(host)

    def fn(job: Job) -> Change | None:
        if job.host == host:
            return None
        was = job.host
        job.host = host
        return Change("cron", f"move {job.label()} to {host}" + (f" (from {was})" if was else ""),
                      trailers={"Job": job.id})

    return _one(vault, ref, fn)


def find(vault: Vault, ref: str) -> Job:
    """The job `ref` names (its id, or a name only it has); ScheduleError naming the
    jobs there are otherwise."""
    return cronfile.read(vault.root).find(ref)


def run_now(vault: Vault, provider: Provider, ref: str, now: datetime, *,
            on_text: Callable[[str], None] | None = None) -> Outcome:
    """Run the job `ref` names at once, in the foreground (its schedule is unchanged);
    the run's agent.ops.runs.Outcome (status ok, error or interrupted; the commit)."""
    from agent.ops import runs

    with vault.locked():
        job = cronfile.read(vault.root).find(ref)
    return runs.run_job_now(vault, provider, job.id, now, on_text=on_text)


@dataclass
class Listed:
    """One job as `list_jobs` shows it: `next` is its next run, or why there is none."""
    job: Job
    next: datetime | None
    why_not: str | None          # "disabled", "held" (awaiting approval), or None
    host: str                    # the machine that runs it ("<here> (to be claimed)")


@dataclass
class Listing:
    jobs: list[Listed] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # jobs of the file that were skipped
    here: str = ""


def list_jobs(vault: Vault) -> Listing:
    """The jobs of cron.json with their next run; CronFileError (its line and column)
    when the file does not parse."""
    cf = cronfile.read(vault.root)
    here = vault.host()
    out = Listing(problems=list(cf.problems), here=here)
    for j in cf.jobs:
        why = "held" if j.held else (None if j.enabled else "disabled")
        out.jobs.append(Listed(j, None if why else j.state.next_run, why,
                               j.host or f"{here} (to be claimed)"))
    return out
