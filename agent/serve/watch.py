"""Noticing hand edits: a file or folder's signature (cheap: stats only, as
agent.fs.signature makes it), compared with the one seen last, so serve re-reads cron.json, heartbeat/ and agent.toml only when
they changed on disk."""

from __future__ import annotations

from typing import Callable

UNSEEN = object()        # a signature nothing has: the first look always sees a change


class Watch:
    """What `signature()` returned when last looked at; `changed()` looks again."""

    def __init__(self, signature: Callable[[], object], seen=UNSEEN):
        self.signature = signature
        self.seen = seen

    def changed(self) -> bool:
        now = self.signature()
        if now == self.seen:
            return False
        self.seen = now
        return True

    def mark(self) -> None:
        """Take the current state as seen (after serve's own write)."""
        self.seen = self.signature()
