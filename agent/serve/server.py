"""`agent serve`: one long process per vault that runs due cron jobs and heartbeats, the
nightly dream and the compaction of idle sessions, until SIGINT or SIGTERM.

How it keeps the vault right:

- One serve per vault: an flock on `.agent/serve.lock` (lock.py).
- A job runs once per due time, and its record lands in the same commit as its turn
  (cron.py).
- Every write of cron.json re-reads it under the vault lock, so state written by serve
  and by a `cron` command or a chat at the same moment is never lost (jobs.py).
- The loop (loop.py) does one pass of due work at a time, sleeps until the
  next due time, notices hand edits, and stops on a signal after the running turn.
- The gateway (gateway.py) takes messages for the router (conversations.py) for the
  whole serve: on the Unix socket `.agent/gateway.sock` always (`agent chat` on this
  machine), and over HTTP when `[gateway] port` is set. On SIGINT/SIGTERM it stops accepting,
  the chat turns in flight finish (at most STOP_GRACE seconds, then they are
  interrupted and save what they had) and their answers are sent, then serve exits.
- With `[channels.telegram] enabled` and $TELEGRAM_BOT_TOKEN set, Telegram
  (agent/serve/channels/telegram.py) takes messages for the same router, polling in a thread
  of its own; it stops polling at a signal and sends the replies of the turns in flight
  before serve exits. Scheduled replies go to their chats through delivery.py.

This module is the command: the lock, the log, the signals, the loop.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from datetime import datetime
from logging.handlers import RotatingFileHandler
from typing import Callable

from agent.chat import subagents
from agent.config import load_settings
from agent.llm import make_provider
from agent.serve.channels.telegram import from_environment as channel_from_environment
from agent.serve.lock import ServeLock
from agent.serve.loop import STOP_GRACE, Server
from agent.serve.turns import log
from agent.vault.repo import Vault
from agent.clock import now as clock_now

LOG_FILE = "serve.log"


def _setup_logging(vault: Vault) -> list[logging.Handler]:
    vault.state.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")
    # The log is transient: kept to a few megabytes (serve.log, serve.log.1, serve.log.2).
    handlers: list[logging.Handler] = [
        logging.StreamHandler(sys.stdout),
        RotatingFileHandler(vault.state / LOG_FILE, maxBytes=2_000_000, backupCount=2,
                            encoding="utf-8")]
    for h in handlers:
        h.setFormatter(fmt)
        log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    return handlers


def main(vault: Vault, *, tick: float = 5.0, once: bool = False,
         clock: Callable[[], datetime] | None = None) -> int:
    """`agent serve`: hold the serve lock, then run the loop until SIGINT/SIGTERM."""
    lock = ServeLock(vault).acquire()
    handlers = _setup_logging(vault)
    try:
        clock = clock or clock_now
        server = Server(vault, make_provider(load_settings(vault.root), eager=True), clock=clock,
                        tick=tick)
        start = clock()
        server.watching_since = start
        server.reload(start, first=True)     # a corrupt cron.json is reported; the rest runs
        if lock.previous and lock.previous != os.getpid():
            log.info("took over the serve lock of pid %d, which is no longer running",
                     lock.previous)
        from agent.sandbox import startup_note
        note = startup_note(server.settings)      # before "agent serve on": tests wait for it
        if note:
            log.warning("%s", note)
        gateway = None
        if not once:
            from agent.serve.gateway import TOKEN_FILE, Gateway, is_loopback
            gateway = Gateway(vault, server.conversations, host=server.settings.gateway_host,
                              port=server.settings.gateway_port,
                              timeout=server.settings.gateway_timeout).start()
            if gateway.url:
                log.info("gateway on %s (the token is in .agent/%s)", gateway.url, TOKEN_FILE)
                if not is_loopback(gateway.host):
                    log.warning("gateway: [gateway] host = %r is reachable from other "
                                "machines, over plain HTTP: anyone who learns the token can "
                                "talk to your agent, and the network can read it; set host "
                                "= \"127.0.0.1\" unless you mean it", gateway.host)
        cron = server.cron.cron
        jobs_n = len(cron.jobs) if cron else 0
        beats = server.heartbeats.beats
        log.info("agent serve on %s (pid %d): %d cron jobs, %d heartbeats (%d enabled), "
                 "dream at %r, tick %gs", vault.root, os.getpid(), jobs_n, len(beats),
                 sum(b.enabled for b in beats), server.settings.dream_schedule, tick)
        previous = {s: signal.signal(s, server.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        telegram = channel_from_environment(vault, server.conversations, server.provider,
                                            settings=server.settings, clock=clock,
                                            settings_fn=lambda: server.settings)
        try:
            if telegram is not None:
                telegram.start()
                server.outbox.senders["telegram"] = telegram
            if not once:
                # Messages a killed serve took and did not answer: answered now, once.
                server.conversations.resume(
                    reply_to=telegram.resume if telegram is not None else None)
            try:
                code = server.run(once=once)
            finally:
                _finish_chats(server, gateway, telegram)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            signal.alarm(0)
        subagents.cancel_all()
        subagents.settle([r.id for r in subagents.running_here()])
        log.info("agent serve stopped (%d runs, %d chat turns)", server.runs,
                 server.conversations.turns)
        return code
    finally:
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()
        lock.release()


def _finish_chats(server: Server, gateway, telegram=None) -> None:
    """At the end: no new messages; the chat turns in flight finish (bounded) and their
    answers go out; then the gateway and Telegram close."""
    if gateway is not None:
        gateway.stop_accepting()
    if telegram is not None:
        telegram.stop_polling()
    conv = server.conversations
    running = conv.running()
    if running:
        log.info("waiting for the chat turns of %s (at most %ds; send the signal again to "
                 "interrupt them now)", ", ".join(running), STOP_GRACE)
    if not conv.drain(STOP_GRACE):
        log.info("the chat turns took over %ds: interrupting them", STOP_GRACE)
        conv.cancel_all()
        conv.drain(10)
    if gateway is not None and not gateway.close(5):
        log.warning("gateway: a client did not take its answer within 5s")
    if telegram is not None:
        telegram.close()
