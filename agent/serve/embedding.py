"""Meaning-search's backlog in serve: after an import (or installing the embed extra on
a vault of years), the documents still waiting for their vectors are embedded here, in
the background, so no search or turn makes them.

It yields to a person: no slice starts while a person's turn runs or waits, and a step
embeds one small slice after another only while nobody is talking, for at most
EMBED_STEP. A turn that arrives during a slice waits at most for a few documents at
the engine (one call into it at a time, and a query goes first: agent.search.embed),
never for the index, whose write lock the model's time does not hold
(agent.search.vectors.sync). A search in serve (a turn's, the web page's) makes no queued vector itself
(agent.search.query.BACKGROUND): what it does not find by meaning yet it finds by its
words, and the person's turn does not pay for the import's vectors."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from agent.errors import UserError
from agent.serve.turns import log

EMBED_SCAN = timedelta(minutes=1)       # how often serve looks for waiting documents
EMBED_AGAIN = timedelta(seconds=1)      # ... and how soon again while some wait
EMBED_STEP = 5.0                        # seconds of embedding a step, at most
EMBED_SLICE = 8                         # vectors a slice: a turn arriving meanwhile
                                        # shares the cores with its rest


class Embedding:
    """The scheduler's part that makes waiting vectors in the background."""

    def __init__(self, server):
        self.server = server
        self.vault = server.vault
        self.at: datetime | None = None

    def run(self, now: datetime) -> None:
        if self.at is not None and now < self.at:
            return
        from agent.search import index

        server = self.server
        self.at = now + EMBED_SCAN
        try:
            left = index.vectors_waiting(self.vault)
            if not left:
                return
            end, made = time.monotonic() + EMBED_STEP, False
            while left and not server.stopping and time.monotonic() < end:
                if not server.conversations.quiet():
                    break                   # a person's turn runs: again after it
                dense = index.vectors_now(self.vault, limit=EMBED_SLICE, batch=EMBED_SLICE)
                if dense.embedder is None:
                    return
                left, made = index.vectors_waiting(self.vault), True
        except (UserError, OSError) as e:
            log.error("embed: %s", e)
            return
        if made:
            log.info("embed: %s documents still wait for their vectors", f"{left:,}")
        if left:
            self.at = now + EMBED_AGAIN

    def wake_times(self, now: datetime) -> list[datetime]:
        return [self.at] if self.at else []
