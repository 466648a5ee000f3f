"""A fake Telegram Bot API on 127.0.0.1 that python-telegram-bot talks to through
`api_base`: updates come from a queue the test fills, every request is recorded.

Serves `/bot<token>/<method>` for getMe, getUpdates (a long poll that returns at once
when an update is queued, honouring offset and timeout), sendMessage (with an inline
keyboard in `reply_markup`), answerCallbackQuery, editMessageText, sendChatAction and
deleteWebhook; a wrong token gets 401. `press(user, data)` queues a callback query, as
when a person taps an inline button. `bad_markdown` texts are refused with 400 "can't
parse entities" when sent with a parse_mode; chats in `blocked` get 403 (the person
blocked the bot); `down = True` answers every request with 502.

    with FakeTelegram() as tg:
        tg.message(42, "hello")                    # user 42 writes in their private chat
        tg.wait_sent(42)                           # the bot's answers to chat 42

Tests use the `fake_telegram` fixture (registered in conftest.py). Scripts put this folder
on sys.path and import the module directly; it needs only the standard library.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

TOKEN = "123456789:AAFakeTestTokenDoNotLeak_0123456789"
BOT = {"id": 123456789, "is_bot": True, "first_name": "Agent", "username": "agent_test_bot"}


@dataclass
class Request:
    method: str                 # getUpdates, sendMessage, ...
    params: dict
    token: str
    at: float = field(default_factory=time.monotonic)
    status: int = 0


class FakeTelegram:
    def __init__(self, token: str = TOKEN):
        self.token = token
        self.requests: list[Request] = []
        self.updates: list[dict] = []
        self.confirmed = 0            # updates below this id are forgotten (as Telegram does)
        self.next_update = 1
        self.next_message = 1
        self.blocked: set[int] = set()
        self.bad_markdown: set[str] = set()
        self.down = False
        self.cond = threading.Condition()
        self.closing = False
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # -- what the test does --

    def update(self, body: dict) -> int:
        """Queue a raw update (its update_id is given); returns the id."""
        with self.cond:
            uid = self.next_update
            self.next_update += 1
            self.updates.append({"update_id": uid, **body})
            self.cond.notify_all()
        return uid

    def message(self, user_id: int, text: str | None = "hello", *, chat_id: int | None = None,
                chat_type: str = "private", username: str | None = "ana", edited: bool = False,
                photo: bool = False) -> int:
        """A message from `user_id` in their private chat (or `chat_id`); returns its
        update id."""
        chat_id = user_id if chat_id is None else chat_id
        with self.cond:
            mid = self.next_message
            self.next_message += 1
        msg = {"message_id": mid, "date": int(time.time()),
               "chat": {"id": chat_id, "type": chat_type},
               "from": {"id": user_id, "is_bot": False, "first_name": "Ana",
                        **({"username": username} if username else {})}}
        if text is not None:
            msg["text"] = text
            if text.startswith("/"):
                msg["entities"] = [{"type": "bot_command", "offset": 0,
                                    "length": len(text.split()[0])}]
        if photo:
            msg["photo"] = [{"file_id": "p1", "file_unique_id": "u1", "width": 1, "height": 1}]
        return self.update({"edited_message" if edited else "message": msg})

    def press(self, user_id: int, data: str, *, chat_id: int | None = None,
              message_id: int = 1, username: str | None = "ana") -> int:
        """`user_id` taps an inline button whose callback data is `data` under message
        `message_id` of chat `chat_id` (their private chat by default); the update id."""
        chat_id = user_id if chat_id is None else chat_id
        with self.cond:
            qid = str(self.next_update * 1000 + 7)
        query = {"id": qid, "chat_instance": "ci", "data": data,
                 "from": {"id": user_id, "is_bot": False, "first_name": "Ana",
                          **({"username": username} if username else {})},
                 "message": {"message_id": message_id, "date": int(time.time()),
                             "chat": {"id": chat_id, "type": "private"}, "from": BOT,
                             "text": "a proposal"}}
        return self.update({"callback_query": query})

    def buttons(self, chat_id: int) -> list[list[dict]]:
        """The inline keyboards of the messages sent to `chat_id`, in order."""
        return [m["reply_markup"]["inline_keyboard"] for m in self.sent(chat_id)
                if isinstance(m.get("reply_markup"), dict)]

    def answers(self) -> list[dict]:
        """The answerCallbackQuery calls (params)."""
        return [r.params for r in self.calls("answerCallbackQuery")]

    def unconfirm(self) -> None:
        """Forget what the bot confirmed: as if its last offset never reached Telegram."""
        with self.cond:
            self.confirmed = 0

    def calls(self, method: str | None = None) -> list[Request]:
        with self.cond:
            return [r for r in self.requests if method is None or r.method == method]

    def sent(self, chat_id: int | None = None) -> list[dict]:
        """The sendMessage calls that succeeded (params), to `chat_id` when given."""
        return [r.params for r in self.calls("sendMessage") if r.status == 200
                and (chat_id is None or r.params.get("chat_id") == chat_id)]

    def wait_for(self, predicate, timeout: float = 20.0, what: str = "a condition"):
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                got = predicate()
                if got:
                    return got
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake Telegram: no {what} within {timeout}s; "
                                         f"requests: {[(r.method, r.params) for r in self.requests]}")
                self.cond.wait(min(left, 0.2))

    def wait_sent(self, chat_id: int, n: int = 1, timeout: float = 20.0) -> list[dict]:
        return self.wait_for(lambda: len(self.sent(chat_id)) >= n and self.sent(chat_id),
                             timeout, f"{n} message(s) sent to chat {chat_id}")

    # -- the server side --

    def _updates(self, offset, timeout: float) -> list[dict]:
        end = time.monotonic() + max(0.0, timeout)
        with self.cond:
            if offset is not None:
                self.confirmed = max(self.confirmed, int(offset))
            while True:
                ready = [u for u in self.updates if u["update_id"] >= self.confirmed]
                if ready or self.closing:
                    return ready
                left = end - time.monotonic()
                if left <= 0:
                    return []
                self.cond.wait(min(left, 0.5))


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass              # a client that hung up (a long poll cancelled at shutdown)


def _handler(fake: FakeTelegram):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the
        # body back until the client's delayed ACK (about 40 ms on Linux), which would be
        # counted against the channel by scripts/bench_reach.py.
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def _params(self) -> dict:
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n).decode() if n else ""
            if "json" in (self.headers.get("content-type") or ""):
                return json.loads(raw or "{}")
            out = {}
            for key, values in parse_qs(raw, keep_blank_values=True).items():
                value = values[-1]
                if key not in ("text", "parse_mode", "action"):
                    try:
                        value = json.loads(value)
                    except ValueError:
                        pass
                out[key] = value
            return out

        def _answer(self, rec: Request, status: int, body: dict) -> None:
            rec.status = status
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _error(self, rec, status: int, description: str, **extra) -> None:
            self._answer(rec, status, {"ok": False, "error_code": status,
                                       "description": description, **extra})

        def do_GET(self):
            self.do_POST()

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            params = self._params()
            token, _, method = path.removeprefix("/bot").partition("/")
            rec = Request(method, params, token)
            with fake.cond:
                fake.requests.append(rec)
                fake.cond.notify_all()
            if not path.startswith("/bot") or not method:
                return self._error(rec, 404, "Not Found")
            if fake.down:
                return self._error(rec, 502, "Bad Gateway")
            if token != fake.token:
                return self._error(rec, 401, "Unauthorized")
            ok = lambda result: self._answer(rec, 200, {"ok": True, "result": result})  # noqa: E731
            if method == "getMe":
                return ok(BOT)
            if method in ("answerCallbackQuery", "editMessageText", "editMessageReplyMarkup"):
                ok(True)
                with fake.cond:
                    fake.cond.notify_all()
                return
            if method in ("deleteWebhook", "sendChatAction"):
                if method == "sendChatAction" and params.get("chat_id") in fake.blocked:
                    return self._error(rec, 403, "Forbidden: bot was blocked by the user")
                return ok(True)
            if method == "getUpdates":
                got = fake._updates(params.get("offset"), float(params.get("timeout") or 0))
                return ok(got)
            if method == "sendMessage":
                chat = params.get("chat_id")
                if chat in fake.blocked:
                    return self._error(rec, 403, "Forbidden: bot was blocked by the user")
                text = params.get("text", "")
                if len(text.encode("utf-16-le")) // 2 > 4096:
                    return self._error(rec, 400, "Bad Request: message is too long")
                if params.get("parse_mode") and text in fake.bad_markdown:
                    return self._error(rec, 400, "Bad Request: can't parse entities: Can't "
                                                 "find end of the entity starting at byte "
                                                 "offset 3")
                with fake.cond:
                    mid = fake.next_message
                    fake.next_message += 1
                result = {"message_id": mid, "date": int(time.time()), "text": text,
                          "chat": {"id": chat, "type": "private"}, "from": BOT}
                ok(result)
                with fake.cond:
                    fake.cond.notify_all()
                return
            return self._error(rec, 404, "Not Found: method not found")

    return Handler


try:
    import pytest
except ImportError:  # scripts may run without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture
    def fake_telegram(monkeypatch):
        """A started FakeTelegram; TELEGRAM_BOT_TOKEN is its token."""
        with FakeTelegram() as server:
            monkeypatch.setenv("TELEGRAM_BOT_TOKEN", server.token)
            yield server
