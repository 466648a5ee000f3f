"""The router every channel of `agent serve` shares (the HTTP gateway, Telegram, ...):
a message for a session runs as a turn of it, or joins the turn of it that is running.

    conversations = Conversations(vault, provider, clock=now, settings_fn=lambda: settings)
    ticket = conversations.submit("gateway/phone", "plan the Kyoto trip", on_event=show)
    result = ticket.wait()                # the TurnResult of the turn that answered it

- Turns of different sessions run at once, one worker thread each; one session never
  has two turns at once.
- A message for a session whose turn is running is injected into it
  (agent.chat.inbox): the turn's next model call sees it and the turn answers it
  (`ticket.injected` is True). One that arrives too late for that (after the turn's
  last model call) starts the session's next turn as soon as this one is saved.
- `on_event(kind, data)` hears the turn: `text` {"text"}, `tool_start` {"name",
  "input"}, `tool_done` {"name", "is_error"}, and last `reply` {"reply", "commit",
  "session", "turn", "injected", "error", "interrupted"}. An injected message's
  listener hears the turn from the moment it joined; its `reply` is the part of the
  reply written after the model saw it (the first message's is the whole reply).
- Model calls never hold the vault lock: run_turn takes it only to save, and
  `Vault.locked` is a thread lock plus an flock, so turns of several threads save one
  after the other.
- A turn's failure is logged and given to its tickets (`ticket.error`); it never
  stops serve or the other sessions.
- `drain(timeout)` (SIGTERM): no new messages (submit raises ServeStopping); the turns
  in flight, and messages already accepted, finish.
- A message is written down before `submit` returns (agent/serve/receipts.py): in its
  session's transcript, committed, and in `.agent/received.json` until a turn saved
  it; `resume()` at start answers those a killed serve left.
- `hold(session)` lets the scheduler run a turn of its own (a cron job delivering to a
  chat's session) without two turns of that session at once: it waits for the
  session's turn, and messages arriving meanwhile wait for it.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Callable

from agent.chat.cancel import Cancel, new_turn_cancel
from agent.chat.inbox import Inbox
from agent.errors import UserError
from agent.serve.receipts import Receipts
from agent import redact
from agent.ops.runs import run_turn, short
from agent.serve.turns import log
from agent.stores import sessions

if TYPE_CHECKING:
    from agent.vault.repo import Vault
    from agent.chat.turn import TurnResult


class ServeStopping(UserError):
    """serve is stopping and takes no new messages."""


class Ticket:
    """A submitted message: `wait()` for the result of the turn that answered it."""

    def __init__(self, session: str, text: str, source: str | None, on_event):
        self.session = session
        self.text = text
        self.source = source
        # True when it joined a running turn (False again if it came too late for
        # that turn's last model call and ran as the next turn).
        self.injected = False
        self.error: str | None = None    # why the turn failed, when it did
        self.reply = ""                  # the part of the turn's reply that answers it
        self.receipt: str | None = None  # its receipt (agent.serve.receipts)
        self.settle = True               # False: the channel settles it once it replied
        self.kept: list[str] = []        # kinds of secret kept out of the message
        self._on_event = on_event
        self._done = threading.Event()
        self._result: TurnResult | None = None

    def wait(self, timeout: float | None = None) -> "TurnResult | None":
        """The result of the turn that answered this message (None while it runs past
        `timeout`, or when the turn failed: see `error`)."""
        self._done.wait(timeout)
        return self._result

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _event(self, kind: str, data: dict) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(kind, data)
        except Exception as e:  # noqa: BLE001 - a listener gone (a client hung up) is not the turn's failure
            log.warning("%s: a listener failed (%s); it hears no more of this turn",
                        self.session, short(str(e) or type(e).__name__))
            self._on_event = None


class _Slot:
    """One session's state: the turn running, what waits for the next one."""

    def __init__(self, session: str, *, held: bool = False):
        self.session = session
        self.held = held                   # the scheduler runs a turn of it (hold)
        self.queue: list[Ticket] = []      # the next turn's messages
        self.inbox: Inbox | None = None    # the running turn's
        self.attached: list[Ticket] = []   # tickets put into `inbox`, in order
        self.listeners: list[Ticket] = []
        self.cancel: Cancel | None = None
        self.events = threading.Lock()

    def emit(self, kind: str, data: dict) -> None:
        with self.events:
            for t in list(self.listeners):
                t._event(kind, data)


