"""Messages that arrive while a turn runs: `Inbox`, handed to `run_turn(inbox=...)`.

    inbox = Inbox()
    # another thread, while the turn runs:
    inbox.put("and book the hotel too")      # True: the turn will see it
    # the turn, before each model call:
    inbox.drain()                             # [("and book the hotel too", None)]
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
        self._waiting: list[tuple[str, str | None]] = []     # (text, source)
        self._closed = False

    def put(self, text: str, *, source: str | None = None) -> bool:
        """Add a message for the turn; False when the turn has already closed the inbox."""
        with self._lock:
            if self._closed:
                return False
            self._waiting.append((text, source))
            return True

    def drain(self) -> list[tuple[str, str | None]]:
        """The messages waiting, oldest first, with the `source` each was put with; they
        are the turn's from now on."""
        with self._lock:
            out, self._waiting = self._waiting, []
            return out

    def close(self) -> list[str]:
        """Accept no more; the messages that arrived too late for the turn to see them."""
        with self._lock:
            self._closed = True
            out, self._waiting = self._waiting, []
            return [text for text, _ in out]

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)
