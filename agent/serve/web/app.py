"""The web page's door: what every request passes before a page sees it.

- The `Host` header must be the loopback address and port serve listens on (a page
  whose name was rebound to 127.0.0.1 sends its own name: 421).
- `/static/` (CSS, htmx, the chat script: all inside the package, nothing from the
  net) and `/login?code=` are open; every other path needs the session cookie (a GET
  without it gets a page saying to run `agent web`; anything else 403).
- A request that changes anything (any method but GET and HEAD) must carry the CSRF
  token, in the form's `csrf` field or the `X-CSRF-Token` header, and no foreign
  `Origin`: else 403, and the handler never runs.
- Every answer has a Content-Security-Policy with no inline script or style, and is
  neither cached nor framed. Templates escape everything they show (Jinja2 autoescape).

The pages themselves are in pages.py; they call the operations (agent/ops, why included,
the search index) and render.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

from agent.serve.web.auth import Logins, csrf_ok

HERE = Path(__file__).parent
MAX_FORM = 2_000_000               # bytes of a form (a memory file edited by hand)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()),
           (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"),
           (b"x-frame-options", b"DENY"),
           (b"cross-origin-opener-policy", b"same-origin"),
           (b"cross-origin-resource-policy", b"same-origin")]


class WebPage:
    """The page of one gateway (its host and port): `app` is its ASGI app."""

    def __init__(self, gateway):
        self.gateway = gateway
        self.vault = gateway.vault
        self.conversations = gateway.conversations
        self.logins = Logins()
        self._router = None
        self._static = None
        self._env = None

    # ---- where it is --------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.gateway.port

    @property
    def cookie(self) -> str:
        # Cookies are per host, not per port: two vaults' pages on one machine each
        # keep their own.
        return f"agent_session_{self.port}"

    def origin(self) -> str:
        host = self.gateway.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def hosts(self) -> set[str]:
        host = self.gateway.host
        names = {f"[{host}]" if ":" in host else host, "localhost"}
        return {f"{n}:{self.port}" for n in names}

    def logged_in(self, cookie_header: str) -> bool:
        """Whether a Cookie header carries the session cookie of a logged-in browser."""
        from starlette.requests import cookie_parser

        return self.logins.find(cookie_parser(cookie_header).get(self.cookie)) is not None

    def login_url(self) -> str:
        return f"{self.origin()}/login?code={self.logins.new_code()}"

    # ---- rendering ----------------------------------------------------------------------

    @property
    def env(self):
        if self._env is None:
            import jinja2

            self._env = jinja2.Environment(
                loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                autoescape=True, trim_blocks=True, lstrip_blocks=True)
        return self._env

    def render(self, request, name: str, status: int = 200, **context):
        from starlette.responses import HTMLResponse

        login = getattr(request.state, "login", None)
        context.setdefault("csrf", login.csrf if login else "")
        context.setdefault("vault", self.vault.root.name)
        context.setdefault("msg", request.query_params.get("msg", ""))
        context.setdefault("error", request.query_params.get("error", ""))
        html = self.env.get_template(name).render(request=request, **context)
        return HTMLResponse(html, status, headers={"Cache-Control": "no-store"})

    # ---- the door -----------------------------------------------------------------------

    async def app(self, scope, receive, send) -> None:
        from starlette.requests import Request

        async def secured(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + HEADERS
            await send(message)

        request = Request(scope, receive)
        body = b""
        if request.method not in ("GET", "HEAD"):
            # Read before anything is answered: a client sending its body after its
            # headers must get the answer, not a connection closed under it.
            read = await _read(receive, MAX_FORM)
            if read is None:
                response = _plain(413, "The form is too large.")
                response.headers["Connection"] = "close"      # the rest is never read
                return await response(scope, receive, secured)
            body = read
            receive = _replay(body, receive)
        host = request.headers.get("host", "")
        if host not in self.hosts():
            return await _plain(421, f"This page answers for {self.origin()} only, not for "
                                     f"Host {host!r}.")(scope, receive, secured)
        path = scope["path"]
        if path.startswith("/static/"):
            return await self.static(scope, receive, secured)
        if path == "/login":
            return await self._login(request)(scope, receive, secured)
        login = self.logins.find(request.cookies.get(self.cookie))
        if login is None:
            if request.method in ("GET", "HEAD"):
                response = self.render(request, "login.html", 401)
            else:
                response = _plain(403, "Not logged in: run `agent web` for a login link.")
            return await response(scope, receive, secured)
        scope.setdefault("state", {})["login"] = login
        if request.method not in ("GET", "HEAD"):
            origin = request.headers.get("origin")
            if origin is not None and origin != self.origin():
                return await _plain(403, f"A request from {origin} may not change anything "
                                         f"here.")(scope, receive, secured)
            form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"),
                                                  keep_blank_values=True).items()}
            given = request.headers.get("x-csrf-token") or form.get("csrf")
            if not csrf_ok(login, given):
                return await _plain(403, "Missing or wrong CSRF token: reload the page and "
                                         "try again.")(scope, receive, secured)
            scope["state"]["form"] = form
        await self.router(scope, receive, secured)

    def _login(self, request):
        from starlette.responses import RedirectResponse

        login = self.logins.redeem(request.query_params.get("code"))
        if login is None:
            return self.render(request, "login.html", 403, expired=True)
        response = RedirectResponse("/", 303)
        response.set_cookie(self.cookie, login.sid, httponly=True, samesite="strict",
                            path="/", max_age=30 * 86400)
        return response

    @property
    def static(self):
        if self._static is None:
            from starlette.staticfiles import StaticFiles

            files = StaticFiles(directory=str(HERE / "static"))

            async def static(scope, receive, send):
                from starlette.exceptions import HTTPException

                scope = dict(scope, path=scope["path"][len("/static"):])
                # StaticFiles raises its 404 (and 405) for an app's exception handler to
                # answer; served bare, uvicorn would make a 500 of it.
                try:
                    await files(scope, receive, send)
                except HTTPException as e:
                    await _plain(e.status_code, "No such file." if e.status_code == 404
                                 else str(e.detail))(scope, receive, send)
            self._static = static
        return self._static

    @property
    def router(self):
        if self._router is None:
            from starlette.concurrency import run_in_threadpool
            from starlette.routing import Router

            from agent.serve.web import health, more, pages

            def sync(fn, *args):          # a handler that blocks (git, files): a thread
                async def endpoint(request):
                    return await run_in_threadpool(fn, self, request, *args)
                return endpoint

            def direct(fn):
                async def endpoint(request):
                    return await fn(self, request)
                return endpoint

            self._router = Router(pages.routes(self, sync, direct) + more.routes(self, sync)
                                  + health.routes(self, sync))
        return self._router


def _plain(status: int, text: str):
    from starlette.responses import PlainTextResponse

    return PlainTextResponse(text + "\n", status, headers={"Cache-Control": "no-store"})


async def _read(receive, limit: int) -> bytes | None:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return body


def _replay(body: bytes, receive):
    """The body read already, then the client's own messages (its disconnect)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay
