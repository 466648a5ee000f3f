"""The local HTTP gateway of `agent serve`: any program of this user on this machine
talks to the agent over HTTP on the Unix socket `.agent/gateway.sock` (always on; what
`agent chat` uses), and any that can read the token over TCP when `[gateway] port` is
set.

    POST /v1/sessions/<channel>/<chat>/messages   {"text": "..."}
        -> {"reply", "commit", "session", "turn", "injected", "error"}
        with `Accept: text/event-stream`: SSE events text, tool_start, tool_done, reply
    POST /v1/sessions/<channel>/<chat>/stop       -> {"stopped": true|false}
        stops the session's running turn (it saves what it had, marked interrupted)
    GET  /v1/health  -> {"ok": true, "version", "running", "accepting", "pid", "vault"}

Every request carries `Authorization: Bearer <token>`; the token is made fresh at each
start and written to `.agent/gateway-token` (mode 0600; `.agent/` is git-ignored), the
address to `.agent/gateway.json`, so a client of this vault finds both (`agent chat
--remote`). A message goes through the router (conversations.py): a turn of its
session, or injected into the one running.

It is the standard library's ThreadingHTTPServer (one thread per request; no new
dependency), speaking HTTP/1.0: one request per connection, a streamed answer ends
when the connection closes. A client that sends or takes nothing for `[gateway]
timeout` seconds is disconnected, and at most MAX_CONNECTIONS are served at once
(more are closed at once), so half-open connections cannot pile up threads. On TCP
the `Host` header must name this machine (localhost or an IP address; 421 otherwise):
a web page whose name was rebound to 127.0.0.1 sends its own name, and is refused.
Answers are JSON; a mistake is a 4xx with {"error"} naming it, and nothing is stored: 401 without the right token, 404 for an unknown path, 400
for a malformed body or session key, 413 for a body over MAX_BODY, 503 while serve
stops.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import queue
import secrets
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from agent import version
from agent.errors import UserError
from agent.serve.conversations import Conversations, ServeStopping, reply_data
from agent.serve.remote import INFO_FILE, SOCKET_FILE, TOKEN_FILE
from agent.serve.turns import log
from agent.fs import atomic

MAX_BODY = 1_000_000                 # bytes of a request body
MAX_SOCKET_PATH = 104                # bytes of a Unix socket's path (macOS allows 104)
KEEPALIVE = 15.0                     # seconds between SSE comments while a turn is quiet
PREFIX = "/v1/sessions/"
MAX_CONNECTIONS = 64                 # connections served at once; more are closed
TIMEOUT = 30.0                       # seconds a connection may sit idle ([gateway] timeout)


class GatewayError(UserError):
    """The gateway cannot start (the port is taken, the host is not this machine's)."""


class _Bounded:
    """A threading server that serves at most `slots` connections at once: one more is
    closed as soon as it is accepted (its thread never made)."""
    slots: threading.BoundedSemaphore
    refused = 0

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("gateway: %d connections open, the most served at once; "
                            "refused %d more", MAX_CONNECTIONS, self.refused)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _HTTPServer(_Bounded, ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    tcp = True

    def handle_error(self, request, client_address):
        import sys
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return            # a client that hung up
        log.exception("gateway: a request from %s failed", (client_address or ("its socket",))[0])


class _UnixHTTPServer(_Bounded, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The same gateway on a Unix socket in `.agent/` (see Gateway)."""
    daemon_threads = True
    tcp = False
    handle_error = _HTTPServer.handle_error

    def server_bind(self) -> None:
        # Readable and writable by this user only, from the moment it exists.
        old = os.umask(0o177)
        try:
            super().server_bind()
        finally:
            os.umask(old)


class Gateway:
    """The HTTP server: `start()`, then `stop_accepting()` and `close()` at SIGTERM.

    It always listens on `.agent/gateway.sock`, a Unix socket only this user can open,
    so `agent chat -m` on this machine goes through a running serve with no setting; and
    on TCP (`host`:`port`) when a port is set (None: no TCP)."""

    def __init__(self, vault, conversations: Conversations, *, host: str = "127.0.0.1",
                 port: int | None = 0, timeout: float = TIMEOUT):
        self.vault = vault
        self.conversations = conversations
        self.host = host
        self.port = port
        self.timeout = timeout
        self.token = ""
        self.socket: str | None = None
        self._servers: list = []
        self._active = 0
        self._idle = threading.Condition()

    @property
    def url(self) -> str | None:
        if self.port is None:
            return None
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> "Gateway":
        # `timeout`: every read and write of a connection (socketserver's own setting)
        handler = type("Handler", (_Handler,), {"gateway": self, "timeout": self.timeout})
        state = self.vault.state
        state.mkdir(parents=True, exist_ok=True)
        if self.port is not None:
            try:
                self._servers.append(_HTTPServer((self.host, self.port), handler))
            except OSError as e:
                raise GatewayError(f"The gateway cannot listen on {self.host}:{self.port}: "
                                   f"{e.strerror or e}. Set another [gateway] port in "
                                   f"agent.toml (0 picks a free one).") from None
            self.port = self._servers[0].server_address[1]
        path = str(state / SOCKET_FILE)
        if len(path.encode()) < MAX_SOCKET_PATH:
            try:
                os.unlink(path)                  # left by a serve that was killed
            except FileNotFoundError:
                pass
            try:
                self._servers.append(_UnixHTTPServer(path, handler))
                self.socket = path
            except OSError as e:
                log.warning("gateway: no local socket at %s (%s); agent chat runs turns itself",
                            path, e.strerror or e)
        else:
            log.info("gateway: no local socket (the vault's path is too long for one); "
                     "agent chat runs turns itself")
        self.token = secrets.token_urlsafe(32)
        atomic.write_text(state / TOKEN_FILE, self.token + "\n", mode=0o600)
        atomic.write_json(state / INFO_FILE, {"url": self.url, "host": self.host,
                                              "port": self.port, "socket": self.socket,
                                              "pid": os.getpid()})
        for server in self._servers:
            server.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
            threading.Thread(target=server.serve_forever, name="gateway",
                             kwargs={"poll_interval": 0.2}, daemon=True).start()
        return self

    def stop_accepting(self) -> None:
        """No new connections (requests being answered go on)."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.shutdown()
            server.server_close()
        if not servers:
            return
        for name in (INFO_FILE, TOKEN_FILE, SOCKET_FILE):
            try:
                os.unlink(self.vault.state / name)
            except FileNotFoundError:
                pass

    def close(self, timeout: float = 5.0) -> bool:
        """Wait (at most `timeout` s) until every request has been answered."""
        self.stop_accepting()
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout)

    def host_allowed(self, header: str | None) -> bool:
        """Whether a TCP request's `Host` names this machine: localhost or an IP address
        (a DNS-rebinding page sends its own name), or the host serve listens on; with
        the gateway's port, or none."""
        if not header:
            return False
        name, port = _split_host(header.strip())
        if port is not None and port != self.port:
            return False
        name = name.lower().rstrip(".")
        if name in ("localhost", self.host.lower()):
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def authorized(self, header: str | None) -> bool:
        if not header or not self.token:
            return False
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self.token.encode())

    def _enter(self) -> None:
        with self._idle:
            self._active += 1

    def _leave(self) -> None:
        with self._idle:
            self._active -= 1
            self._idle.notify_all()


def _split_host(value: str) -> tuple[str, int | None]:
    """("name", port) of a Host header ("[::1]:8080" -> ("::1", 8080)); port -1 when
    it is not a number."""
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif value.count(":") == 1:
        name, port = value.split(":")
    else:
        name, port = value, None
    if port is None or port == "":
        return name, None
    return name, int(port) if port.isdigit() else -1


def is_loopback(host: str) -> bool:
    """Whether the address the gateway listens on is this machine's only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    gateway: Gateway
    server_version = "agent-gateway"
    protocol_version = "HTTP/1.0"

    _body_read = False                          # set per request by _body or _drain

    def log_message(self, *args) -> None:      # serve's log says what matters
        pass

    # ---- answers --------------------------------------------------------------------

    def _json(self, status: int, payload: dict) -> None:
        self._drain()
        body = (json.dumps(payload, ensure_ascii=False) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="agent"')
        self.end_headers()
        self.wfile.write(body)

    def _drain(self) -> None:
        """Read the body of a request answered without it (a 401, a 404, /stop): hanging
        up with the client's bytes unread resets the connection, and a client still
        writing its body then gets a broken pipe instead of the answer."""
        if self._body_read:
            return
        self._body_read = True
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return
        if 0 < n <= MAX_BODY:           # a bigger one is refused (413) unread
            self.rfile.read(n)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _guarded(self, fn) -> None:
        self.gateway._enter()
        try:
            if getattr(self.server, "tcp", False) and \
                    not self.gateway.host_allowed(self.headers.get("Host")):
                return self._error(421, f"Host {self.headers.get('Host')!r} is not this "
                                        f"machine: the gateway answers requests for "
                                        f"localhost or an IP address only")
            if not self.gateway.authorized(self.headers.get("Authorization")):
                return self._error(401, "missing or wrong token: send Authorization: Bearer "
                                        "<the token in .agent/gateway-token>")
            fn()
        except _BadRequest as e:
            self._error(e.status, str(e))
        finally:
            self.gateway._leave()

    # ---- routes ---------------------------------------------------------------------

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def do_PUT(self) -> None:
        self._guarded(lambda: self._error(405, "use POST or GET"))

    do_DELETE = do_PATCH = do_PUT

    def _get(self) -> None:
        path = urlsplit(self.path).path
        if path == "/v1/health":
            conv = self.gateway.conversations
            return self._json(200, {"ok": True, "version": version(), "pid": os.getpid(),
                                    "vault": str(self.gateway.vault.root),
                                    "running": conv.running(), "accepting": conv.accepting})
        if self._session_of(path) is not None or self._session_of(path, "/stop") is not None:
            return self._error(405, "use POST")
        self._error(404, f"no such endpoint: GET {path}")

    def _session_of(self, path: str, tail: str = "/messages") -> str | None:
        """The session key of /v1/sessions/<channel>/<chat><tail> (None: not that)."""
        if not path.startswith(PREFIX) or not path.endswith(tail):
            return None
        parts = path[len(PREFIX):-len(tail)].split("/")
        if len(parts) != 2:
            return None
        return "/".join(unquote(p) for p in parts)

    def _body(self) -> dict:
        self._body_read = True
        length = self.headers.get("Content-Length")
        if length is None:
            raise _BadRequest(411, "missing Content-Length")
        try:
            n = int(length)
        except ValueError:
            raise _BadRequest(400, f"Content-Length is not a number: {length!r}") from None
        if n > MAX_BODY:
            raise _BadRequest(413, f"the body is {n} bytes; at most {MAX_BODY} are accepted")
        if n < 0:
            raise _BadRequest(400, "Content-Length is negative")
        raw = self.rfile.read(n)
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise _BadRequest(400, "the body is not UTF-8") from None
        except ValueError as e:
            raise _BadRequest(400, f"the body is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise _BadRequest(400, 'the body must be a JSON object, as in {"text": "hello"}')
        if "text" not in data:
            raise _BadRequest(400, 'missing "text": send {"text": "your message"}')
        if not isinstance(data["text"], str):
            raise _BadRequest(400, f'"text" must be a string, not {type(data["text"]).__name__}')
        if not data["text"].strip():
            raise _BadRequest(400, '"text" is empty')
        return data

    def _post(self) -> None:
        path = urlsplit(self.path).path
        session = self._session_of(path)
        stop = self._session_of(path, "/stop")
        if stop is not None:
            return self._json(200, {"stopped": self.gateway.conversations.cancel(stop)})
        if session is None:
            return self._error(404, f"no such endpoint: POST {path} (messages go to "
                                    f"POST {PREFIX}<channel>/<chat>/messages)")
        from agent.stores import sessions

        try:
            sessions.check_key(session)
        except UserError as e:
            raise _BadRequest(400, str(e)) from None
        data = self._body()
        stream = "text/event-stream" in (self.headers.get("Accept") or "")
        events: queue.Queue = queue.Queue()
        try:
            ticket = self.gateway.conversations.submit(
                session, data["text"], source="gateway",
                on_event=(lambda kind, d: events.put((kind, d))) if stream else None)
        except ServeStopping as e:
            return self._error(503, str(e))
        except UserError as e:
            raise _BadRequest(400, str(e)) from None
        if stream:
            return self._stream(ticket, events)
        result = ticket.wait()
        payload = reply_data(ticket, result)
        if result is None:
            return self._json(500, payload)
        self._json(200, payload)

    def _stream(self, ticket, events: queue.Queue) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.flush()
        while True:
            try:
                kind, data = events.get(timeout=KEEPALIVE)
            except queue.Empty:
                chunk = b": still working\n\n"
            else:
                chunk = (f"event: {kind}\ndata: "
                         f"{json.dumps(data, ensure_ascii=False, default=str)}\n\n").encode()
            try:
                self.wfile.write(chunk)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return          # the client left; the turn goes on and is saved
            if chunk.startswith(b"event: reply\n"):
                return
