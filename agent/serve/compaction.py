"""Compaction in serve: every few minutes, sessions idle for `idle_compact_minutes` are
compacted (their window archived), each at most once per last message."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent.errors import UserError
from agent.llm import ProviderError
from agent.serve.turns import local, log
from agent.stores import sessions

COMPACT_SCAN = timedelta(minutes=5)


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
            last = sessions.Session(self.vault.root, key).last_line()
            if not last or last.get("type") == "compact" or "ts" not in last:
                continue
            try:
                ts = sessions.parse_ts(last["ts"], key)
            except sessions.SessionError:
                continue
            marker = str(last.get("id"))
            if now - ts < idle or self.tried.get(key) == marker:
                continue
            self.tried[key] = marker
            from agent.chat.compact import compact_session
            try:
                with server.working(key):
                    archived = compact_session(self.vault, server.provider, key, now,
                                               force=True, settings=server.settings)
            except (UserError, ProviderError) as e:
                log.error("compact %s: %s", key, e)
                continue
            if archived is not None:
                log.info("compact %s: idle since %s, archived as entry %s", key, local(ts),
                         archived)

    def wake_times(self, now: datetime) -> list[datetime]:
        return [self.at] if self.at else []
