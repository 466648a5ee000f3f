"""Compaction in serve: every few minutes, sessions idle for `idle_compact_minutes` are
compacted (their window archived, in chunks that each fit a request), each at most once
per last message; imported history waiting beyond a window is archived in the
background, a few chunks a step, with its progress logged.

Archiving an import yields to a person: a turn through serve leaves the imported
history to this part (it does not archive a chunk after its reply, as `agent chat`
does), no chunk starts while a person's turn runs or waits, and one whose summary is
made meanwhile waits for the turn before it takes the vault lock to commit. The model
call never holds the vault lock nor the session, so a turn never waits for it.

What to expect: a chunk is one summary request of up to CHUNK_TOKENS (50,000) tokens of
the history and one commit, so ten years of conversation (say 100,000 messages, about
17 MB) is some 80-90 requests, several million input tokens in all, and takes as long
as the model takes to answer them one after the other (tens of minutes). Serve logs
each chunk with what is left; the backlog is recorded in the session file, so a serve
stopped halfway goes on where it was, and `agent archive --all` does the rest at once,
with a progress bar."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent.errors import UserError
from agent.llm import ProviderError
from agent.serve.turns import local, log
from agent.stores import sessions

COMPACT_SCAN = timedelta(minutes=5)
BACKLOG_SCAN = timedelta(seconds=5)     # again soon while imported history waits
BACKLOG_CHUNKS = 2                      # chunks of it per session and step


def in_background(settings) -> bool:
    """Whether serve archives imported history in the background (with idle compaction:
    `[chat] idle_compact_minutes` 0 turns both off, and a turn then archives a chunk
    after its reply, as `agent chat` does)."""
    return settings.idle_compact_minutes > 0


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

        server = self.server
        for _ in range(BACKLOG_CHUNKS):
            if server.stopping or backlog_of(self.vault.root, key) is None:
                return False
            if not server.conversations.quiet():
                return True                 # a person's turn runs: again after it
            try:
                # Not the session's hold: a turn of it may run while the model summarises
                # (the chunk is history beyond the window, which no turn writes).
                with server.working():
                    entry = compact_backlog(self.vault, server.provider, key, now,
                                            settings=server.settings,
                                            pause=server.yield_to_turns)
            except (UserError, ProviderError) as e:
                log.error("compact %s: imported history: %s", key, e)
                return False
            if entry is None:
                continue                    # another process went on meanwhile
            left = backlog_bytes(self.vault.root, key)
            log.info("compact %s: imported history archived as entry %s, about %s KB left",
                     key, entry, f"{left // 1024:,}")
        return backlog_of(self.vault.root, key) is not None

    def wake_times(self, now: datetime) -> list[datetime]:
        return [self.at] if self.at else []
