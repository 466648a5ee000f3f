"""`agent serve`: one long process per vault that runs due cron jobs and heartbeats, the
nightly dream and the compaction of idle sessions, until SIGINT or SIGTERM.

How it keeps the vault right:

- One serve per vault: an flock on `.agent/serve.lock` (holding the pid). The kernel
  drops it when the process dies, so a killed serve never leaves a stale lock.
- A job runs once per due time. Just before running it, serve re-reads cron.json under
  the vault lock and checks the job is still enabled and still due at that time (a
  command, a chat's cron tool or a hand edit may have changed it). The job's new state
  (next run, last run, status) is written to cron.json in the same commit as the turn's
  transcript, so a run is recorded exactly when its turn is; a run cut short before
  its turn was saved never happened and is due again after a restart.
- Every write of cron.json re-reads it under the vault lock, so state written by serve
  and by a `cron` command or a chat at the same moment is never lost.
- Time comes from a clock function and the work of one pass is `Server.step(now)`, so
  tests drive it; the loop sleeps until the next due time (at most `tick` seconds) and
  notices hand edits of cron.json, heartbeat/ and agent.toml by their mtimes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from agent.chat import subagents
from agent.stores import heartbeat as hbmod
from agent import schedule as sched
from agent.stores import cron as cronfile
from agent.errors import UserError
from agent.llm import Provider, ProviderError, make_provider
from agent.stores.cron import CRON_FILE, CronFile, CronFileError, Job
from agent.vault import atomic
from agent.vault.change import Change
from agent.vault.repo import Vault

LOCK_FILE = "serve.lock"
LOG_FILE = "serve.log"
STATE_FILE = "serve-state.json"
STOP_GRACE = 30            # seconds a running turn may take to finish after SIGTERM
DREAM_POLL = timedelta(seconds=60)
COMPACT_SCAN = timedelta(minutes=5)
# A pass that starts this much later than the previous one ended (beyond the tick) means
# the machine slept: due times inside the gap were missed, as if serve had been stopped.
SUSPEND_GAP = timedelta(seconds=90)

log = logging.getLogger("agent.serve.server")


class ServeRunning(UserError):
    """Another `agent serve` holds this vault."""


@dataclass
class Outcome:
    status: str                 # ok | quiet | error | interrupted | skipped
    sha: str | None = None
    error: str | None = None
    reply: str = ""


# ---- the serve lock ---------------------------------------------------------------------


class ServeLock:
    """`.agent/serve.lock`: an flock held for the life of the process, with its pid."""

    def __init__(self, vault: Vault):
        self.path = vault.state / LOCK_FILE
        self.root = vault.root
        self.fd: int | None = None
        self.previous: int | None = None      # the pid of a dead serve whose lock we took

    def acquire(self) -> "ServeLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            who = f"pid {pid}" if pid else "another process"
            raise ServeRunning(f"agent serve is already running on {self.root} ({who}); "
                               f"stop it first{f' (kill {pid})' if pid else ''}") from None
        self.previous = _read_pid(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (ValueError, OSError):
        return None


# ---- running one job or heartbeat -----------------------------------------------------------


def job_text(job: Job, due: datetime | None, now: datetime) -> str:
    """What the model is told when a job runs: its message, then which job is running
    (after it, so the commit subject made from the text starts with the message)."""
    when = (due or now).astimezone(sched.zone(job.schedule.tz))
    how = f"due {when:%a %Y-%m-%d %H:%M %Z}" if due else "run by hand"
    return (f"{job.message}\n\n(Scheduled job \"{job.name}\", {job.schedule.describe()}, "
            f"{how}: this message was scheduled earlier and is running now; do what it asks.)")


def _recorder(job_id: str, now: datetime, due: datetime | None, following: datetime | None,
              problems: list[str]):
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
        if due is not None and job.state.next_run == due:
            job.state.next_run = following    # else someone rescheduled it meanwhile
        job.state.last_run = now
        job.state.last_status = status
        job.state.last_error = error
        if (status == "ok" and due is not None and job.delete_after_run
                and job.state.next_run is None):
            cf.remove(job_id)
        after = cronfile.dumps(cf)
        if after == before:
            return []
        vault.write_text(CRON_FILE, after)
        return [CRON_FILE]
    return record


def _turn(vault: Vault, provider: Provider, session: str, text: str, now: datetime, *, kind: str,
          settings=None, on_text=None, discard_reply=None, on_save=None):
    """run_turn, with failures as (None, message): a failed run is recorded, never fatal."""
    from agent.chat.turn import run_turn

    try:
        return run_turn(vault, provider, session, text, now, settings=settings, kind=kind,
                        on_text=on_text, discard_reply=discard_reply, on_save=on_save), None
    except UserError as e:
        return None, str(e) or type(e).__name__
    except ProviderError as e:           # the loop records API errors itself; this is a
        return None, f"{type(e).__name__}: {e}"   # failure outside its model calls
    except KeyboardInterrupt:
        return None, "interrupted"


def execute_job(vault: Vault, provider: Provider, job: Job, now: datetime, *, due: datetime | None,
                following: datetime | None, settings=None, on_text=None) -> Outcome:
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

    result, failure = _turn(vault, provider, job.session, job_text(job, due, now), now,
                            kind="cron", settings=settings, on_text=on_text, on_save=on_save)
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
                reason = f": {_short(error)}" if error else ""
                sha = vault.commit(Change("cron", f"{job.label()} {what}{reason}",
                                          trailers={"Job": job.id})) or sha
    for p in problems:
        log.warning("cron %s (%s): %s", job.label(), job.id, p)
    return Outcome(status, sha, error, getattr(result, "reply", "") or "")


def run_job_now(vault: Vault, provider: Provider, job_id: str, now: datetime, *, on_text=None) -> Outcome:
    """`agent cron run`: run a job at once; its next run stays as it was."""
    from agent.config import load_settings

    with vault.locked():
        job = cronfile.read(vault.root).find(job_id)
    return execute_job(vault, provider, job, now, due=None, following=None,
                       settings=load_settings(vault.root), on_text=on_text)


def execute_heartbeat(vault: Vault, provider: Provider, hb: hbmod.Heartbeat, now: datetime, *,
                      settings=None, on_text=None) -> Outcome:
    """Run a heartbeat's prompt; a reply of HEARTBEAT_OK with no change leaves no trace."""
    result, failure = _turn(vault, provider, hb.session, hb.message(), now, kind="heartbeat",
                            settings=settings, on_text=on_text, discard_reply=hbmod.OK)
    if result is None:
        return Outcome("interrupted" if failure == "interrupted" else "error", None, failure)
    if getattr(result, "interrupted", False):
        return Outcome("interrupted", result.sha, "stopped before the reply was complete")
    if getattr(result, "error", None):
        return Outcome("error", result.sha, str(result.error))
    reply = (result.reply or "").strip()
    if result.sha is None and reply == hbmod.OK:
        return Outcome("quiet", None, None, reply)
    return Outcome("ok", result.sha, None, reply)