class Conversations:
    """The router (see the module doc)."""

    def __init__(self, vault: Vault, provider, *, clock: Callable[[], datetime],
                 settings_fn: Callable[[], object],
                 on_error: Callable[[str, str], None] | None = None,
                 backlog_fn: Callable[[], bool] = lambda: True,
                 vectors_in_background: bool = False):
        self.vault = vault
        # Whether a turn archives a chunk of imported history after its reply (False
        # while serve archives it in the background, between turns), and whether its
        # searches leave the queued vectors to the background (serve makes them).
        self.backlog_fn = backlog_fn
        self.vectors_in_background = vectors_in_background
        self.provider = provider
        self.clock = clock
        self.settings_fn = settings_fn
        self.on_error = on_error
        self._cond = threading.Condition()
        self._slots: dict[str, _Slot] = {}
        self._closed = False
        self.turns = 0                     # turns run (for the log line at the end)
        self.receipts = Receipts(vault)
        # What a killed serve left, read before any channel takes a message: resume()
        # must not take this process's own messages for left-over ones.
        self._left_over = self.receipts.outstanding()

    # ---- the interface ---------------------------------------------------------------

    def submit(self, session: str, text: str, *, on_event=None, source: str | None = None,
               receipt: str | None = None, resumed: bool = False,
               settle: bool = True) -> Ticket:
        """Run `text` as a turn of `session`, or inject it into the turn of that session
        that is running; written down first (its receipt: `receipt` names it, and with
        `resumed` it is one already written, answered again after a restart). Without
        `settle`, the caller settles the receipt (once it has sent the reply)."""
        sessions.check_key(session)
        if not isinstance(text, str) or not text.strip():
            raise UserError("Nothing to send: the message is empty.")
        # A key in the message is kept out here, before its receipt is written, so the
        # receipt, the turn and the model all see the same clean text (and it is told once).
        text, kept = redact.door(self.vault.root, text)
        ticket = Ticket(session, text, source, on_event)
        ticket.settle = settle
        ticket.kept = kept
        with self._cond:
            if self._closed:
                raise ServeStopping("agent serve is stopping and takes no new messages; "
                                    "send it again once serve has restarted.")
        # On disk before anyone is told it arrived (no lock of ours held: it may wait for
        # the vault lock while a turn saves).
        ticket.receipt = receipt if resumed else self.receipts.record(
            session, text, source, self.clock(), receipt)
        with self._cond:
            slot = self._slots.get(session)
            if slot is not None and slot.inbox is not None:
                if slot.inbox.put(text, source=source):
                    ticket.injected = True
                    slot.attached.append(ticket)
                    with slot.events:
                        slot.listeners.append(ticket)
                    log.info("chat %s: a message joined the running turn: %s", session,
                             short(text, 60))
                    return ticket
            if slot is None:
                slot = self._slots[session] = _Slot(session)
                slot.queue.append(ticket)
                self._start(slot)
            else:
                slot.queue.append(ticket)     # the turn after the one running (or held)
        return ticket

    def running(self) -> list[str]:
        """Sessions with a turn in flight."""
        with self._cond:
            return sorted(s for s, slot in self._slots.items()
                          if slot.inbox is not None or slot.held)

    def quiet(self) -> bool:
        """Whether no person's turn runs or waits to run (a turn the scheduler holds
        is not counted: it is background work itself)."""
        with self._cond:
            return not any(not slot.held or slot.queue for slot in self._slots.values())

    def wait_quiet(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) until no person's turn runs or waits: background
        work calls this before it takes the vault lock or the CPU, so a turn never
        waits for it. Whether it is quiet now."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._closed or not any(not slot.held or slot.queue
                                                for slot in self._slots.values()), timeout)

    def cancel(self, session: str) -> bool:
        """Stop that session's running turn (/stop); it saves what it had, marked
        interrupted. Messages sent to it meanwhile that it had not seen yet run next."""
        with self._cond:
            slot = self._slots.get(session)
            if slot is None or slot.cancel is None or slot.inbox is None:
                return False
            slot.cancel.set()
            return True

    def cancel_all(self) -> list[str]:
        """Stop every running turn (a second SIGTERM); the sessions stopped."""
        with self._cond:
            sessions_ = [s for s, slot in self._slots.items() if slot.cancel is not None]
            for s in sessions_:
                cancel = self._slots[s].cancel
                if cancel is not None:           # (every one listed has one)
                    cancel.set()
                self._slots[s].queue.clear()     # nothing new starts: serve is leaving
        return sessions_

    def drain(self, timeout: float) -> bool:
        """Stop accepting; wait (at most `timeout` s) for the turns in flight, and the
        messages already accepted, to finish. True when all are done."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: not self._slots, timeout)

    @property
    def left_over(self) -> list:
        """The receipts a killed serve left (until resume() takes them)."""
        return list(self._left_over)

    def resume(self, reply_to=None) -> list[Ticket]:
        """Answer the messages a killed serve took and did not answer (at start): each
        runs again as a turn of its session; `reply_to(receipt)` may instead take one
        over (a channel that sends the reply back), returning True."""
        tickets = []
        left, self._left_over = self._left_over, []
        for r in left:
            if reply_to is not None and reply_to(r):
                continue
            if r.reply is not None:         # its turn was saved: nobody waits for it here
                self.receipts.settle([r.id])
                continue
            log.info("chat %s: answering a message taken before a restart: %s", r.session,
                     short(r.text, 60))
            try:
                tickets.append(self.submit(r.session, r.text, source=r.source, receipt=r.id,
                                           resumed=True))
            except UserError as e:
                log.error("chat %s: could not answer a message taken before a restart: %s",
                          r.session, e)
        return tickets

    @property
    def accepting(self) -> bool:
        with self._cond:
            return not self._closed

    @contextlib.contextmanager
    def hold(self, session: str):
        """Run a turn of `session` outside the router (the scheduler's): waits for the
        session's running turn; messages for it meanwhile wait for the next turn."""
        with self._cond:
            self._cond.wait_for(lambda: session not in self._slots)
            slot = self._slots[session] = _Slot(session, held=True)
        try:
            yield
        finally:
            with self._cond:
                slot.held = False
                if slot.queue:
                    self._start(slot)
                else:
                    del self._slots[session]
                    self._cond.notify_all()

    # ---- the worker ------------------------------------------------------------------

    def _start(self, slot: _Slot) -> None:
        threading.Thread(target=self._work, args=(slot,), daemon=True,
                         name=f"turn {slot.session}").start()

    def _work(self, slot: _Slot) -> None:
        while True:
            with self._cond:
                if not slot.queue:
                    del self._slots[slot.session]
                    self._cond.notify_all()
                    return
                first, rest = slot.queue[0], slot.queue[1:]
                slot.queue = []
                inbox = Inbox()
                for t in rest:                 # late messages of the last turn: seen at
                    inbox.put(t.text, source=t.source)   # this turn's first call
                slot.inbox, slot.attached = inbox, list(rest)
                with slot.events:
                    slot.listeners = [first, *rest]
                slot.cancel = new_turn_cancel()
                cancel = slot.cancel
            result, failure = self._run(slot, first, inbox, cancel)
            with self._cond:
                late = inbox.close()
                seen = len(slot.attached) - len(late)
                answered, slot.queue = [first, *slot.attached[:seen]], (
                    slot.attached[seen:] + slot.queue)
                for t in slot.attached[seen:]:
                    t.injected = False         # too late for this turn: the next one's
                slot.inbox, slot.attached, slot.cancel = None, [], None
                with slot.events:
                    slot.listeners = []
                self.turns += 1
            self._answer(answered, result, failure)

    def _run(self, slot: _Slot, first: Ticket, inbox: Inbox, cancel: Cancel):
        """The turn, with its failure as (None, message): never raises."""
        session = slot.session
        log.info("chat %s: running: %s", session, short(first.text, 60))
        if self.vectors_in_background:
            from agent.search import query
            query.BACKGROUND.set(True)          # this worker thread's turns, from now on
        try:
            result, failure = run_turn(
                self.vault, self.provider, session, first.text, self.clock(),
                settings=self.settings_fn(), cancel=cancel, inbox=inbox,
                backlog=self.backlog_fn(),
                line_extra={k: v for k, v in (("source", first.source),
                                              ("received", first.receipt)) if v} or None,
                on_text=lambda chunk: slot.emit("text", {"text": chunk}),
                on_tool=lambda name, data: slot.emit("tool_start", {"name": name,
                                                                    "input": data}),
                on_tool_done=lambda name, bad: slot.emit("tool_done", {"name": name,
                                                                       "is_error": bad}))
        except Exception as e:  # noqa: BLE001 - a bug in a turn: logged in full, serve goes on
            log.exception("chat %s: the turn failed", session)
            result, failure = None, f"{type(e).__name__}: {e}"
        if result is not None:
            what = ("interrupted" if result.interrupted else
                    f"error: {short(result.error)}" if result.error else "ok")
            more = f", {len(result.injected)} injected" if result.injected else ""
            log.info("chat %s turn %s: %s (%s%s)", session, result.turn, what,
                     (result.sha or "no change")[:7], more)
            if result.error:
                self._tell_error(session, result.error)
            return result, None
        if failure == "interrupted":
            failure = "interrupted before the turn was saved"
        log.error("chat %s: failed: %s", session, failure)
        self._tell_error(session, failure or "the turn failed")    # (run_turn always says)
        return None, failure

    def _tell_error(self, session: str, error: str) -> None:
        if self.on_error is None:
            return
        try:
            self.on_error(session, error)
        except Exception:  # noqa: BLE001 - telling of an error must not become one; logged
            log.exception("chat %s: on_error failed", session)

    def _answer(self, tickets: list[Ticket], result, failure: str | None) -> None:
        # tickets[0] is the turn's message; the others were put into its inbox in this
        # order, which is the order the turn injected them in.
        if result is not None or failure != "interrupted before the turn was saved":
            # Saved (or failed for good): no restart answers them again. One whose
            # turn a second signal cut short is answered after the restart.
            try:
                self.receipts.settle([t.receipt for t in tickets if t.settle])
            except OSError as e:
                log.warning("could not settle the receipts of %s: %s", tickets[0].session, e)
        injected = result.injected if result is not None else []
        for i, t in enumerate(tickets):
            if result is None:
                t.error, t.reply = failure, ""
            else:
                before = injected[i - 1][1] if 0 < i <= len(injected) else 0
                t.reply = "\n\n".join(r for r in result.replies[before:] if r) or (
                    result.reply if before == 0 else "")
                if i == 0:                  # the channel's person hears what was kept out
                    t.reply = redact.with_notice(
                        t.reply, [redact.summary(t.kept)] + result.notes if t.kept
                        else result.notes)
                t.error = result.error
            t._result = result
            t._event("reply", reply_data(t, result))
            t._done.set()


def reply_data(ticket: Ticket, result) -> dict:
    """What a channel tells of an answered message (the gateway's JSON answer)."""
    return {"reply": ticket.reply,
            "commit": result.sha if result is not None else None,
            "session": ticket.session,
            "turn": result.turn if result is not None else None,
            "injected": ticket.injected,
            "error": ticket.error,
            "interrupted": result is not None and result.interrupted}
