"""Sync in serve: with `[sync] every = "5m"` in agent.toml, `agent serve` syncs the
vault with its remote at that interval (the first time as it starts) and again after
each dream, as `agent sync` does (agent/sync/remotes.py: fetch and push outside the vault
lock, the merge under it, so never while a turn is being written).

A sync that fails (no remote, the remote unreachable, a push refused) is logged in one
line and tried again later, each failure in a row doubling the wait (at most eight
intervals, or an hour when that is longer); it never stops serve. After a sync that
brought commits in, serve re-reads cron.json, heartbeat/ and agent.toml and brings the
search index up to date, so what came in is scheduled and found at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from agent import schedule as sched
from agent.errors import UserError
from agent.serve.turns import local, log
from agent.sync import remotes as syncing

MAX_BACKOFF = 8                     # intervals at most between tries after failures
MIN_CAP = timedelta(hours=1)        # ... unless an hour is longer


class Sync:
    """The scheduler's sync part."""

    def __init__(self, server):
        self.server = server
        self.vault = server.vault
        self.at: datetime | None = None      # when the next sync is due (None: at once)
        self.failures = 0
        self.said: str | None = None         # the interval last announced

    def _every(self) -> timedelta | None:
        text = self.server.settings.sync_every
        if not text:
            return None
        try:
            return timedelta(seconds=sched.parse_duration(text))
        except sched.ScheduleError:          # agent.toml is checked when read; be safe
            return None

    def soon(self, now: datetime) -> None:
        """Sync at the next pass (after a dream committed)."""
        if self._every() is not None:
            self.at = min(self.at, now) if self.at else now

    def run(self, now: datetime) -> None:
        every = self._every()
        if every is None:
            self.said = None
            return
        if self.said != self.server.settings.sync_every:
            self.said = self.server.settings.sync_every
            log.info("sync: every %s with %s, and after each dream", self.said,
                     self.server.settings.sync_remote or "the vault's remote")
            self.at = None
        if self.at is not None and now < self.at:
            return
        try:
            with self.server.working():
                result = syncing.sync(self.vault, remote=self.server.settings.sync_remote,
                                      now=now)
        except (UserError, OSError) as e:
            self.failures += 1
            cap = max(every * MAX_BACKOFF, MIN_CAP)
            wait = min(every * 2 ** (self.failures - 1), cap)
            self.at = now + wait
            reason = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
            log.error("sync: %s (failure %d in a row; next try %s)", reason, self.failures,
                      local(self.at))
            return
        self.at = now + every
        if self.failures:
            log.info("sync: working again after %d failure%s", self.failures,
                     "s" * (self.failures != 1))
        self.failures = 0
        if result.commits_in or result.commits_out or result.kept_both or result.claimed:
            log.info("%s", result.line())
        if result.held_line():
            log.warning("sync: %s", result.held_line())
            for path in result.kept_both:
                log.info("sync: kept both versions of %s", path)
        if result.commits_in:
            from agent.search import index
            try:
                index.refresh(self.vault, after_commit=True, moved=result.moved)
            except UserError as e:
                log.error("sync: the search index could not be updated: %s", e)
            self.server.reload(self.server.clock_or(now))

    def wake_times(self, now: datetime) -> list[datetime]:
        if self._every() is None:
            return []
        return [self.at] if self.at is not None else [now]
