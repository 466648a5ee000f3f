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
    POST /v1/web/login -> {"url"}: a one-time login link to the web page (`agent web`)

Every request carries `Authorization: Bearer <token>`; the token is made fresh at each
start and written to `.agent/gateway-token` (mode 0600; `.agent/` is git-ignored), the
address to `.agent/gateway.json`, so a client of this vault finds both (`agent chat
--remote`). A message goes through the router (conversations.py): a turn of its
session, or injected into the one running.

It is a Starlette app served by uvicorn (agent/serve/httpd.py) in a thread of serve's:
answers stream with HTTP/1.1 chunked encoding, a streamed answer ends with its `reply`
event. A request must arrive whole (headers and body) within `[gateway] timeout` seconds
of its first byte, and a connection that sends nothing for as long is closed: a client
sending one byte at a time cannot stretch either. Connections that have shown no
credential yet are bounded (MAX_CONNECTIONS, MAX_PER_ADDRESS from one address); one more
lets the oldest of them go, never a connection that showed the token or a logged-in
page's cookie, and the Unix socket has a budget of its own (agent/serve/httpd.py). On TCP the `Host` header must name
this machine (localhost or an IP address; 421 otherwise): a web page whose name was
rebound to 127.0.0.1 sends its own name, and is refused. On TCP, a request outside
`/v1/` that carries no `Authorization` is the web page's (agent/serve/web/), which has
its own login: a session cookie and a CSRF token, never the bearer token.
Answers are JSON; a mistake is a 4xx with {"error"} naming it, and nothing is stored: 401 without the right token, 404 for an unknown path, 400
for a malformed body or session key, 413 for a body over MAX_BODY, 503 while serve
stops.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import socket
import threading
from urllib.parse import unquote

from agent import version
from agent.errors import UserError
from agent.serve.conversations import Conversations, ServeStopping, reply_data
from agent.serve.events import Events
from agent.serve.remote import INFO_FILE, SOCKET_FILE, TOKEN_FILE
from agent.serve.turns import log
from agent.fs import atomic
from agent.fs import boundedjson
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

MAX_BODY = 1_000_000                 # bytes of a request body
MAX_SOCKET_PATH = 104                # bytes of a Unix socket's path (macOS allows 104)
PREFIX = "/v1/sessions/"
MAX_CONNECTIONS = 64                 # connections without a credential yet, per socket kind
MAX_PER_ADDRESS = 16                 # of those, from one client address (TCP)
TIMEOUT = 30.0                       # seconds to send a whole request ([gateway] timeout)


class GatewayError(UserError):
    """The gateway cannot start (the port is taken, the host is not this machine's)."""


def _tcp_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _unix_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Readable and writable by this user only, from the moment it exists.
    old = os.umask(0o177)
    try:
        sock.bind(path)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    return sock


