"""An ASGI app served by uvicorn in a thread of its own, on sockets bound beforehand
(serve's TCP port, its Unix socket), for the gateway and the web page.

uvicorn (with h11, pure Python) is the server; what it lacks for a process that faces
any program of the machine is added by the connection protocol here:

- deadlines that slow bytes cannot extend: a connection that sends nothing for `idle`
  seconds is closed, and a request must arrive whole (its headers and its body) within
  `idle` seconds of its first byte; uvicorn times out idle keep-alive connections only
  after a response, and a client sending one byte a second would keep any per-byte
  timer alive for ever;
- connections that have not shown a credential yet (a bearer token, a logged-in page's
  cookie: `trusted(scope)` says) are "strangers": at most `max_connections` of them per
  listening socket kind, at most `per_address` from one client address on TCP. One more
  lets go of the oldest stranger still waiting for its request, so a crowd of slow
  clients cannot keep out the person arriving after it; a connection that proved itself
  is never let go for a stranger;
- the Unix socket (only this user can open it: what `agent chat` uses) has its own
  budget, so nothing on TCP can starve it;
- at most HARD_FACTOR * `max_connections` connections in all: past that, a new one is
  closed as soon as it is accepted, so sockets cannot pile up.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections import OrderedDict

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("agent.serve")

# Its own messages (a malformed request) are the client's business, not serve's log's.
logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)

HARD_FACTOR = 4          # connections in all, as a multiple of max_connections


class _Strangers:
    """The connections that have not proved themselves, oldest first, per pool ("tcp",
    "unix"): who is let go when one more arrives."""

    def __init__(self, max_connections: int, per_address: int):
        self.max = max_connections
        self.per_address = per_address
        self.pools: dict[str, OrderedDict] = {"tcp": OrderedDict(), "unix": OrderedDict()}
        self.let_go = 0

    def admit(self, conn) -> bool:
        """Make room for `conn` (a stranger just accepted); False: there is none."""
        pool = self.pools[conn.pool]
        if conn.pool == "tcp":
            mine = [c for c in pool if c.address == conn.address]
            if len(mine) >= self.per_address and not self._let_go(mine):
                return False
        if len(pool) >= self.max and not self._let_go(list(pool)):
            return False
        pool[conn] = None
        return True

    def forget(self, conn) -> None:
        self.pools[conn.pool].pop(conn, None)

    def _let_go(self, oldest_first: list) -> bool:
        for conn in oldest_first:
            if conn.waiting():
                self.forget(conn)
                conn.transport.close()
                self.let_go += 1
                if self.let_go == 1 or self.let_go % 1000 == 0:
                    log.warning("gateway: more clients than it serves at once that have not "
                                "shown a token; the oldest waiting was let go (%d so far)",
                                self.let_go)
                return True
        return False


def _protocol(max_connections: int, per_address: int, idle: float, trusted):
    strangers = _Strangers(max_connections, per_address)

    class Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _request_open = False        # a request's first byte came, not all of it yet
        _checked = None              # the request cycle whose credential was looked at
        proven = False
        pool = "tcp"
        address = ""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.pool = "tcp" if self.client else "unix"
            self.address = self.client[0] if self.client else ""
            if len(self.connections) > HARD_FACTOR * max_connections \
                    or not strangers.admit(self):
                transport.close()
                return
            self._arm(self._idle_expired)

        def data_received(self, data: bytes) -> None:
            if not self._request_open and self._between():
                # The first byte of a request: from now on the whole of it has `idle`
                # seconds, however it is spread.
                self._request_open = True
                self._arm(self._deadline_passed)
            super().data_received(data)
            self._check_credential()
            if self._request_open and not self.waiting():
                self._request_open = False
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            strangers.forget(self)
            super().connection_lost(exc)

        def _between(self) -> bool:
            """No request in progress: before the first, or after a response."""
            return self.conn.their_state is h11.IDLE and (
                self.cycle is None or self.cycle.response_complete)

        def waiting(self) -> bool:
            """Whether the server waits for the client (its request, or the rest of it)."""
            return self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and (
                self.cycle is None or self.cycle.response_complete
                or self.conn.their_state is h11.SEND_BODY)

        def _check_credential(self) -> None:
            if self.proven or self.cycle is None or self.cycle is self._checked:
                return
            self._checked = self.cycle
            if trusted(self.scope):
                self.proven = True
                strangers.forget(self)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _arm(self, expire) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._timer = self.loop.call_later(idle, expire)

        def _idle_expired(self) -> None:
            self._timer = None
            if not self._request_open and self._between():
                self.transport.close()

        def _deadline_passed(self) -> None:
            self._timer = None
            if self._request_open and self.waiting():
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
                 max_connections: int, per_address: int, trusted=lambda scope: False):
        config = uvicorn.Config(
            app, http=_protocol(max_connections, per_address, idle, trusted), ws="none", lifespan="off",
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
