"""Telegram, run by `agent serve`: a message from an allowed user is a turn of session
`telegram/<chat id>`, and its reply goes back to the chat.

The library is python-telegram-bot 22 (its `Bot`: typed updates, the Bot API's error
classes, and httpx as its HTTP stack; aiogram would bring aiohttp besides). Its
`Application.run_polling` is not used: it takes over the signals and the main loop,
which belong to `agent serve`. Instead this module runs its own long-polling loop,
`bot.get_updates(offset=..., timeout=...)`, in a dedicated thread with its own asyncio
loop; turns go through the serve's router (agent/serve/conversations.py), which runs
them in threads of their own, so a slow turn never holds up polling or another chat.

What a person can rely on:

- Only users in `[channels.telegram] allow_from` are answered. Anyone else gets one
  line saying the bot is private, with their user id (so the owner can add it); their
  text is stored nowhere, and the refusal (ids, username, time; never the text) is
  logged to `.agent/telegram-refused.log`. In a group, strangers are not answered.
- Replies to one chat go out in the order its messages came: a photo's line or the
  answer to /help waits for the reply to the message before it. Each does its work at
  once (/stop stops the running turn); only the sending waits. Other chats never wait.
- A "typing" action is repeated every 4 s while the model works; the reply is split
  at Telegram's 4096-character limit on paragraph or line boundaries, sent as
  Telegram's (legacy) Markdown and, when Telegram cannot parse it, again as plain text.
  Legacy Markdown because it takes model replies as they are written (`*bold*`,
  `_italic_`, code spans and blocks, links); MarkdownV2 needs `.`, `-`, `(`, `!` ...
  escaped outside entities, which a model's prose never is, so nearly every reply
  would be rejected; HTML would need a Markdown-to-HTML conversion.
- The slash commands of agent/ops/commands.py (`/new`, `/undo`, `/memory`, `/stop`,
  `/review`, `/help`), the same table the terminal and the web page serve. Photos and
  stickers get one line (text only); edits are ignored.
- Telegram unreachable or the token refused: one line in serve's log, retried with
  exponential backoff (up to 5 minutes) while cron, heartbeats and the rest go on.
- A message is written down (agent/serve/receipts.py: in the chat's transcript,
  committed) before Telegram is told it was read (the next `getUpdates` offset), and
  the offset is kept in `.agent/telegram.json` before that call: a serve killed at any
  moment loses no message, and a restart answers the ones it had not answered, once.
- The token (only ever from $TELEGRAM_BOT_TOKEN) is in the request URLs and nowhere
  else: every error text is scrubbed of it before it is logged or recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from datetime import timezone

from agent import clock
from agent.serve.channels import inorder
from agent.serve.channels.inorder import ChatOrder
from agent.fs import atomic
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

log = logging.getLogger("agent.serve")

TOKEN_ENV = "TELEGRAM_BOT_TOKEN"
STATE_FILE = "telegram.json"
REFUSED_LOG = "telegram-refused.log"
LIMIT = 4096                 # characters (UTF-16 code units) in one message
POLL_TIMEOUT = 25            # seconds a getUpdates long poll waits
TYPING_EVERY = 4.0           # a typing action lasts about 5 s
BACKOFF_CAP = 300.0
REVIEW_SHOWN = 10            # proposals /review shows at once (one message each)
REVIEW_DATA = "rv:"          # callback data of review buttons: rv:a:<run>#<n>, rv:r:<run>#<n>

class DeliveryFailed(Exception):
    """A message could not be sent; str() says why (the token scrubbed)."""


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def split_message(text: str, limit: int = LIMIT) -> list[str]:
    """`text` in pieces of at most `limit` UTF-16 units, cut at a paragraph break, else a
    line break, else a space, else anywhere."""
    text = text.strip("\n") or "(no reply)"
    out = []
    while utf16_len(text) > limit:
        # the longest prefix within the limit
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if utf16_len(text[:mid]) <= limit:
                lo = mid
            else:
                hi = mid - 1
        head = text[:lo]
        cut = -1
        for sep in ("\n\n", "\n", " "):
            cut = head.rfind(sep)
            if cut > lo // 2:
                break
        if cut <= 0:
            cut = lo
        out.append(text[:cut].rstrip())
        text = text[cut:].lstrip("\n ")
    if text:
        out.append(text)
    return [p for p in out if p] or ["(no reply)"]


class TelegramChannel:
    """The Telegram side of `agent serve`: start(), then stop_polling() and close() at
    the end (the router's drain in between lets turns in flight finish and reply)."""

    def __init__(self, vault: Vault, router, provider, *, token: str, settings, clock,
                 settings_fn=None):
        self.vault = vault
        self.router = router
        self.provider = provider
        self.token = token
        self.clock = clock
        self.api_base = settings.telegram_api_base
        # allow_from as agent.toml says it now: an id added while serve runs counts at once
        self.settings_fn = settings_fn or (lambda: settings)
        self._told: dict[int, float] = {}       # stranger -> when last told (monotonic)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.bot = None
        self.connected = threading.Event()
        self.stopping = False
        self.offset = self._read_offset()
        # Updates taken before a restart and not answered yet are answered by resume();
        # Telegram must not hand them over again.
        taken = [r.update_id() for r in getattr(router, "left_over", [])]
        taken = [u for u in taken if u is not None]
        if taken:
            self.offset = max(self.offset or 0, max(taken) + 1)
        self._written = self.offset
        self._offset_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._poll_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._order = ChatOrder()                    # replies to a chat in its order
        self._closed: asyncio.Event | None = None
        self._started = threading.Event()

    # -- the thread and its loop --

    def start(self) -> None:
        for name in ("httpx", "httpcore", "telegram"):   # their INFO lines hold URLs
            logging.getLogger(name).setLevel(logging.WARNING)
        self._thread = threading.Thread(target=self._thread_main, name="telegram", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as e:  # noqa: BLE001 - the channel's thread ends; logged, never silent
            log.error("telegram: stopped by an error: %s", self.scrub(repr(e)))

    async def _main(self) -> None:
        from telegram import Bot
        from telegram.error import TelegramError
        from telegram.request import HTTPXRequest

        self.loop = asyncio.get_running_loop()
        self._closed = asyncio.Event()
        self.bot = Bot(self.token, base_url=f"{self.api_base}/bot",
                       base_file_url=f"{self.api_base}/file/bot",
                       request=HTTPXRequest(connection_pool_size=16, read_timeout=20),
                       get_updates_request=HTTPXRequest(read_timeout=10))
        self._poll_task = asyncio.create_task(self._poll())
        self._started.set()
        await self._closed.wait()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        self._poll_task.cancel()
        try:
            await self.bot.shutdown()
        except (TelegramError, OSError) as e:   # on the way out: said, and nothing to undo
            log.info("telegram: shutting down: %s", self.scrub(repr(e)))

    @property
    def allow(self) -> set[int]:
        return set(self.settings_fn().telegram_allow_from)

    def stop_polling(self) -> None:
        """No new messages are taken (SIGTERM); replies of turns in flight still go out."""
        self.stopping = True
        if self.loop is not None and self._poll_task is not None:
            with contextlib.suppress(RuntimeError):          # the loop has ended
                self.loop.call_soon_threadsafe(self._poll_task.cancel)

    def close(self, timeout: float = 15.0) -> None:
        """After the router drained: send what is left, then end the thread."""
        self.stop_polling()
        if self.loop is not None and self._closed is not None:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._closed.set)
        if self._thread is not None:
            self._thread.join(timeout)

    # -- connecting and polling --

    async def _connect(self) -> bool:
        from telegram.error import InvalidToken, TelegramError

        delay, said = 2.0, None
        while not self.stopping:
            try:
                me = await self.bot.get_me()
                await self.bot.delete_webhook()   # getUpdates is refused while one is set
            except InvalidToken:
                what = (f"the bot token was refused by {self.api_base} (check "
                        f"${TOKEN_ENV}; BotFather gives it)")
            except (TelegramError, OSError) as e:
                what = f"cannot reach {self.api_base} ({self.scrub(e)})"
            else:
                self.connected.set()
                log.info("telegram: connected as @%s; %d allowed user%s%s", me.username,
                         len(self.allow), "s" * (len(self.allow) != 1),
                         "" if self.allow else " (add ids to [channels.telegram] allow_from)")
                return True
            if what != said:
                log.warning("telegram: %s; retrying with backoff, the rest of agent serve "
                            "runs meanwhile", what)
                said = what
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP)
        return False

    async def _poll(self) -> None:
        from telegram.error import (Conflict, InvalidToken, NetworkError, RetryAfter,
                                    TelegramError, TimedOut)

        if not await self._connect():
            return
        delay, said = 1.0, None
        while not self.stopping:
            try:
                updates = await self.bot.get_updates(
                    offset=self.offset, timeout=POLL_TIMEOUT,
                    allowed_updates=["message", "edited_message", "callback_query"])
            except asyncio.CancelledError:
                return
            except TimedOut:
                continue                               # a long poll that ended quietly
            except RetryAfter as e:
                await asyncio.sleep(_seconds(e.retry_after))
                continue
            except (InvalidToken, Conflict, NetworkError, TelegramError, OSError) as e:
                what = ("the bot token was refused" if isinstance(e, InvalidToken) else
                        "another program is polling this bot" if isinstance(e, Conflict) else
                        f"Telegram unreachable ({self.scrub(e)})")
                if what != said:
                    log.warning("telegram: %s; retrying with backoff", what)
                    said = what
                self.connected.clear()
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_CAP)
                continue
            if said:
                log.info("telegram: reachable again")
                said, delay = None, 1.0
            self.connected.set()
            # Each message is written down before the next getUpdates confirms it to
            # Telegram (that call's offset is past it); what follows runs meanwhile.
            for u in updates:
                try:
                    follow = await self._take(u)
                except asyncio.CancelledError:
                    return
                except Exception as e:  # noqa: BLE001 - one bad update never stops polling; logged
                    log.error("telegram: update %d: %s", u.update_id, self.scrub(repr(e)))
                    follow = None
                if follow is not None:
                    chat = update_chat(u)
                    self._spawn(follow, chat)
                self.offset = max(self.offset or 0, u.update_id + 1)
            if updates:
                await asyncio.to_thread(self._write_offset, self.offset)

    def _spawn(self, coro, chat: int | None = None) -> None:
        """Run `coro` (an update's follow-up) now; what it sends to `chat` goes out after
        what the chat's earlier follow-ups send (see send)."""
        if chat is not None:
            coro = self._order.wrap(chat, coro)
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("telegram: %s", self.scrub(repr(task.exception())))

    # -- one update --

    async def _take(self, update):
        """Take one update: a message to answer is submitted (written down) now; what
        is left to do (the reply, a command, a refusal) is returned to run meanwhile."""
        if update.callback_query is not None:         # a /review button
            return self._button(update.callback_query)
        msg = update.message
        if msg is None or msg.from_user is None:      # edits, channel posts: ignored
            return None
        user, chat = msg.from_user, msg.chat
        if user.id not in self.allow:
            return self._refuse(user, chat)
        session = f"telegram/{chat.id}"
        if msg.text is None:
            return self.send(chat.id, "I understand only text messages (no photos, stickers "
                                      "or files yet).", markdown=False)
        text = msg.text
        if text.startswith("/"):
            return self._command(chat.id, session, text)
        from agent.errors import UserError

        try:
            ticket = await asyncio.to_thread(self.router.submit, session, text,
                                             source=f"telegram:{user.id}",
                                             receipt=f"tg-{update.update_id}", settle=False)
        except UserError as e:               # serve is stopping
            return self.send(chat.id, str(e), markdown=False)
        return self._reply(chat.id, ticket)

    def resume(self, receipt) -> bool:
        """Answer in its chat a message taken before a restart (see Conversations.resume);
        False when it is not this channel's."""
        if not receipt.session.startswith("telegram/") or self.loop is None:
            return False
        chat_id = int(receipt.session.split("/", 1)[1])
        if receipt.reply == "":             # it joined a turn whose reply answers it
            self.router.receipts.settle([receipt.id])
            return True
        if receipt.reply is not None:       # answered, and killed before it was sent
            log.info("telegram: sending the reply to a message answered before a restart")
            self.loop.call_soon_threadsafe(self._spawn, self._send_saved(chat_id, receipt),
                                           chat_id)
            return True
        log.info("chat %s: answering a message taken before a restart", receipt.session)
        ticket = self.router.submit(receipt.session, receipt.text, source=receipt.source,
                                    receipt=receipt.id, resumed=True, settle=False)
        self.loop.call_soon_threadsafe(self._spawn, self._reply(chat_id, ticket), chat_id)
        return True

    async def _send_saved(self, chat_id: int, receipt) -> None:
        await self.send(chat_id, receipt.reply)
        await asyncio.to_thread(self.router.receipts.settle, [receipt.id])

    async def _refuse(self, user, chat) -> None:
        entry = {"time": clock.now().astimezone(timezone.utc).isoformat(timespec="seconds"),
                 "user_id": user.id, "chat_id": chat.id, "username": user.username,
                 "chat_type": chat.type}
        await asyncio.to_thread(self._append_refusal, entry)
        log.info("telegram: refused a message from user %d%s in chat %d (not in "
                 "[channels.telegram] allow_from)", user.id,
                 f" (@{user.username})" if user.username else "", chat.id)
        # One line per stranger every 10 minutes: a flood is not answered message by message.
        last = self._told.get(user.id)
        if chat.type == "private" and (last is None or time.monotonic() - last > 600):
            self._told[user.id] = time.monotonic()
            await self.send(chat.id, f"This bot is private. Your Telegram user id is {user.id}: "
                                     f"its owner can allow it.", markdown=False)

    def _append_refusal(self, entry: dict) -> None:
        self.vault.state.mkdir(parents=True, exist_ok=True)
        with open(self.vault.state / REFUSED_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    async def _reply(self, chat_id: int, ticket) -> None:
        """Send the answer to a submitted message once its turn is done."""
        loop = asyncio.get_running_loop()
        if ticket.injected:
            # The running turn sees it at its next model call; that turn's reply (sent
            # by the message that started it) answers both. One that came too late for
            # it runs as the next turn, and is answered below.
            await _finished(loop, ticket)
            if ticket.injected:
                await asyncio.to_thread(self.router.receipts.settle, [ticket.receipt])
                return
        finished = _finished(loop, ticket)
        typing = asyncio.create_task(self._typing(chat_id, finished))
        try:
            result = await finished
        finally:
            typing.cancel()
        await self.send(chat_id, _reply_text(ticket, result))
        if result is None and "before the turn was saved" in (ticket.error or ""):
            return                  # serve stopped it: answered again after the restart
        # Sent (or given up with a line in the log): a restart does not send it again.
        await asyncio.to_thread(self.router.receipts.settle, [ticket.receipt])

    async def _typing(self, chat_id: int, finished: asyncio.Future) -> None:
        from telegram.error import TelegramError

        while not finished.done():
            try:
                await self.bot.send_chat_action(chat_id, "typing")
            except (TelegramError, OSError):
                pass
            try:
                await asyncio.wait_for(asyncio.shield(finished), TYPING_EVERY)
            except asyncio.TimeoutError:
                pass

    async def _command(self, chat_id: int, session: str, text: str) -> None:
        """A slash command (agent.ops.commands, the table every front-end serves), run
        in a thread; /new and /undo once the chat's running turn is saved."""
        from agent.ops import commands

        ctx = commands.Context(self.vault, session, "telegram", provider=self.provider,
                               clock=self.clock, stop=lambda: self.router.cancel(session),
                               hold=getattr(self.router, "hold", None))
        reply = await asyncio.to_thread(commands.run, ctx, text)
        if reply.review:
            await self._review(chat_id, reply)
            return
        shown = "\n\n".join([f"--- {name}\n{body}" for name, body in reply.sections]
                             + ([reply.text] if reply.text else []))
        await self.send(chat_id, shown, markdown=False)

    # -- review: the dream's proposals, decided with inline buttons (agent.ops.review) --

    async def _review(self, chat_id: int, reply) -> None:
        """/review's proposals, one message each with Accept and Reject buttons."""
        from telegram import InlineKeyboardButton, InlineKeyboardMarkup

        items = reply.review
        await self.send(chat_id, reply.text, markdown=False)
        for item in items[:REVIEW_SHOWN]:
            markup = InlineKeyboardMarkup([[
                InlineKeyboardButton("Accept", callback_data=f"{REVIEW_DATA}a:{item.id}"),
                InlineKeyboardButton("Reject", callback_data=f"{REVIEW_DATA}r:{item.id}")]])
            await self.bot.send_message(chat_id, "\n".join(item.lines()), reply_markup=markup)
        if len(items) > REVIEW_SHOWN:
            await self.send(chat_id, f"... and {len(items) - REVIEW_SHOWN} more: decide "
                                     f"these, then /review again.", markdown=False)

    async def _button(self, query) -> None:
        """A tap on Accept or Reject: only an allow_from user's counts."""
        from agent.ops import review

        user = query.from_user
        if user is None or user.id not in self.allow:
            await query.answer("This bot is private.")
            return
        data = query.data or ""
        if not data.startswith(REVIEW_DATA) or data[len(REVIEW_DATA):][:2] not in ("a:", "r:"):
            await query.answer()
            return
        decision = "accept" if data[len(REVIEW_DATA)] == "a" else "reject"
        pick = data[len(REVIEW_DATA) + 2:]
        who = f"telegram user {user.id}" + (f" (@{user.username})" if user.username else "")
        try:
            out = await asyncio.to_thread(review.decide, self.vault, [pick], decision,
                                          self.clock(), who)
        except review.ReviewError as e:
            said = str(e).replace("`agent review` lists", "/review lists")
        else:
            said = ("Not applied: stale (" + out.stale[0].stale + ")" if out.stale else
                    f"{'Accepted' if decision == 'accept' else 'Rejected'}"
                    + (f": {out.subjects[0]}" if out.subjects else ""))
        await query.answer(said[:200])
        if query.message is not None:
            await self.send(query.message.chat.id, said, markdown=False)

    # -- sending --

    async def send(self, chat_id: int, text: str, *, markdown: bool = True,
                   raise_errors: bool = False) -> None:
        """Send `text` in as many messages as it takes; Markdown Telegram rejects is sent
        again as plain text. Errors are logged (or raised, for a delivery)."""
        from telegram.constants import ParseMode
        from telegram.error import BadRequest, RetryAfter, TelegramError

        await inorder.turn()
        for piece in split_message(text):
            mode = ParseMode.MARKDOWN if markdown else None
            for _attempt in range(3):
                try:
                    await self.bot.send_message(chat_id, piece, parse_mode=mode)
                    break
                except BadRequest as e:
                    if mode is not None and "parse entities" in str(e).lower():
                        mode = None                     # plain text this time
                        continue
                    if raise_errors:
                        raise DeliveryFailed(f"Telegram refused it: {self.scrub(e)}") from None
                    log.warning("telegram: a reply to chat %d was refused: %s", chat_id,
                                self.scrub(e))
                    return
                except RetryAfter as e:
                    await asyncio.sleep(_seconds(e.retry_after))
                except (TelegramError, OSError) as e:
                    why = _why(e, self.scrub)
                    if raise_errors:
                        raise DeliveryFailed(why) from None
                    log.warning("telegram: a reply to chat %d was not sent: %s", chat_id, why)
                    return

    def deliver(self, chat_id: int, text: str, timeout: float = 60.0) -> None:
        """Send a scheduled job's reply, from another thread; DeliveryFailed says why not."""
        if self.loop is None or not self.connected.is_set():
            raise DeliveryFailed(f"Telegram is not connected ({self.api_base} unreachable "
                                 f"or the token refused)")
        fut = asyncio.run_coroutine_threadsafe(
            self.send(chat_id, text, raise_errors=True), self.loop)
        try:
            fut.result(timeout)
        except DeliveryFailed:
            raise
        except TimeoutError:
            fut.cancel()
            raise DeliveryFailed(f"no answer from Telegram within {timeout:.0f}s") from None
        except Exception as e:  # noqa: BLE001 - any failure of a delivery is that delivery's, said to the caller
            raise DeliveryFailed(self.scrub(repr(e))) from None

    # -- state --

    def scrub(self, what) -> str:
        text = str(what)
        return text.replace(self.token, "<token>") if self.token else text

    def _read_offset(self) -> int | None:
        data = atomic.read_json(self.vault.state / STATE_FILE, {})
        off = data.get("offset") if isinstance(data, dict) else None
        return off if isinstance(off, int) and not isinstance(off, bool) else None

    def _write_offset(self, offset: int) -> None:
        with self._offset_lock:              # one writer of the file at a time
            if offset < (self._written or 0):
                return
            self.vault.state.mkdir(parents=True, exist_ok=True)
            atomic.write_json(self.vault.state / STATE_FILE, {"offset": offset})
            self._written = offset


def update_chat(update) -> int | None:
    """The chat an update's answer goes to (None: none, as for an inline message's button)."""
    chat = update.effective_chat
    return chat.id if chat is not None else None


def _finished(loop, ticket) -> asyncio.Future:
    """A future of the ticket's result, set from a thread of its own (a turn may run for
    minutes: no pool thread is held that long)."""
    fut = loop.create_future()

    def wait() -> None:
        result = ticket.wait()
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(result))
    threading.Thread(target=wait, name=f"wait {ticket.session}", daemon=True).start()
    return fut


