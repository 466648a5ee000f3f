"""A turn's events (agent.serve.conversations), handed from its worker thread to the event
loop that answers an HTTP request: the gateway's and the web page's streamed replies."""

from __future__ import annotations

import asyncio
import json

KEEPALIVE = 15.0                     # seconds between SSE comments while a turn is quiet


class Events:
    """A turn's events, handed from its worker thread to the event loop that answers."""

    def __init__(self):
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()

    def put(self, kind: str, data: dict) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, data))

    async def reply(self) -> dict:
        while True:
            kind, data = await self.queue.get()
            if kind == "reply":
                return data

    async def sse(self):
        """Server-sent events until the `reply` one; a comment while the turn is quiet."""
        while True:
            try:
                kind, data = await asyncio.wait_for(self.queue.get(), KEEPALIVE)
            except asyncio.TimeoutError:
                yield b": still working\n\n"
                continue
            yield (f"event: {kind}\ndata: "
                   f"{json.dumps(data, ensure_ascii=False, default=str)}\n\n").encode()
            if kind == "reply":
                return
