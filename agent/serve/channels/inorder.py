"""Replies to one chat in the order its messages came, while their work runs at once.

A channel runs each update's follow-up (a turn's reply, a command's answer, a photo's
one line) as a task of its own, so a slow turn never holds up another chat, or /stop.
Sending is what keeps order: a follow-up's first send waits until the follow-up of the
chat's message before it has ended (a chain per chat, none across chats).

    order = ChatOrder()
    asyncio.create_task(order.wrap(chat_id, follow_up()))    # on the channel's loop
    ...
    await turn()                # in a send: wait for the chat's earlier follow-ups
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Coroutine

# What the running follow-up sends after: the end of the chat's previous follow-up
# (None: nothing to wait for, as for a scheduled delivery).
_AFTER: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "chat_order_after", default=None)


class ChatOrder:
    """The newest follow-up of each chat; used on one event loop."""

    def __init__(self) -> None:
        self._last: dict[int, asyncio.Event] = {}

    def wrap(self, chat: int, coro: Coroutine[Any, Any, Any]) -> Coroutine[Any, Any, None]:
        """`coro`, run after the chat's earlier follow-ups as far as its sending goes."""
        done = asyncio.Event()
        after = self._last.get(chat)
        self._last[chat] = done
        return self._run(chat, coro, after, done)

    async def _run(self, chat: int, coro: Coroutine[Any, Any, Any],
                   after: asyncio.Event | None, done: asyncio.Event) -> None:
        _AFTER.set(after)
        try:
            await coro
        finally:
            done.set()
            if self._last.get(chat) is done:
                del self._last[chat]


async def turn() -> None:
    """Wait until the chat's earlier follow-ups have sent what they send (once: a
    follow-up sending several messages holds the chat until it ends)."""
    after = _AFTER.get()
    if after is not None:
        await after.wait()
        _AFTER.set(None)
