"""An ASGI app served by uvicorn in a thread of its own, on sockets bound beforehand
(serve's TCP port, its Unix socket), for the gateway and the web page.

uvicorn (with h11, pure Python) is the server; what it lacks for a process that faces
any program of the machine is added by the connection protocol here:

- at most `max_connections` connections at once: one more is closed as soon as it is
  accepted, so half-open connections cannot pile up;
- a client that sends nothing for `idle` seconds while the server waits for its request
  (its headers or its body) is disconnected: uvicorn times out idle keep-alive
  connections only after a response, never one that opened and sent half a request.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("agent.serve")

# Its own messages (a malformed request) are the client's business, not serve's log's.
logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)


def _protocol(max_connections: int, idle: float):
    refused = [0]

    class Protocol(H11Protocol):
        _idle: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                refused[0] += 1
                if refused[0] == 1 or refused[0] % 1000 == 0:
                    log.warning("gateway: %d connections open, the most served at once; "
                                "refused %d more", max_connections, refused[0])
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _waiting(self) -> bool:
            """Whether the server waits for the client (its request, or the rest of it)."""
            return self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and (
                self.cycle is None or self.cycle.response_complete
                or self.conn.their_state is h11.SEND_BODY)

        def _disarm(self) -> None:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing() and self._waiting():
                self._idle = self.loop.call_later(idle, self._expire)

        def _expire(self) -> None:
            self._idle = None
            if self._waiting():
                self.transport.close()

    return Protocol


class _Server(uvicorn.Server):
    def __init__(self, config):
        super().__init__(config)
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)
        self.ready.set()


class Served:
    """`app` on `sockets` (bound and listening): `start()`, `stop_accepting()`, `join()`."""

    def __init__(self, app, sockets: list[socket.socket], *, idle: float,
                 max_connections: int):
        config = uvicorn.Config(
            app, http=_protocol(max_connections, idle), ws="none", lifespan="off",
            interface="asgi3", log_config=None, access_log=False, proxy_headers=False,
            server_header=False, timeout_keep_alive=max(1, int(idle)),
            timeout_graceful_shutdown=5, loop="asyncio")
        self.server = _Server(config)
        self.sockets = sockets
        self.thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=self.sockets))

    def start(self, timeout: float = 30.0) -> None:
        self.thread.start()
        if not self.server.ready.wait(timeout):
            raise RuntimeError("the HTTP server did not start")

    def stop_accepting(self, timeout: float = 5.0) -> None:
        """No new connections; requests being answered go on to their end."""
        loop = self.server.loop
        if loop is None or loop.is_closed():
            return
        done = threading.Event()

        def close() -> None:
            for server in getattr(self.server, "servers", []):
                server.close()
            self.server.should_exit = True
            done.set()
        try:
            loop.call_soon_threadsafe(close)
        except RuntimeError:           # the loop ended meanwhile
            return
        done.wait(timeout)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