class Gateway:
    """The HTTP server: `start()`, then `stop_accepting()` and `close()` at SIGTERM.

    It always listens on `.agent/gateway.sock`, a Unix socket only this user can open,
    so `agent chat -m` on this machine goes through a running serve with no setting; and
    on TCP (`host`:`port`) when a port is set (None: no TCP), where the web page is too."""

    def __init__(self, vault: Vault, conversations: Conversations, *, host: str = "127.0.0.1",
                 port: int | None = 0, timeout: float = TIMEOUT):
        self.vault = vault
        self.conversations = conversations
        self.host = host
        self.port = port
        self.timeout = timeout
        self.token = ""
        self.socket: str | None = None
        self.web = None                  # the web page (agent.serve.web), with a TCP port
        self._served = None
        self._active = 0
        self._idle = threading.Condition()

    @property
    def url(self) -> str | None:
        if self.port is None:
            return None
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> "Gateway":
        from agent.serve.httpd import Served

        state = self.vault.state
        state.mkdir(parents=True, exist_ok=True)
        sockets = []
        if self.port is not None:
            try:
                sockets.append(_tcp_socket(self.host, self.port))
            except OSError as e:
                raise GatewayError(f"The gateway cannot listen on {self.host}:{self.port}: "
                                   f"{e.strerror or e}. Set another [gateway] port in "
                                   f"agent.toml (0 picks a free one).") from None
            self.port = sockets[0].getsockname()[1]
            if is_loopback(self.host):
                from agent.serve.web.app import WebPage

                self.web = WebPage(self)
        path = str(state / SOCKET_FILE)
        if len(path.encode()) < MAX_SOCKET_PATH:
            try:
                os.unlink(path)                  # left by a serve that was killed
            except FileNotFoundError:
                pass
            try:
                sockets.append(_unix_socket(path))
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
        _warm(self.vault.root)
        self._served = Served(self.app, sockets, idle=self.timeout,
                              max_connections=MAX_CONNECTIONS, per_address=MAX_PER_ADDRESS,
                              trusted=self.trusted)
        self._served.start()
        return self

    def stop_accepting(self) -> None:
        """No new connections (requests being answered go on)."""
        served, self._served = self._served, None
        if served is None:
            return
        served.stop_accepting()
        self._stopped = served
        for name in (INFO_FILE, TOKEN_FILE, SOCKET_FILE):
            try:
                os.unlink(self.vault.state / name)
            except FileNotFoundError:
                pass

    def close(self, timeout: float = 5.0) -> bool:
        """Wait (at most `timeout` s) until every request has been answered."""
        self.stop_accepting()
        with self._idle:
            done = self._idle.wait_for(lambda: self._active == 0, timeout)
        stopped = getattr(self, "_stopped", None)
        if stopped is not None:
            stopped.join(timeout)
        return done

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

    def trusted(self, scope) -> bool:
        """Whether a request shows a credential (the bearer token, or the cookie of a
        logged-in web page): its connection is then never let go for a stranger's."""
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization")
        if auth is not None and self.authorized(auth.decode("latin-1")):
            return True
        cookie = headers.get(b"cookie")
        return (cookie is not None and self.web is not None and scope.get("server") is not None
                and self.web.logged_in(cookie.decode("latin-1")))

    def _enter(self) -> None:
        with self._idle:
            self._active += 1

    def _leave(self) -> None:
        with self._idle:
            self._active -= 1
            self._idle.notify_all()

    # ---- the ASGI app -------------------------------------------------------------------

    async def app(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        from starlette.requests import Request

        self._enter()
        try:
            request = Request(scope, receive)
            tcp = scope.get("server") is not None       # None: the Unix socket
            path = scope["path"]
            web = (tcp and self.web is not None and not path.startswith("/v1/")
                   and "authorization" not in request.headers)
            if not web:
                await _take_body(request)
            if tcp and not self.host_allowed(request.headers.get("host")):
                response = _error(421, f"Host {request.headers.get('host')!r} is not this "
                                       f"machine: the gateway answers requests for "
                                       f"localhost or an IP address only")
            elif web:
                return await self.web.app(scope, receive, send)
            else:
                response = await self._api(request)
            await response(scope, receive, send)
        finally:
            self._leave()

    async def _api(self, request):
        if not self.authorized(request.headers.get("authorization")):
            return _error(401, "missing or wrong token: send Authorization: Bearer "
                               "<the token in .agent/gateway-token>",
                          {"WWW-Authenticate": 'Bearer realm="agent"'})
        try:
            if request.method == "GET":
                return self._get(_raw_path(request.scope))
            if request.method == "POST":
                return await self._post(request)
            return _error(405, "use POST or GET")
        except _BadRequest as e:
            return _error(e.status, str(e), e.headers)

    def _get(self, path: str):
        if path == "/v1/health":
            conv = self.conversations
            return _json(200, {"ok": True, "version": version(), "pid": os.getpid(),
                               "vault": str(self.vault.root),
                               "running": conv.running(), "accepting": conv.accepting})
        if _session_of(path) is not None or _session_of(path, "/stop") is not None:
            return _error(405, "use POST")
        return _error(404, f"no such endpoint: GET {path}")

    async def _post(self, request):
        from starlette.concurrency import run_in_threadpool

        path = _raw_path(request.scope)
        session = _session_of(path)
        stop = _session_of(path, "/stop")
        if stop is not None:
            return _json(200, {"stopped": self.conversations.cancel(stop)})
        if path == "/v1/web/login":
            if self.web is None:
                return _error(404, "the web page is served on the gateway's TCP port, on "
                                   "this machine's loopback address: set it with agent "
                                   "config set gateway.port 8765 (and gateway.host "
                                   "127.0.0.1), then restart agent serve")
            return _json(200, {"url": self.web.login_url()})
        if session is None:
            return _error(404, f"no such endpoint: POST {path} (messages go to "
                               f"POST {PREFIX}<channel>/<chat>/messages)")
        from agent.stores import sessions

        try:
            sessions.check_key(session)
        except UserError as e:
            raise _BadRequest(400, str(e)) from None
        data = await _body(request)
        stream = "text/event-stream" in (request.headers.get("accept") or "")
        events = Events()
        try:
            ticket = await run_in_threadpool(
                self.conversations.submit, session, data["text"], source="gateway",
                on_event=events.put)
        except ServeStopping as e:
            return _error(503, str(e))
        except UserError as e:
            raise _BadRequest(400, str(e)) from None
        if stream:
            from starlette.responses import StreamingResponse

            return StreamingResponse(events.sse(), media_type="text/event-stream; charset=utf-8",
                                     headers={"Cache-Control": "no-cache"})
        await events.reply()
        result = await run_in_threadpool(ticket.wait)
        payload = reply_data(ticket, result)
        return _json(500 if result is None else 200, payload)


def _warm(root) -> None:
    """Load now what the first message needs before its receipt is written (the
    framework's request and thread-pool modules, the secrets filter's patterns): on a
    busy machine that took up to 0.8 s, in which a kill lost a message read whole."""
    import starlette.concurrency  # noqa: F401
    import starlette.requests  # noqa: F401
    import starlette.responses  # noqa: F401

    from agent import redact
    from agent.stores import sessions

    sessions.check_key("gateway/warm")
    redact.door(root, "warm: sk-ant-api03-0000000000000000000000")


def _json(status: int, payload: dict, headers: dict | None = None):
    from starlette.responses import Response

    body = (json.dumps(payload, ensure_ascii=False) + "\n").encode()
    return Response(body, status, headers=headers,
                    media_type="application/json; charset=utf-8")


def _error(status: int, message: str, headers: dict | None = None):
    return _json(status, {"error": message}, headers)


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
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers


def _raw_path(scope) -> str:
    """The path as sent (%2F still escaped: a session key's parts are split before they
    are unescaped)."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1").split("?", 1)[0] if raw else scope["path"]


def _session_of(path: str, tail: str = "/messages") -> str | None:
    """The session key of /v1/sessions/<channel>/<chat><tail> (None: not that)."""
    if not path.startswith(PREFIX) or not path.endswith(tail):
        return None
    parts = path[len(PREFIX):-len(tail)].split("/")
    if len(parts) != 2:
        return None
    return "/".join(unquote(p) for p in parts)


async def _take_body(request) -> None:
    """Read a request's body (up to MAX_BODY) before anything is answered: a client that
    sends its headers and its body apart must not find the connection closed by an
    early answer (a broken pipe instead of the answer). Starlette keeps it for later."""
    if request.method in ("GET", "HEAD"):
        return
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) <= MAX_BODY:
        await request.body()


async def _body(request) -> dict:
    length = request.headers.get("content-length")
    if length is None:
        raise _BadRequest(411, "missing Content-Length")
    try:
        n = int(length)
    except ValueError:
        raise _BadRequest(400, f"Content-Length is not a number: {length!r}") from None
    if n > MAX_BODY:
        # Refused from its Content-Length, before it is read; the connection closes, as
        # the body that follows is never read.
        raise _BadRequest(413, f"the body is {n} bytes; at most {MAX_BODY} are accepted",
                          {"Connection": "close"})
    if n < 0:
        raise _BadRequest(400, "Content-Length is negative")
    raw = await request.body()
    try:
        data = boundedjson.loads(raw.decode("utf-8"))
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
