"""A message `agent serve` took from a channel is written down before the channel is told
it arrived, so a serve killed mid-turn loses no message.

When the router accepts a message (agent/serve/conversations.py), before the turn runs
and before Telegram is told the update was read (its next `getUpdates` offset) or the
gateway's client is answered, this writes it:

- into the session's transcript, as a line of its own, fsynced and committed
  (`receive(telegram/42): plan the Kyoto trip`, trailer `Received: <id>`):

      {"type": "received", "id": "tg-1234", "ts": "...", "content": "...", "source": "..."}

  It is not a message (no `role`): the prompt and the search index skip it, and the
  turn that answers it writes the person's message as usual, its user line carrying
  `"received": "<id>"`;
- in `.agent/received.json`, the receipts not yet answered (this machine's work list).

A turn that saved the message settles its receipt; for Telegram, only once the reply
was sent. At start, serve answers each receipt still open (`outstanding`): by running
its turn, or, when its session shows the turn saved already (a kill between the
turn's commit and the reply's sending), by sending the saved reply. The person's
message is answered, once, after the restart.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import datetime

from agent.ops.runs import short
from agent.stores import sessions
from agent.fs import atomic
from agent.vault.change import Change
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

FILE = "received.json"
TYPE = "received"


@dataclass
class Receipt:
    id: str
    session: str
    text: str
    source: str | None
    ts: str
    # The saved answer, when its turn was saved already ("": it joined a turn another
    # message started, whose reply answers both); None: not answered yet.
    reply: str | None = None

    def update_id(self) -> int | None:
        """The Telegram update it came as (`tg-<update id>`), else None."""
        if self.id.startswith("tg-") and self.id[3:].isdigit():
            return int(self.id[3:])
        return None


class Receipts:
    """The receipts of one vault (thread-safe)."""

    def __init__(self, vault: Vault):
        self.vault = vault
        self._lock = threading.Lock()

    @property
    def _path(self):
        return self.vault.state / FILE

    def _read(self) -> dict:
        data = atomic.read_json(self._path, {})
        return data if isinstance(data, dict) else {}

    def record(self, session: str, text: str, source: str | None, now: datetime,
               receipt_id: str | None = None) -> str:
        """Write the message down (work list, then transcript and commit); its id."""
        rid = receipt_id or f"r-{secrets.token_hex(6)}"
        ts = now.isoformat(timespec="seconds")
        with self._lock:
            data = self._read()
            data[rid] = {"session": session, "text": text, "source": source, "ts": ts}
            self.vault.state.mkdir(parents=True, exist_ok=True)
            atomic.write_json(self._path, data)
        line = {"type": TYPE, "id": rid, "ts": ts, "content": text}
        if source:
            line["source"] = source
        with self.vault.locked():
            self.vault.append_lines(sessions.month_file(session, now), [sessions.dumps(line)])
            self.vault.commit(Change("receive", short(text), scope=session,
                                     trailers={"Received": rid}))
        return rid

    def settle(self, ids) -> None:
        """The messages `ids` are answered (their turn is saved)."""
        ids = [i for i in ids if i]
        if not ids:
            return
        with self._lock:
            data = self._read()
            if not any(i in data for i in ids):
                return
            for i in ids:
                data.pop(i, None)
            atomic.write_json(self._path, data)

    def outstanding(self) -> list[Receipt]:
        """The receipts not settled yet, oldest first; one whose turn was saved has its
        `reply`."""
        with self._lock:
            data = self._read()
        out, done = [], []
        for rid, e in data.items():
            if not isinstance(e, dict) or not isinstance(e.get("session"), str) \
                    or not isinstance(e.get("text"), str):
                done.append(rid)
                continue
            try:
                sessions.check_key(e["session"])
            except sessions.SessionError:
                done.append(rid)
                continue
            source = e.get("source")
            out.append(Receipt(rid, e["session"], e["text"],
                               source if isinstance(source, str) else None, str(e.get("ts")),
                               _answer_of(self.vault.root, e["session"], rid)))
        self.settle(done)
        return sorted(out, key=lambda r: r.ts)


def _answer_of(root, session: str, rid: str) -> str | None:
    """The saved reply of the turn that answered receipt `rid` (None: no such turn),
    read from the session's end a little way back."""
    after: list[dict] = []              # the lines after the one looked at, newest last
    for path in reversed(sessions.Session(root, session).files()[-2:]):
        for _, obj in sessions.read_backward(path, path.relative_to(root).as_posix(), root):
            if obj.get("received") == rid:
                return _reply_in(after)
            if obj.get("type") == TYPE and obj.get("id") == rid:
                # Reached its receipt. A message that joined a running turn is saved
                # where the model saw it, as an injected user line of its words.
                joined = any(m is not None and m.role == "user" and m.extra.get("injected")
                             and m.content == obj.get("content")
                             for m in map(sessions.Line.read, after))
                return "" if joined else None
            after.insert(0, obj)
    return None


def _reply_in(lines: list[dict]) -> str:
    """The assistant's words of one turn: `lines` from after its user line, up to the
    next turn's."""
    words = []
    for obj in lines:
        m = sessions.Line.read(obj)
        if obj.get("type") == TYPE or (m is not None and m.role == "user"
                                       and m.extra.get("received")):
            break
        if m is not None and m.role == "assistant":
            words.append(sessions.message_text(m.content, sep=""))
    return "\n\n".join(w for w in words if w.strip()) or "(no reply)"
