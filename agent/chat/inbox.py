"""Messages that arrive while a turn runs: `Inbox`, handed to `run_turn(inbox=...)`.

    inbox = Inbox()
    # another thread, while the turn runs:
    inbox.put("and book the hotel too")      # True: the turn will see it
    # the turn, before each model call:
    inbox.drain()                             # ["and book the hotel too"]
    # the caller, after run_turn returned:
    late = inbox.close()                      # arrived after the last model call

A message is either drained (the turn saw it and answers it) or returned by `close()`
(the caller runs it as the next turn), never both and never neither: `put` after
`close` returns False, and the caller keeps the message itself.
"""

from __future__ import annotations

import threading


class Inbox:
    """A thread-safe list of texts waiting for a running turn."""

    def __init__(self):
        self._lock = threading.Lock()
        self._texts: list[str] = []
        self._sources: list[str | None] = []
        self._closed = False

    def put(self, text: str, *, source: str | None = None) -> bool:
        """Add a message for the turn; False when the turn has already closed the inbox."""
        with self._lock:
            if self._closed:
                return False
            self._texts.append(text)
            self._sources.append(source)
            return True

    def drain(self) -> list[str]:
        """The messages waiting, oldest first; they are the turn's from now on."""
        return [t for t, _ in self.drain_with_sources()]

    def drain_with_sources(self) -> list[tuple[str, str | None]]:
        """Like drain, with the `source` each was put with."""
        with self._lock:
            out = list(zip(self._texts, self._sources))
            self._texts, self._sources = [], []
            return out

    def close(self) -> list[str]:
        """Accept no more; the messages that arrived too late for the turn to see them."""
        with self._lock:
            self._closed = True
            out, self._texts, self._sources = self._texts, [], []
            return out

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def waiting(self) -> int:
        with self._lock:
            return len(self._texts)
