"""Cron jobs in serve: the part of the scheduler that runs the due ones (running one,
and recording its run, is agent/ops/runs.py).

A job runs once per due time. Just before running it, serve re-reads cron.json under
the vault lock and checks the job is still enabled and still due at that time (a
command, a chat's cron tool or a hand edit may have changed it). The job's new state
(next run, last run, status) is written to cron.json in the same commit as the turn's
transcript (through run_turn's on_save), so a run is recorded exactly when its turn is; a run cut short before its
turn was saved never happened and is due again after a restart. (Changing cron.json
outside a run is agent/ops/jobs.py.)

A job runs on one machine only: the one its `host` names (`agent.host` in the vault's
git config). Serve leaves other machines' jobs alone, and gives itself the jobs that
name no machine (one commit), so after a sync every machine agrees on whose they are.
"""

from __future__ import annotations

from datetime import datetime

from agent import schedule as sched
from agent.errors import UserError
from agent.ops import jobs
from agent.ops.runs import execute_job
from agent.serve.turns import local, log, log_outcome
from agent.fs.signature import signature
from agent.serve.watch import Watch
from agent.stores import cronfile
from agent.stores.cronfile import CRON_FILE, CronFile, CronFileError
from agent.sync.jobclaims import claim_jobs
from agent.vault.change import Change
from agent.vault.repo import Vault


