"""A client of the gateway of a vault's running `agent serve` (`agent chat --remote`, and
`agent chat -m` while serve runs): it finds the address in `.agent/gateway.json` (the
Unix socket `.agent/gateway.sock` on this machine, else the TCP URL) and the token in
`.agent/gateway-token`, and sends a message, streaming the turn's events (SSE) as they
come.

The standard library's urllib only: nothing to install, and nothing of the SDK loaded.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from agent.errors import UserError
from agent.fs import atomic
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

INFO_FILE = "gateway.json"           # in .agent/: the gateway's address (gateway.py writes it)
TOKEN_FILE = "gateway-token"         # in .agent/: its bearer token, mode 0600
SOCKET_FILE = "gateway.sock"         # in .agent/: its Unix socket, mode 0600


class RemoteError(UserError):
    """The gateway cannot be reached, or refused the message."""


def _not_running(vault: Vault, why: str) -> RemoteError:
    return RemoteError(f"No agent serve is running for {vault.root} ({why}). Start it with "
                       f"agent serve (from another machine, set [gateway] port in agent.toml "
                       f"and reach it over HTTP), then try again.")


def _opener(socket_path: str | None) -> Callable[..., Any]:
    """urllib's opener for the gateway: over its Unix socket when given; never through
    an HTTP proxy of the environment (the gateway is on this machine). The HTTP modules
    load here, not with this module: `agent chat -m` checks for a serve before it starts
    loading the SDK, and must not pay for them when none runs."""
    import http.client
    import socket
    import urllib.request

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if isinstance(self.timeout, (int, float)):     # else: socket's default
                sock.settimeout(self.timeout)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
                raise
            self.sock = sock

    class UnixHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(UnixConnection, req)

    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    path = socket_path or ""
    if path:
        handlers.append(UnixHandler())
    return urllib.request.build_opener(*handlers).open


class Remote:
    """The gateway of one vault's serve."""

    def __init__(self, url: str | None, token: str, socket_path: str | None = None):
        self.socket_path = socket_path
        self.url = (url or "").rstrip("/") if not socket_path else "http://localhost"
        self.where = socket_path or self.url
        self.token = token
        self._open: Callable[..., Any] | None = None

    @classmethod
    def find(cls, vault: Vault) -> "Remote":
        info = atomic.read_json(vault.state / INFO_FILE)
        if not isinstance(info, dict):
            raise _not_running(vault, f"no {vault.state / INFO_FILE}")
        sock = vault.state / SOCKET_FILE
        socket_path = str(sock) if info.get("socket") and sock.exists() else None
        if socket_path is None and not isinstance(info.get("url"), str):
            raise _not_running(vault, f"no {sock}")
        try:
            token = (vault.state / TOKEN_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            raise _not_running(vault, f"no {vault.state / TOKEN_FILE}") from None
        return cls(info.get("url"), token, socket_path)

    @classmethod
    def running(cls, vault: Vault, timeout: float = 0.5) -> "Remote | None":
        """The gateway of this vault's serve when one is up and answers, else None (no
        gateway files, a serve that stopped, or files copied from another vault whose
        serve answers: its health names the vault it serves)."""
        try:
            remote = cls.find(vault)
            health = remote.health(timeout=timeout)
        except (RemoteError, ValueError, OSError):
            return None
        if not health.get("accepting") or not _same_folder(health.get("vault"), vault.root):
            return None
        return remote

    def _request(self, method: str, path: str, body: dict | None = None, *,
                 stream: bool = False, timeout: float | None = None):
        import urllib.error
        import urllib.request

        opener = self._open
        if opener is None:
            opener = self._open = _opener(self.socket_path)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "text/event-stream" if stream else "application/json")
        try:
            return opener(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read().decode()).get("error") or e.reason
            except (ValueError, AttributeError, OSError):
                message = e.reason
            raise RemoteError(f"The gateway at {self.where} answered {e.code}: {message}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RemoteError(f"Cannot reach the gateway at {self.where} ({reason}): is agent "
                              f"serve running? Start it with agent serve.") from None

    def health(self, timeout: float = 5.0) -> dict:
        with self._request("GET", "/v1/health", timeout=timeout) as r:
            return json.loads(r.read().decode())

    def _path(self, session: str, tail: str) -> str:
        channel, _, chat = session.partition("/")
        from urllib.parse import quote

        return f"/v1/sessions/{quote(channel, safe='')}/{quote(chat, safe='')}/{tail}"

    def web_login(self) -> str:
        """A one-time login link to the web page of this serve."""
        with self._request("POST", "/v1/web/login", {}, timeout=10) as r:
            return json.loads(r.read().decode())["url"]

    def stop(self, session: str) -> bool:
        """Stop the session's running turn; False when none was running."""
        with self._request("POST", self._path(session, "stop"), {}, timeout=10) as r:
            return bool(json.loads(r.read().decode()).get("stopped"))

    def send(self, session: str, text: str, *,
             on_event: Callable[[str, dict], None] | None = None) -> dict:
        """Send `text` to `session`; the answer {"reply", "commit", "session", "turn",
        "injected", "error"}. With `on_event`, the turn streams: each event (text,
        tool_start, tool_done, reply) is given to it as it comes."""
        path = self._path(session, "messages")
        if on_event is None:
            with self._request("POST", path, {"text": text}) as r:
                return json.loads(r.read().decode())
        final: dict | None = None
        with self._request("POST", path, {"text": text}, stream=True) as r:
            kind, data = None, []
            for raw in r:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and kind is not None:
                    event = json.loads("\n".join(data)) if data else {}
                    on_event(kind, event)
                    if kind == "reply":
                        final = event
                    kind, data = None, []
        if final is None:
            raise RemoteError(f"The gateway at {self.where} closed the stream before the reply "
                              f"(did agent serve stop?).")
        return final


def _same_folder(a, b) -> bool:
    import os

    try:
        return isinstance(a, str) and os.path.samefile(a, b)
    except OSError:
        return False
