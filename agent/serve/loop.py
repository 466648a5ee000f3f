"""The loop of `agent serve` (its scheduler): one pass (`step(now)`) does the work due at `now`, the
loop sleeps until the next due time (at most `tick` seconds), and signals stop it.

The work is in parts, each with `run(now)` and `wake_times(now)`: cron jobs
(cron.py), heartbeats (heartbeats.py), the dream (dream.py), the compaction of idle
sessions (compaction.py) and the sync with the vault's remote (sync.py). Messages of
the channels (the gateway, ...) run through `conversations` (conversations.py), in
threads of their own; a scheduled turn holds its session there, so one session never
has two turns at once. Hand edits of cron.json, heartbeat/ and agent.toml are
noticed by their signatures (watch.py) at the start of every pass.

Time comes from a clock function, so tests drive `step` with the times they choose.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from datetime import datetime, timedelta
from typing import Callable

from agent.chat import subagents
from agent.config import SettingsError, load_settings
from agent.llm import Provider
from agent.serve.compaction import Compaction, in_background
from agent.serve.embedding import Embedding
from agent.serve.conversations import Conversations
from agent.serve.cron import CronJobs
from agent.serve.delivery import Outbox
from agent.serve.dream import Dream
from agent.serve.heartbeats import Heartbeats
from agent.serve.sync import Sync
from agent.serve.turns import log
from agent.fs.signature import signature
from agent.serve.watch import Watch
from agent.vault.repo import Vault

STOP_GRACE = 30            # seconds a running turn may take to finish after SIGTERM
YIELD_MAX = 120            # seconds background work waits for a person's turns at most
                           # (a steady stream of them must not stop it for ever)
# A pass that starts this much later than the previous one ended (beyond the tick) means
# the machine slept: due times inside the gap were missed, as if serve had been stopped.
SUSPEND_GAP = timedelta(seconds=90)


class Server:
    """The scheduler: `step(now)` does the work due at `now`; `run()` loops until stopped."""

    def __init__(self, vault: Vault, provider: Provider, *, clock: Callable[[], datetime],
                 tick: float = 5.0, settings=None):
        self.vault = vault
        self.provider = provider
        self.clock = clock
        self.tick = tick
        self.settings = settings or load_settings(vault.root)
        self.watching_since: datetime | None = None
        self.stopping = False
        self.busy = False
        self.wake = threading.Event()
        self.runs = 0
        self._toml = Watch(lambda: signature(vault.root / "agent.toml"))
        self._toml.mark()
        self.cron = CronJobs(self)
        self.heartbeats = Heartbeats(self)
        self.dream = Dream(self)
        self.compaction = Compaction(self)
        self.embedding = Embedding(self)
        self.sync = Sync(self)
        self.outbox = Outbox(self)          # scheduled replies sent to chats, retried
        self.conversations = Conversations(vault, provider, clock=clock,
                                           settings_fn=lambda: self.settings,
                                           backlog_fn=lambda: not in_background(self.settings),
                                           vectors_in_background=True)

    @contextlib.contextmanager
    def working(self, session: str | None = None):
        """Around a turn, a dream or a compaction: a signal then waits for it to finish.
        With `session`, a chat turn of that session running in `conversations` ends
        first, and its next messages wait for this."""
        with self.conversations.hold(session) if session else contextlib.nullcontext():
            self.busy = True
            try:
                yield
            finally:
                self.busy = False

    def yield_to_turns(self) -> None:
        """Background work's pause before it takes the vault lock or the CPU: wait while
        a person's turn runs or waits (at most YIELD_MAX s), or until serve stops."""
        end = time.monotonic() + YIELD_MAX
        while not self.stopping and time.monotonic() < end:
            if self.conversations.wait_quiet(min(1.0, max(0.0, end - time.monotonic()))):
                return

    def clock_or(self, fallback: datetime) -> datetime:
        """The clock, never earlier than `fallback` (tests pass fixed times to step)."""
        t = self.clock()
        return t if t > fallback else fallback

    # -- noticing edits --

    def reload(self, now: datetime, *, first: bool = False, quiet: bool = False) -> None:
        """Re-read cron.json, heartbeat/ and agent.toml when they changed on disk."""
        self.cron.reload(now, first=first, quiet=quiet)
        self.heartbeats.reload(now, first=first)
        if self._toml.changed():
            try:
                self.settings = load_settings(self.vault.root)
            except SettingsError as e:
                log.error("%s; keeping the settings read before", e)
            else:
                log.info("agent.toml changed: settings reloaded")
                self.dream.settings_changed()

    # -- one pass --

    def step(self, now: datetime | None = None) -> datetime | None:
        """Do the work due now; returns when there is next something to do (or None)."""
        now = now or self.clock()
        if self.watching_since is None:
            self.watching_since = now
        self.reload(now)
        self.sync.run(now)          # first: jobs that came in are seen by this pass
        self.cron.run(now)
        if not self.stopping:
            self.heartbeats.run(self.clock_or(now))
        if not self.stopping:
            self.dream.run(now)
        if not self.stopping:
            self.compaction.run(now)
        if not self.stopping:
            self.embedding.run(now)
        if not self.stopping:
            self.outbox.run(self.clock_or(now))
        return self._next_wake(now)

    def _next_wake(self, now: datetime) -> datetime | None:
        times = [t for part in (self.cron, self.heartbeats, self.dream, self.compaction,
                                self.embedding, self.outbox, self.sync)
                 for t in part.wake_times(now)]
        future = [t for t in times if t > now]
        return min(future) if future else None

    def run(self, *, once: bool = False) -> int:
        """Loop until stopped (or one pass with `once`); the exit status."""
        last_end: datetime | None = None
        while not self.stopping:
            now = self.clock()
            # Wall-clock time, not monotonic: the monotonic clock stands still while the
            # machine sleeps, and sleeping is exactly the gap to notice.
            if last_end is not None and now - last_end > timedelta(seconds=self.tick) + SUSPEND_GAP:
                log.info("woke after %.0fs asleep: work due meanwhile follows its misfire policy",
                         (now - last_end).total_seconds())
                self.watching_since = now
            wake = self.step(now)
            if once:
                break
            last_end = self.clock()
            delay = self.tick
            if wake is not None:
                delay = min(delay, max(0.0, (wake - self.clock()).total_seconds()))
            self.wake.wait(delay)
            self.wake.clear()
        return 0

    # -- signals --

    def on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        running = subagents.running_here()
        if running:
            # Sub-agents stop at once and save what they did (the turn that started one
            # then gets its answer at once).
            log.info("%s: stopping %d sub-agent%s", name, len(running), "s" * (len(running) != 1))
            subagents.cancel_all()
        if self.stopping:
            chats = self.conversations.cancel_all()
            if chats:
                log.info("%s again: interrupting the chat turns of %s", name, ", ".join(chats))
            if self.busy:
                log.info("%s again: interrupting the running turn", name)
                self._interrupt()
                return
            if chats:
                return
        self.stopping = True
        self.wake.set()
        if self.busy:
            log.info("%s: stopping after the running turn (at most %ds; send it again to "
                     "interrupt it now)", name, STOP_GRACE)
            signal.signal(signal.SIGALRM, self._on_grace_over)
            signal.alarm(STOP_GRACE)
        else:
            log.info("%s: stopping", name)

    def _on_grace_over(self, signum, frame) -> None:
        if self.busy:
            log.info("the running turn took over %ds: interrupting it", STOP_GRACE)
            self._interrupt()

    def _interrupt(self) -> None:
        """Interrupt the running turn as Ctrl-C would: the loop saves what it has, marked
        interrupted. While the turn is being written (the loop then holds SIGINT) the
        write is let finish instead; it takes milliseconds."""
        if signal.getsignal(signal.SIGINT) != self.on_signal:
            signal.signal(signal.SIGALRM, self._on_grace_over)
            signal.alarm(1)
            return
        raise KeyboardInterrupt
