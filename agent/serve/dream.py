"""The dream in serve: started at the times `[dream] schedule` in agent.toml names, when
archive entries wait, and its batch in flight checked every minute until it is done.

When it is next due lives in `.agent/serve-state.json` (derived, git-ignored).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from agent import schedule as sched
from agent.errors import UserError
from agent.llm import ProviderError
from agent.serve.turns import local, log
from agent.stores import heartbeatfile
from agent.fs import atomic

STATE_FILE = "serve-state.json"
DREAM_POLL = timedelta(seconds=60)


class Dream:
    """The scheduler's dream part."""

    def __init__(self, server):
        self.server = server
        self.vault = server.vault
        data = atomic.read_json(self.vault.state / STATE_FILE, {})
        self.state: dict = data if isinstance(data, dict) else {}
        self.poll_at: datetime | None = None
        self.inflight: bool | None = None
        self._cached: tuple[str, sched.Schedule] | None = None

    def _write_state(self) -> None:
        atomic.write_json(self.vault.state / STATE_FILE, self.state)

    def settings_changed(self) -> None:
        """agent.toml was edited: reckon the next dream from the (maybe new) schedule."""
        self.state.pop("dream_next", None)

    def _schedule(self) -> sched.Schedule | None:
        expr = self.server.settings.dream_schedule
        if self._cached and self._cached[0] == expr:
            return self._cached[1]
        try:
            schedule = sched.Schedule("cron", expr=sched.check_cron(expr))
            self._cached = (expr, schedule)
            return schedule
        except sched.ScheduleError as e:
            if self.state.get("dream_problem") != str(e):
                log.error("agent.toml [dream] schedule: %s; no dream until it is fixed", e)
                self.state["dream_problem"] = str(e)
            return None

    def run(self, now: datetime) -> None:
        from agent.dream import dream_status, run_dream

        schedule = self._schedule()
        if schedule is None:
            return
        self.state.pop("dream_problem", None)
        if self.state.get("dream_schedule") != self.server.settings.dream_schedule:
            # agent.toml's schedule wins over a next time saved under another one (it may
            # have been edited while serve was stopped).
            self.state.pop("dream_next", None)
            self.state["dream_schedule"] = self.server.settings.dream_schedule
        nxt = heartbeatfile.due_time({"next_run": self.state.get("dream_next")})
        if nxt is None:
            nxt = sched.next_run(schedule, now)
            self.state["dream_next"] = sched.iso(nxt)
            self._write_state()
        inflight_check = self.inflight is None or (
            self.inflight and (self.poll_at is None or now >= self.poll_at))
        # (a schedule that never fires again, such as an `at` past its time: not due)
        if not inflight_check and (nxt is None or now < nxt):
            return
        status = dream_status(self.vault)
        inflight = bool(status.get("in_flight") or status.get("inflight")
                        or status.get("in-flight"))
        self.inflight = inflight
        entries, clashes = int(status.get("waiting") or 0), int(status.get("conflicts") or 0)
        waiting = entries + clashes
        due = nxt is not None and now >= nxt
        if due:
            self.state["dream_next"] = sched.iso(sched.next_run(schedule, now))
            self._write_state()
        if not inflight and not (due and waiting):
            if due:
                log.info("dream: nothing new in the archive; next %s",
                         local(heartbeatfile.due_time({"next_run": self.state["dream_next"]})))
            return
        log.info("dream: %s", "checking the batch in flight" if inflight
                 else f"{entries} archive entries" + (f" and {clashes} sync conflicts"
                                                       if clashes else "") + " wait; submitting")
        try:
            with self.server.working():
                outcome = run_dream(self.vault, self.server.provider, now, wait=False)
        except (UserError, ProviderError) as e:
            log.error("dream: %s", e)
            outcome = None
        if outcome is not None:
            log.info("dream: %s", _describe(outcome))
            health = None
            if getattr(outcome, "kind", None) in ("committed", "no_changes"):
                self.server.sync.soon(now)      # the other machines get it at once
                health = self._health(now)
                if health:
                    log.info("dream: %s", health)
            if outcome.branch and outcome.report is not None:
                self._tell_review(outcome.report.proposed, health)
        after = dream_status(self.vault)
        self.inflight = bool(after.get("in_flight") or after.get("inflight")
                             or after.get("in-flight"))
        self.poll_at = now + DREAM_POLL

    def _health(self, now: datetime) -> str | None:
        """Memory health over the last week in one line (agent/ops/stats.py), or None
        when it cannot be read (it never stops the dream's report)."""
        from agent.ops import stats

        try:
            found = stats.stats(self.vault, self.server.settings, now,
                                (now - timedelta(days=7)).date())
        except UserError as e:
            log.warning("dream: could not read memory health: %s", e)
            return None
        return stats.line(found)

    def _tell_review(self, n: int, health: str | None = None) -> None:
        """The dream left proposals: one message to each allow_from Telegram chat, with
        memory health in one line."""
        from agent.serve.channels.telegram import DeliveryFailed

        sender = self.server.outbox.senders.get("telegram")
        if sender is None:
            return
        text = (f"The dream left {n} proposal{'s' * (n != 1)} for your review: "
                f"/review shows {'them' if n != 1 else 'it'}.") + (f"\n{health}" if health else "")
        for user in self.server.settings.telegram_allow_from:
            try:
                sender.deliver(int(user), text)
            except DeliveryFailed as e:
                log.warning("dream: could not tell Telegram user %s about the review: %s",
                            user, e)

    def wake_times(self, now: datetime) -> list[datetime]:
        times = []
        dn = heartbeatfile.due_time({"next_run": self.state.get("dream_next")})
        if dn:
            times.append(dn)
        if self.inflight and self.poll_at:
            times.append(self.poll_at)
        return times


def _describe(outcome) -> str:
    for attr in ("message", "kind"):
        value = getattr(outcome, attr, None)
        if value:
            return str(value)
    return str(outcome)