def record_heartbeat(vault: Vault, hb: hbmod.Heartbeat, now: datetime, outcome: Outcome,
                     *, advance: bool = True) -> None:
    with vault.locked():
        state = hbmod.read_state(vault.state)
        e = hbmod.entry(state, hb, now)
        e["last_run"] = sched.iso(now)
        e["last_status"] = outcome.status
        e["last_error"] = outcome.error
        if advance:
            e["next_run"] = sched.iso(hbmod.after_run(hb, now))
        atomic.write_json(vault.state / hbmod.STATE_FILE, state)


def run_heartbeat_now(vault: Vault, provider: Provider, hb: hbmod.Heartbeat, now: datetime, *,
                      on_text=None) -> Outcome:
    """`agent heartbeat run`: run one heartbeat at once; it counts as its run, so serve
    runs it next one interval (or its next cron time) from now."""
    from agent.config import load_settings

    outcome = execute_heartbeat(vault, provider, hb, now, settings=load_settings(vault.root),
                                on_text=on_text)
    record_heartbeat(vault, hb, now, outcome)
    return outcome


def _short(text: str | None, n: int = 72) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."


# ---- the server ----------------------------------------------------------------------------


def _stat(path: Path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class Server:
    """The scheduler: `step(now)` does the work due at `now`; `run()` loops until stopped."""

    def __init__(self, vault: Vault, provider: Provider, *, clock: Callable[[], datetime],
                 tick: float = 5.0, settings=None):
        from agent.config import load_settings

        self.vault = vault
        self.provider = provider
        self.clock = clock
        self.tick = tick
        self.settings = settings or load_settings(vault.root)
        self.watching_since: datetime | None = None
        self.cron: CronFile | None = None
        self._cron_sig = object()
        self._cron_problem: str | None = None
        self.beats: list[hbmod.Heartbeat] = []
        self._hb_sig: tuple | None = None
        self._hb_problems: list[str] = []
        self._toml_sig = _stat(vault.root / "agent.toml")
        self.stopping = False
        self.busy = False
        self.interrupting = False
        self.wake = threading.Event()
        self._state = self._read_state()
        self._dream_poll_at: datetime | None = None
        self._dream_inflight: bool | None = None
        self._dream_cached: tuple[str, sched.Schedule] | None = None
        self._compact_at: datetime | None = None
        self._compact_tried: dict[str, str] = {}
        self.runs = 0

    # -- derived state of serve itself (.agent/serve-state.json) --

    def _read_state(self) -> dict:
        data = atomic.read_json(self.vault.state / STATE_FILE, {})
        return data if isinstance(data, dict) else {}

    def _write_state(self) -> None:
        atomic.write_json(self.vault.state / STATE_FILE, self._state)

    # -- noticing edits --

    def reload(self, now: datetime, *, first: bool = False, quiet: bool = False) -> None:
        """Re-read cron.json, heartbeat/ and agent.toml when they changed on disk."""
        sig = _stat(self.vault.root / CRON_FILE)
        if sig != self._cron_sig:
            self._cron_sig = sig
            previous = self.cron
            try:
                cf = cronfile.read(self.vault.root)
            except CronFileError as e:
                if first:
                    raise
                if str(e) != self._cron_problem:
                    log.error("%s; cron jobs wait until it is fixed", e)
                self._cron_problem, self.cron = str(e), None
            else:
                if self._cron_problem:
                    log.info("cron.json is readable again")
                self._cron_problem = None
                self.cron = cf
                if not first and not quiet:
                    log.info("cron.json changed: %d jobs (%d enabled)", len(cf.jobs),
                             sum(j.enabled for j in cf.jobs))
                self._schedule_new(previous, now)
        hsig = hbmod.fingerprint(self.vault.root)
        if hsig != self._hb_sig:
            self._hb_sig = hsig
            beats, problems = hbmod.load_all(self.vault.root)
            for p in problems:
                if p not in self._hb_problems:
                    log.error("heartbeat skipped: %s", p)
            self._hb_problems = problems
            def shown(bs):
                return [f"{b.name} ({b.describe()}{'' if b.enabled else ', disabled'})" for b in bs]
            if not first and shown(beats) != shown(self.beats):
                log.info("heartbeat/ changed: %s", ", ".join(shown(beats)) or "none")
            self.beats = beats
        tsig = _stat(self.vault.root / "agent.toml")
        if tsig != self._toml_sig:
            self._toml_sig = tsig
            from agent.config import SettingsError, load_settings
            try:
                self.settings = load_settings(self.vault.root)
            except SettingsError as e:
                log.error("%s; keeping the settings read before", e)
            else:
                log.info("agent.toml changed: settings reloaded")
                self._state.pop("dream_next", None)

    def _schedule_new(self, previous: CronFile | None, now: datetime) -> None:
        """Give a due time to jobs that have none (added by hand) or whose schedule was
        changed by hand, leaving their state as the edit left it otherwise."""
        before = {j.id: j for j in previous.jobs} if previous else {}
        need = []
        for j in self.cron.jobs:
            old = before.get(j.id)
            if not j.enabled:
                continue
            if j.state.next_run is None and j.state.last_run is None and \
                    j.state.last_status is None:          # never scheduled: added by hand
                need.append(j.id)
            elif old is not None and old.schedule != j.schedule and \
                    old.state.next_run == j.state.next_run:
                need.append(j.id)
        if not need:
            return
        names = []

        def fn(cf: CronFile):
            for job_id in need:
                j = cf.get(job_id)
                if j is None:
                    continue
                j.state.next_run = sched.first_run(j.schedule, now)
                names.append(f"{j.label()} (next run {_local(j.state.next_run)})")
            if not names:
                return None
            return Change("cron", "schedule " + names[0] if len(names) == 1 else
                          f"schedule {len(names)} jobs edited by hand")

        from agent.serve import jobs
        try:
            done, sha = jobs.change(self.vault, fn)
        except CronFileError as e:
            log.error("%s", e)
            return
        if sha:
            log.info("%s (%s)", done.head, sha[:7])
            self.cron = cronfile.read(self.vault.root)
            self._cron_sig = _stat(self.vault.root / CRON_FILE)

    # -- one pass --

    def step(self, now: datetime | None = None) -> datetime | None:
        """Do the work due now; returns when there is next something to do (or None)."""
        now = now or self.clock()
        if self.watching_since is None:
            self.watching_since = now
        self.reload(now)
        self._run_cron(now)
        if not self.stopping:
            self._run_heartbeats(self.clock_or(now))
        if not self.stopping:
            self._dream(now)
        if not self.stopping:
            self._compact(now)
        return self._next_wake(now)

    def clock_or(self, fallback: datetime) -> datetime:
        """The clock, never earlier than `fallback` (tests pass fixed times to step)."""
        t = self.clock()
        return t if t > fallback else fallback

    def _run_cron(self, now: datetime) -> None:
        if self.cron is None:
            return
        due = sorted((j for j in self.cron.jobs if j.enabled and j.state.next_run is not None
                      and j.state.next_run <= now), key=lambda j: j.state.next_run)
        for job in due:
            if self.stopping:
                return
            self._run_due(job.id, job.state.next_run, self.clock_or(now))

    def _run_due(self, job_id: str, due: datetime, now: datetime) -> None:
        vault = self.vault
        with vault.locked():
            try:
                cf = cronfile.read(vault.root)
            except CronFileError as e:
                log.error("%s", e)
                return
            job = cf.get(job_id)
            if job is None or not job.enabled or job.state.next_run != due:
                return          # changed by a command or a hand edit since we looked
            missed = sched.is_missed(due, self.watching_since or now)
            run, following = sched.settle(job.schedule, due, job.misfire, now, missed)
            if not run:
                job.state.next_run = following
                job.state.last_status = "skipped"
                job.state.last_error = f"missed {_local(due)} while agent serve was not running"
                gone = following is None and job.delete_after_run
                if gone:
                    cf.remove(job.id)
                vault.write_text(CRON_FILE, cronfile.dumps(cf))
                nxt = "removed" if gone else f"next run {_local(following)}"
                sha = vault.commit(Change("cron", f"skip {job.label()}, missed at {_local(due)} "
                                                  f"({nxt})", trailers={"Job": job.id}))
                log.info("cron %s (%s): missed %s, skipped (misfire: skip); %s (%s)",
                         job.label(), job.id, _local(due), nxt, (sha or "")[:7])
                return
        if self.stopping:           # a signal came while we checked: nothing was written
            return
        late = (now - due).total_seconds()
        log.info("cron %s (%s): running, due %s, started %.3fs late%s", job.label(), job.id,
                 _local(due), late, " (missed while serve was not running: run once)"
                 if missed else "")
        self.busy = True
        try:
            outcome = execute_job(vault, self.provider, job, now, due=due, following=following,
                                  settings=self.settings)
        finally:
            self.busy = False
        self.runs += 1
        self._log_outcome(f"cron {job.label()} ({job.id})", outcome)
        self.reload(self.clock_or(now), quiet=True)     # our own write of cron.json

    def _run_heartbeats(self, now: datetime) -> None:
        if not self.beats:
            return
        # Only serve and `agent heartbeat run` write this derived state, and only after
        # a run (under the vault lock); a pass that finds nothing due takes no lock.
        state = hbmod.read_state(self.vault.state)
        before = json.dumps(state, sort_keys=True)
        due = []
        for hb in self.beats:
            if not hb.enabled:
                continue
            e = hbmod.entry(state, hb, now)
            if hbmod.is_due(hb, hbmod.due_time(e), now):
                due.append(hb)
        if json.dumps(state, sort_keys=True) != before:
            with self.vault.locked():
                atomic.write_json(self.vault.state / hbmod.STATE_FILE, state)
        self._hb_state = state
        for hb in due:
            if self.stopping:
                return
            t = self.clock_or(now)
            log.info("heartbeat %s: running", hb.name)
            self.busy = True
            try:
                outcome = execute_heartbeat(self.vault, self.provider, hb, t, settings=self.settings)
            finally:
                self.busy = False
            self.runs += 1
            record_heartbeat(self.vault, hb, t, outcome)
            self._log_outcome(f"heartbeat {hb.name}", outcome)

    def _log_outcome(self, what: str, outcome: Outcome) -> None:
        if outcome.status == "quiet":
            log.info("%s: %s, nothing to do (no trace left)", what, hbmod.OK)
        elif outcome.status == "ok":
            log.info("%s: ok (%s)", what, (outcome.sha or "no change")[:7])
        else:
            log.error("%s: %s: %s", what, outcome.status, outcome.error)

    # -- the dream --

    def _dream_schedule(self) -> sched.Schedule | None:
        expr = self.settings.dream_schedule
        if self._dream_cached and self._dream_cached[0] == expr:
            return self._dream_cached[1]
        try:
            schedule = sched.Schedule("cron", expr=sched.check_cron(expr))
            self._dream_cached = (expr, schedule)
            return schedule
        except sched.ScheduleError as e:
            if self._state.get("dream_problem") != str(e):
                log.error("agent.toml [dream] schedule: %s; no dream until it is fixed", e)
                self._state["dream_problem"] = str(e)
            return None

    def _dream(self, now: datetime) -> None:
        schedule = self._dream_schedule()
        if schedule is None:
            return
        self._state.pop("dream_problem", None)
        nxt = hbmod.due_time({"next_run": self._state.get("dream_next")})
        if nxt is None:
            nxt = sched.next_run(schedule, now)
            self._state["dream_next"] = sched.iso(nxt)
            self._write_state()
        inflight_check = self._dream_inflight is None or (
            self._dream_inflight and (self._dream_poll_at is None or now >= self._dream_poll_at))
        if not inflight_check and now < nxt:
            return
        from agent.dream import dream_status, run_dream

        status = dream_status(self.vault)
        inflight = bool(status.get("in_flight") or status.get("inflight")
                        or status.get("in-flight"))
        self._dream_inflight = inflight
        waiting = int(status.get("waiting") or 0)
        due = now >= nxt
        if due:
            self._state["dream_next"] = sched.iso(sched.next_run(schedule, now))
            self._write_state()
        if not inflight and not (due and waiting):
            if due:
                log.info("dream: nothing new in the archive; next %s",
                         _local(hbmod.due_time({"next_run": self._state["dream_next"]})))
            return
        log.info("dream: %s", "checking the batch in flight" if inflight
                 else f"{waiting} archive entries wait; submitting")
        self.busy = True
        try:
            outcome = run_dream(self.vault, self.provider, now, wait=False)
        except (UserError, ProviderError) as e:
            log.error("dream: %s", e)
            outcome = None
        finally:
            self.busy = False
        if outcome is not None:
            log.info("dream: %s", _describe(outcome))
        after = dream_status(self.vault)
        self._dream_inflight = bool(after.get("in_flight") or after.get("inflight")
                                    or after.get("in-flight"))
        self._dream_poll_at = now + DREAM_POLL

    # -- compaction of idle sessions --

    def _compact(self, now: datetime) -> None:
        if self._compact_at is not None and now < self._compact_at:
            return
        self._compact_at = now + COMPACT_SCAN
        if self.settings.idle_compact_minutes <= 0:       # 0 turns idle compaction off
            return
        idle = timedelta(minutes=self.settings.idle_compact_minutes)
        from agent.stores import sessions

        for key in sessions.list_sessions(self.vault.root):
            if self.stopping:
                return
            last = sessions.Session(self.vault.root, key).last_line()
            if not last or last.get("type") == "compact" or "ts" not in last:
                continue
            try:
                ts = sessions.parse_ts(last["ts"], key)
            except sessions.SessionError:
                continue
            marker = str(last.get("id"))
            if now - ts < idle or self._compact_tried.get(key) == marker:
                continue
            self._compact_tried[key] = marker
            from agent.chat.compact import compact_session
            self.busy = True
            try:
                archived = compact_session(self.vault, self.provider, key, now, force=True,
                                           settings=self.settings)
            except (UserError, ProviderError) as e:
                log.error("compact %s: %s", key, e)
                continue
            finally:
                self.busy = False
            if archived is not None:
                log.info("compact %s: idle since %s, archived as entry %s", key, _local(ts),
                         archived)

    # -- sleeping --

    def _next_wake(self, now: datetime) -> datetime | None:
        times = []
        if self.cron is not None:
            times += [j.state.next_run for j in self.cron.jobs
                      if j.enabled and j.state.next_run is not None]
        state = getattr(self, "_hb_state", {})
        for hb in self.beats:
            if hb.enabled and isinstance(state.get(hb.name), dict):
                due = hbmod.due_time(state[hb.name])
                if due is not None:
                    times.append(max(due, hbmod.next_active(hb, max(due, now))))
        dn = hbmod.due_time({"next_run": self._state.get("dream_next")})
        if dn:
            times.append(dn)
        if self._dream_inflight and self._dream_poll_at:
            times.append(self._dream_poll_at)
        if self._compact_at:
            times.append(self._compact_at)
        future = [t for t in times if t > now]
        return min(future) if future else None

    def run(self, *, once: bool = False) -> int:
        """Loop until stopped (or one pass with `once`); the exit status."""
        last_end: datetime | None = None
        while not self.stopping:
            now = self.clock()
            # Wall-clock time, not monotonic: the monotonic clock stands still while the
            # machine sleeps, and sleeping is exactly the gap to notice.
            if last_end is not None and now - last_end > timedelta(seconds=self.tick) + SUSPEND_GAP:
                log.info("woke after %.0fs asleep: work due meanwhile follows its misfire policy",
                         (now - last_end).total_seconds())
                self.watching_since = now
            wake = self.step(now)
            if once:
                break
            last_end = self.clock()
            delay = self.tick
            if wake is not None:
                delay = min(delay, max(0.0, (wake - self.clock()).total_seconds()))
            self.wake.wait(delay)
            self.wake.clear()
        return 0

    # -- signals --

    def on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        running = subagents.running_here()
        if running:
            # Sub-agents stop at once and save what they did (the turn that started one
            # then gets its answer at once).
            log.info("%s: stopping %d sub-agent%s", name, len(running), "s" * (len(running) != 1))
            subagents.cancel_all()
        if self.stopping and self.busy:
            log.info("%s again: interrupting the running turn", name)
            self._interrupt()
            return
        self.stopping = True
        self.wake.set()
        if self.busy:
            log.info("%s: stopping after the running turn (at most %ds; send it again to "
                     "interrupt it now)", name, STOP_GRACE)
            signal.signal(signal.SIGALRM, self._on_grace_over)
            signal.alarm(STOP_GRACE)
        else:
            log.info("%s: stopping", name)

    def _on_grace_over(self, signum, frame) -> None:
        if self.busy:
            log.info("the running turn took over %ds: interrupting it", STOP_GRACE)
            self._interrupt()

    def _interrupt(self) -> None:
        """Interrupt the running turn as Ctrl-C would: the loop saves what it has, marked
        interrupted. While the turn is being written (the loop then holds SIGINT) the
        write is let finish instead; it takes milliseconds."""
        if signal.getsignal(signal.SIGINT) != self.on_signal:
            signal.signal(signal.SIGALRM, self._on_grace_over)
            signal.alarm(1)
            return
        self.interrupting = True
        raise KeyboardInterrupt


def _describe(outcome) -> str:
    for attr in ("message", "kind"):
        value = getattr(outcome, attr, None)
        if value:
            return str(value)
    return str(outcome)


def _local(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M") if t else "-"


# ---- the command ------------------------------------------------------------------------------


def _setup_logging(vault: Vault) -> list[logging.Handler]:
    vault.state.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")
    from logging.handlers import RotatingFileHandler

    # The log is transient: kept to a few megabytes (serve.log, serve.log.1, serve.log.2).
    handlers: list[logging.Handler] = [
        logging.StreamHandler(sys.stdout),
        RotatingFileHandler(vault.state / LOG_FILE, maxBytes=2_000_000, backupCount=2,
                            encoding="utf-8")]
    for h in handlers:
        h.setFormatter(fmt)
        log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    return handlers


def main(vault: Vault, *, tick: float = 5.0, once: bool = False,
         clock: Callable[[], datetime] | None = None) -> int:
    """`agent serve`: hold the serve lock, then run the loop until SIGINT/SIGTERM."""
    from agent.vault.repo import now as vault_now

    lock = ServeLock(vault).acquire()
    handlers = _setup_logging(vault)
    try:
        clock = clock or vault_now
        server = Server(vault, make_provider(eager=True), clock=clock, tick=tick)
        start = clock()
        server.watching_since = start
        server.reload(start, first=True)     # a corrupt cron.json refuses here
        if lock.previous and lock.previous != os.getpid():
            log.info("took over the serve lock of pid %d, which is no longer running",
                     lock.previous)
        from agent.sandbox import startup_note
        note = startup_note(server.settings)      # before "agent serve on": tests wait for it
        if note:
            log.warning("%s", note)
        jobs_n = len(server.cron.jobs) if server.cron else 0
        log.info("agent serve on %s (pid %d): %d cron jobs, %d heartbeats (%d enabled), "
                 "dream at %r, tick %gs", vault.root, os.getpid(), jobs_n, len(server.beats),
                 sum(b.enabled for b in server.beats), server.settings.dream_schedule, tick)
        previous = {s: signal.signal(s, server.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            code = server.run(once=once)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            signal.alarm(0)
        subagents.cancel_all()
        subagents.settle([r.id for r in subagents.running_here()])
        log.info("agent serve stopped (%d runs)", server.runs)
        return code
    finally:
        for h in handlers:
            log.removeHandler(h)
            h.close()
        lock.release()
