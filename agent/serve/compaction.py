"""Compaction in serve: every few minutes, sessions idle for `idle_compact_minutes` are
compacted (their window archived, in chunks that each fit a request), each at most once
per last message; imported history waiting beyond a window is archived in the
background, a few chunks a step, with its progress logged."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent.errors import UserError
from agent.llm import ProviderError
from agent.serve.turns import local, log
from agent.stores import sessions

COMPACT_SCAN = timedelta(minutes=5)
BACKLOG_SCAN = timedelta(seconds=5)     # again soon while imported history waits
BACKLOG_CHUNKS = 2                      # chunks of it per session and step


class Compaction:
    """The scheduler's compaction part."""

    def __init__(self, server):
        self.server = server
        self.vault = server.vault
        self.at: datetime | None = None
        self.tried: dict[str, str] = {}      # session -> id of the last message tried

    def run(self, now: datetime) -> None:
        server = self.server
        if self.at is not None and now < self.at:
            return
        self.at = now + COMPACT_SCAN
        if server.settings.idle_compact_minutes <= 0:       # 0 turns idle compaction off
            return
        idle = timedelta(minutes=server.settings.idle_compact_minutes)
        for key in sessions.list_sessions(self.vault.root):
            if server.stopping:
                return
            if self._backlog(key, now):
                self.at = min(self.at, now + BACKLOG_SCAN)
            # The last message, not a marker: compaction leaves the last activity as it was.
            last = sessions.Session(self.vault.root, key).last_line()
            if not last or "ts" not in last:
                continue
            try:
                ts = sessions.parse_ts(last["ts"], key)
            except sessions.SessionError:
                continue
            marker = str(last.get("id"))
            if now - ts < idle or self.tried.get(key) == marker:
                continue
            self.tried[key] = marker
            from agent.chat.compact import compact_until
            try:
                with server.working(key):
                    made = compact_until(self.vault, server.provider, key, now, force=True,
                                         settings=server.settings)
            except (UserError, ProviderError) as e:
                log.error("compact %s: %s", key, e)
                continue
            if made:
                log.info("compact %s: idle since %s, archived as entr%s %s", key, local(ts),
                         "ies" if len(made) > 1 else "y", ", ".join(map(str, made)))

    def _backlog(self, key: str, now: datetime) -> bool:
        """Archive a few chunks of the session's imported history waiting beyond its
        window; whether some still wait."""
        from agent.chat.compact import backlog_bytes, backlog_of, compact_backlog

        for _ in range(BACKLOG_CHUNKS):
            if self.server.stopping or backlog_of(self.vault.root, key) is None:
                return False
            try:
                with self.server.working(key):
                    entry = compact_backlog(self.vault, self.server.provider, key, now,
                                            settings=self.server.settings)
            except (UserError, ProviderError) as e:
                log.error("compact %s: imported history: %s", key, e)
                return False
            left = backlog_bytes(self.vault.root, key)
            log.info("compact %s: imported history archived as entry %s, about %s KB left",
                     key, entry, f"{left // 1024:,}")
        return backlog_of(self.vault.root, key) is not None

    def wake_times(self, now: datetime) -> list[datetime]:
        return [self.at] if self.at else []
