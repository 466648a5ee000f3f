"""What bounds a turn besides its count of model calls: its time, and a reply that keeps
repeating the same text (a small local model runs away easily: issue 42 saw 3,422 tokens
of one date, four and a half minutes of it).

    watch = Watch(limit=600.0)
    watch.heard(chunk)          # on each piece of the streamed reply: Cut when it repeats
    watch.check()               # before each model call: Cut when the time is up

A `Cut` is the seam's `Stop` (agent.llm.records): raised from the stream's on_text, the
provider closes the stream (a local server stops writing) and returns what had arrived
as a reply whose stop_reason is STOPPED; raised between model calls, the turn stops
there. Either way the turn keeps what was written, marks it cut and says so in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.llm.records import Stop
from agent.llm.repeats import MAX_UNIT, MIN_COPIES, MIN_SPAN, repeating

_EVERY = 64          # characters heard between two looks


class Cut(Stop):
    """The turn was stopped by one of its bounds: `why` is "repeating", "time" or
    "max_tokens"; `line` is what the person is told."""

    def __init__(self, why: str, line: str) -> None:
        super().__init__(why, line)


class Watch:
    """One turn's bounds: `limit` seconds from its start (None: no limit)."""

    def __init__(self, limit: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self.start = clock()
        self.text: list[str] = []
        self.size = 0
        self.looked = 0

    def reset(self) -> None:
        """A new model call: its own reply is watched for repeats."""
        self.text.clear()
        self.size = self.looked = 0

    def deadline(self) -> float | None:
        """The time.monotonic() instant the turn's time is up (a model call's
        Request.deadline: the stream is shut there even while the server is silent)."""
        if self.limit is None:
            return None
        return time.monotonic() + self.limit - (self.clock() - self.start)

    def timed_out(self) -> Cut:
        minutes = (self.limit or 0) / 60
        said = (f"{minutes:g} minute{'s' * (minutes != 1)}" if minutes >= 1 else
                f"{self.limit:g} second{'s' * (self.limit != 1)}")
        return Cut("time", f"Cut: the turn ran past its time limit of {said}; what was "
                           f"written is kept. [chat] turn_timeout in agent.toml sets it.")

    def check(self) -> None:
        if self.limit is not None and self.clock() - self.start > self.limit:
            raise self.timed_out()

    def heard(self, chunk: str) -> None:
        self.text.append(chunk)
        self.size += len(chunk)
        if self.size - self.looked >= _EVERY:
            self.looked = self.size
            if len(self.text) > 1:
                self.text[:] = ["".join(self.text)[-(MIN_SPAN + MAX_UNIT * MIN_COPIES):]]
            unit = repeating(self.text[0])
            if unit is not None:
                raise Cut("repeating", f"Cut: the reply kept repeating the same "
                                       f"{unit}-character text, so it was stopped; what was "
                                       f"written is kept. A repeat_penalty or "
                                       f"frequency_penalty in the provider's [providers.NAME] "
                                       f"table helps a small local model.")
        self.check()
