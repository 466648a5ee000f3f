"""Meaning-search's backlog in serve: after an import (or installing the embed extra on
a vault of years), the documents still waiting for their vectors are embedded here, a
slice a step, so no search or turn waits for more than its own small slice
(agent.search.query.SEARCH_EMBED_BUDGET)."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent.errors import UserError
from agent.serve.turns import log

EMBED_SCAN = timedelta(minutes=1)       # how often serve looks for waiting documents
EMBED_AGAIN = timedelta(seconds=1)      # ... and how soon again while some wait


class Embedding:
    """The scheduler's part that makes waiting vectors in the background."""

    def __init__(self, server):
        self.server = server
        self.vault = server.vault
        self.at: datetime | None = None

    def run(self, now: datetime) -> None:
        if self.at is not None and now < self.at:
            return
        from agent.search import index, query

        self.at = now + EMBED_SCAN
        try:
            if not index.vectors_waiting(self.vault):
                return
            dense = index.vectors_now(self.vault, limit=query.BACKGROUND_SLICE)
            left = index.vectors_waiting(self.vault)
        except (UserError, OSError) as e:
            log.error("embed: %s", e)
            return
        if dense.embedder is None:
            return
        log.info("embed: %s documents still wait for their vectors", f"{left:,}")
        if left:
            self.at = now + EMBED_AGAIN

    def wake_times(self, now: datetime) -> list[datetime]:
        return [self.at] if self.at else []