class CronJobs:
    """The scheduler's cron part: cron.json as last read, and its due jobs run."""

    def __init__(self, server):
        self.server = server
        self.vault: Vault = server.vault
        self.cron: CronFile | None = None
        self.problem: str | None = None
        self.skipped: list[str] = []      # bad jobs of cron.json, reported once each
        self.elsewhere: int | None = None  # jobs of other machines, as last reported
        self.held: list[str] = []          # jobs awaiting approval, as last reported
        self.watch = Watch(lambda: signature(self.vault.root / CRON_FILE))

    def reload(self, now: datetime, *, first: bool = False, quiet: bool = False) -> None:
        """Re-read cron.json when it changed on disk."""
        if not self.watch.changed():
            return
        previous = self.cron
        try:
            cf = cronfile.read(self.vault.root)
        except CronFileError as e:
            # Reported, and the rest (heartbeats, the dream) goes on without the jobs.
            if str(e) != self.problem:
                log.error("%s; cron jobs wait until it is fixed", e)
            self.problem, self.cron = str(e), None
        else:
            if self.problem:
                log.info("cron.json is readable again")
            self.problem = None
            for p in cf.problems:
                if p not in self.skipped:
                    log.error("cron job skipped: %s", p)
            self.skipped = cf.problems
            self.cron = cf
            if not first and not quiet:
                log.info("cron.json changed: %d jobs (%d enabled)", len(cf.jobs),
                         sum(j.enabled for j in cf.jobs))
            self._claim()
            self._schedule_new(previous, now)
            held = [f"{j.label()} ({j.id})" for j in cf.jobs if j.held]
            if held and held != self.held:
                log.warning("cron: %d job%s held until you approve %s (it delivers to a chat): "
                            "%s; agent cron approve ID", len(held), "s" * (len(held) != 1),
                            "them" if len(held) != 1 else "it", ", ".join(held))
            self.held = held

    def _claim(self) -> None:
        """Jobs that name no machine become this machine's (one commit); jobs of other
        machines are left to them (said once, and again when their number changes)."""
        here = self.vault.host()
        if any(j.host is None for j in self.cron.jobs):
            try:
                claimed, sha = claim_jobs(self.vault)
            except UserError as e:
                log.error("cron: could not give the jobs without a machine to %s: %s", here, e)
                return
            if sha:
                log.info("cron: %d job%s without a machine now run%s on %s (%s)", len(claimed),
                         "s" * (len(claimed) != 1), "" if len(claimed) != 1 else "s", here,
                         sha[:7])
                self.cron = cronfile.read(self.vault.root)
                self.watch.mark()
        elsewhere = sum(1 for j in self.cron.jobs if not j.runs_on(here))
        if elsewhere != self.elsewhere and (elsewhere or self.elsewhere):
            log.info("cron: %d job%s belong%s to other machines; %s runs the rest", elsewhere,
                     "s" * (elsewhere != 1), "s" * (elsewhere == 1), here)
        self.elsewhere = elsewhere

    def _schedule_new(self, previous: CronFile | None, now: datetime) -> None:
        """Give a due time to jobs that have none (added by hand) or whose schedule was
        changed by hand, leaving their state as the edit left it otherwise."""
        before = {j.id: j for j in previous.jobs} if previous else {}
        need = []
        here = self.vault.host()
        for j in self.cron.jobs:
            old = before.get(j.id)
            if not j.enabled or not j.runs_on(here):   # another machine schedules its own
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
                names.append(f"{j.label()} (next run {local(j.state.next_run)})")
            if not names:
                return None
            return Change("cron", "schedule " + names[0] if len(names) == 1 else
                          f"schedule {len(names)} jobs edited by hand")

        try:
            done, sha = jobs.change(self.vault, fn)
        except CronFileError as e:
            log.error("%s", e)
            return
        if sha:
            log.info("%s (%s)", done.head, sha[:7])
            self.cron = cronfile.read(self.vault.root)
            self.watch.mark()

    def run(self, now: datetime) -> None:
        """Run every job due at `now`, oldest due time first."""
        if self.cron is None:
            return
        here = self.vault.host()
        due = sorted((j for j in self.cron.jobs if j.enabled and j.state.next_run is not None
                      and j.state.next_run <= now and j.runs_on(here) and not j.held),
                     key=lambda j: j.state.next_run)
        for job in due:
            if self.server.stopping:
                return
            self._run_due(job.id, job.state.next_run, self.server.clock_or(now))

    def _run_due(self, job_id: str, due: datetime, now: datetime) -> None:
        server, vault = self.server, self.vault
        with vault.locked():
            try:
                cf = cronfile.read(vault.root)
            except CronFileError as e:
                log.error("%s", e)
                return
            job = cf.get(job_id)
            if job is None or not job.enabled or job.state.next_run != due \
                    or not job.runs_on(vault.host()) or job.held:
                return          # changed by a command, a hand edit or a sync since we looked
            missed = sched.is_missed(due, server.watching_since or now)
            run, following = sched.settle(job.schedule, due, job.misfire, now, missed)
            if not run:
                job.state.next_run = following
                job.state.last_status = "skipped"
                job.state.last_error = f"missed {local(due)} while agent serve was not running"
                gone = following is None and job.delete_after_run
                if gone:
                    cf.remove(job.id)
                vault.write_text(CRON_FILE, cronfile.dumps(cf))
                nxt = "removed" if gone else f"next run {local(following)}"
                sha = vault.commit(Change("cron", f"skip {job.label()}, missed at {local(due)} "
                                                  f"({nxt})", trailers={"Job": job.id}))
                log.info("cron %s (%s): missed %s, skipped (misfire: skip); %s (%s)",
                         job.label(), job.id, local(due), nxt, (sha or "")[:7])
                return
        if server.stopping:         # a signal came while we checked: nothing was written
            return
        late = (now - due).total_seconds()
        log.info("cron %s (%s): running, due %s, started %.3fs late%s", job.label(), job.id,
                 local(due), late, " (missed while serve was not running: run once)"
                 if missed else "")
        with server.working(job.session):
            outcome = execute_job(vault, server.provider, job, now, due=due, following=following,
                                  settings=server.settings)
        server.runs += 1
        log_outcome(f"cron {job.label()} ({job.id})", outcome)
        self.reload(server.clock_or(now), quiet=True)     # our own write of cron.json
        if outcome.status == "ok" and job.deliver:
            server.outbox.deliver_job(job.id, server.clock_or(now), text=outcome.reply)

    def wake_times(self, now: datetime) -> list[datetime]:
        if self.cron is None:
            return []
        here = self.vault.host()
        return [j.state.next_run for j in self.cron.jobs
                if j.enabled and j.state.next_run is not None and j.runs_on(here)
                and not j.held]
