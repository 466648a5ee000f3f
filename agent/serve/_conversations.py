"""A stand-in for agent/serve/conversations.py (being built on the `reach` branch): the
same interface, turns run one after another per session, no injection. Deleted when
that branch is merged; nothing but agent/serve/server.py names it.
"""

from __future__ import annotations

import threading

from agent.chat.cancel import new_turn_cancel


class Ticket:
    def __init__(self):
        self.injected = False
        self.result = None
        self.done = threading.Event()

    def wait(self, timeout=None):
        self.done.wait(timeout)
        return self.result


class Conversations:
    def __init__(self, vault, provider, *, clock, settings_fn, on_error=None):
        self.vault, self.provider, self.clock = vault, provider, clock
        self.settings_fn, self.on_error = settings_fn, on_error
        self._locks: dict[str, threading.Lock] = {}
        self._cancels: dict[str, object] = {}
        self._threads: set[threading.Thread] = set()
        self._mutex = threading.Lock()
        self.accepting = True

    def submit(self, session: str, text: str, *, on_event=None, source=None) -> Ticket:
        ticket = Ticket()
        if not self.accepting:
            ticket.done.set()
            return ticket
        t = threading.Thread(target=self._run, args=(session, text, on_event, ticket),
                             name=f"turn {session}")
        with self._mutex:
            self._threads.add(t)
        t.start()
        return ticket

    def _run(self, session, text, on_event, ticket):
        from agent.chat.turn import run_turn

        emit = on_event or (lambda kind, data: None)
        with self._mutex:
            lock = self._locks.setdefault(session, threading.Lock())
        try:
            with lock:
                cancel = new_turn_cancel()
                self._cancels[session] = cancel
                try:
                    ticket.result = run_turn(
                        self.vault, self.provider, session, text, self.clock(),
                        settings=self.settings_fn(), cancel=cancel,
                        on_text=lambda c: emit("text", c),
                        on_tool=lambda name, data: emit("tool_start", {"name": name}))
                    emit("reply", ticket.result)
                except Exception as e:            # never kill the thread silently
                    if self.on_error:
                        self.on_error(session, e)
                finally:
                    self._cancels.pop(session, None)
        finally:
            ticket.done.set()
            with self._mutex:
                self._threads.discard(threading.current_thread())

    def running(self) -> list[str]:
        return sorted(self._cancels)

    def cancel(self, session: str) -> bool:
        c = self._cancels.get(session)
        if c is None:
            return False
        c.set()
        return True

    def drain(self, timeout: float) -> bool:
        import time
        self.accepting = False
        end = time.monotonic() + timeout
        with self._mutex:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in threads)