def _seconds(value) -> float:
    return value.total_seconds() if hasattr(value, "total_seconds") else float(value)


def _why(e, scrub) -> str:
    from telegram.error import Forbidden

    if isinstance(e, Forbidden):
        return f"403 Forbidden from Telegram: {scrub(e)}"
    return f"{type(e).__name__}: {scrub(e)}"


def _reply_text(ticket, result) -> str:
    """What the chat is sent for a message: the reply, marked when it was stopped, and
    the error when the turn failed."""
    reply = (getattr(ticket, "reply", "") or getattr(result, "reply", "") or "").strip()
    if getattr(result, "interrupted", False):
        reply = (reply + "\n\n[stopped]").strip()
    error = getattr(ticket, "error", None) or getattr(result, "error", None)
    if error:
        reply = (reply + f"\n\n(Error: {error})").strip()
    return reply or "(no reply)"


def check(settings, timeout: float = 10.0) -> tuple[bool, str, str]:
    """For `agent doctor`: (ok, what, how to fix) of the Telegram channel: the token set
    and accepted (one getMe), and who may talk to it."""
    import asyncio as aio

    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        return (False, f"enabled, but ${TOKEN_ENV} is not set",
                f"set ${TOKEN_ENV} in agent serve's environment (BotFather gives the token)")

    async def get_me():
        from telegram import Bot
        from telegram.request import HTTPXRequest

        request = HTTPXRequest(connect_timeout=timeout, read_timeout=timeout)
        async with Bot(token, base_url=f"{settings.telegram_api_base}/bot",
                       request=request) as bot:
            return bot.bot.username

    from telegram.error import InvalidToken, TelegramError
    try:
        name = aio.run(get_me())
    except InvalidToken:
        return (False, f"the token in ${TOKEN_ENV} was refused by {settings.telegram_api_base}",
                "copy the token again from BotFather (/mybots, API Token)")
    except (TelegramError, OSError) as e:
        text = str(e).replace(token, "<token>")
        return (False, f"{settings.telegram_api_base} unreachable ({text})",
                "check the network (agent serve retries by itself)")
    n = len(settings.telegram_allow_from)
    if not n:
        return (False, f"@{name}, but nobody may talk to it",
                "add your Telegram user id: agent config set channels.telegram.allow_from ID "
                "(the bot's answer to a stranger gives the id)")
    return True, f"@{name}, {n} allowed user{'s' * (n != 1)}", ""


def from_environment(vault: Vault, router, provider, *, settings, clock,
                     settings_fn=None) -> TelegramChannel | None:
    """The channel when `[channels.telegram] enabled` and the token is set; else None,
    with one line saying what is missing."""
    if not settings.telegram_enabled:
        return None
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        log.warning("telegram: enabled in agent.toml but $%s is not set; set it in agent "
                    "serve's environment (BotFather gives the token) and restart; the rest "
                    "runs without Telegram", TOKEN_ENV)
        return None
    from agent.config import keys
    refused = keys.telegram_pair(settings.telegram_api_base).refusal()
    if refused:                 # the token would go where agent.toml says: not decided here
        log.warning("telegram: not started: %s; the rest runs without Telegram", refused)
        return None
    return TelegramChannel(vault, router, provider, token=token, settings=settings, clock=clock,
                           settings_fn=settings_fn)
