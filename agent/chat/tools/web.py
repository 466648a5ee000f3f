"""`web_fetch`: a web page as readable text.

Fetching is done here with http.client, not by the extraction library, so that every
limit is ours: http and https only; at most MAX_REDIRECTS redirects, each hop checked
again; the host is resolved here and refused before any connection is tried when it
leads to a loopback, private or link-local address (unless `[web] allow_private =
true`), and the connection goes to the very address checked, so a rebinding name
cannot slip through and the model cannot learn which private ports are open; no proxy
from the environment; one deadline for the whole fetch (DNS, connect, TLS, headers
and body, enforced by a watchdog that shuts the socket) and a byte limit on the body.

The page's main text is extracted with trafilatura (maintained, the best-scoring
open-source extractor in published main-text benchmarks, and it keeps headings, lists
and tables as Markdown); it is imported only when a page is fetched (about 0.45 s).
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from agent.chat.tools.registry import ToolError, current_context, tool

MAX_REDIRECTS = 5
DEFAULT_CHARS = 20_000
MOST_CHARS = 200_000
USER_AGENT = "agent-web-fetch/0.1 (+https://github.com/; a personal assistant fetching one page)"
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml",
              "application/rss+xml", "application/atom+xml", "application/javascript")


class FetchError(ToolError):
    pass


def public_address(ip: str) -> bool:
    """Whether `ip` is a global unicast address (not loopback, private, link-local...)."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_global and not addr.is_multicast


class _Deadline:
    """One deadline for a whole fetch: DNS, connect, TLS, headers and body.

    A per-operation socket timeout would let a server trickling one byte a second hold
    the turn for ever; at the deadline the watchdog shuts the connection's socket down,
    which wakes whatever read is blocked on it, and the fetch ends with `expired` set."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return self.end - time.monotonic()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._sock is not None:
                _shut(self._sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass                    # not connected yet, or already closed


def resolve(host: str, port: int, deadline: _Deadline) -> list[tuple]:
    """The addresses of `host` (getaddrinfo), within the deadline: the lookup runs in a
    thread of its own, since a resolver that hangs cannot be interrupted."""
    out: dict = {}

    def lookup() -> None:
        try:
            out["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as e:
            out["error"] = e
    worker = threading.Thread(target=lookup, name="web_fetch dns", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline.left()))
    if worker.is_alive():
        raise TimeoutError
    if "error" in out:
        raise FetchError(f"{host}: the name does not resolve ({out['error']}).")
    return [(info[0], info[4]) for info in out["infos"]]


def _pinned(conn_cls):
    """A connection to the one address that was checked (never looked up again, so a
    name that rebinds between the check and the connect cannot slip through)."""
    class Pinned(conn_cls):
        def __init__(self, *args, address, deadline: _Deadline, **kwargs):
            super().__init__(*args, **kwargs)
            self.address = address
            self.deadline = deadline

        def connect(self):
            family, sockaddr = self.address
            sock = socket.socket(family, socket.SOCK_STREAM)
            self.deadline.watch(sock)
            sock.settimeout(max(0.01, self.deadline.left()))
            try:
                sock.connect(sockaddr)
            except BaseException:  # any: the socket is closed, then the error raised again
                sock.close()
                raise
            if isinstance(self, http.client.HTTPSConnection):
                # The handshake after the watchdog has the TLS socket: a trickled
                # handshake is cut at the deadline too.
                sock = self._context.wrap_socket(sock, server_hostname=self.host,
                                                 do_handshake_on_connect=False)
                self.deadline.watch(sock)
                sock.do_handshake()
            self.sock = sock
    return Pinned


_HTTP = _pinned(http.client.HTTPConnection)
_HTTPS = _pinned(http.client.HTTPSConnection)


@dataclass
class Page:
    url: str                # after redirects
    status: int
    content_type: str
    body: bytes
    truncated: bool         # the body was longer than the byte limit


def _address(host: str, port: int, deadline: _Deadline, allow_private: bool) -> tuple:
    """The address to connect to; refused, before any connection is tried, when the
    name leads to a loopback, private or link-local one. The refusal is the same
    whether or not something listens there: the model learns nothing of this network."""
    addresses = resolve(host, port, deadline)
    if not addresses:
        raise FetchError(f"{host}: the name does not resolve.")
    if not allow_private:
        for _, sockaddr in addresses:
            if not public_address(sockaddr[0]):
                raise FetchError(f"{host} is a private or loopback address ({sockaddr[0]}); "
                                 f"refused ([web] allow_private = true in agent.toml "
                                 f"allows it).")
    return addresses[0]


# A user name or password before the host (`scheme://user:pw@host`), as urlsplit reads it:
# everything up to the last @ before the path.
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?//)[^/?#]*@", re.DOTALL)


def fetch(url: str, *, timeout: float, max_bytes: int, allow_private: bool) -> Page:
    """GET `url` following at most MAX_REDIRECTS redirects, within the limits: one
    deadline of `timeout` seconds for all of it."""
    deadline = _Deadline(timeout)
    try:
        return _fetch(url, deadline, max_bytes=max_bytes, allow_private=allow_private)
    finally:
        deadline.cancel()


def _fetch(url: str, deadline: _Deadline, *, max_bytes: int, allow_private: bool) -> Page:
    timeout = deadline.seconds
    late = f"{url}: no answer within {timeout:g} s."
    seen = []
    for _ in range(MAX_REDIRECTS + 1):
        if _USERINFO.match(url):
            # Never echoed: the refusal goes into the transcript, the password would too.
            shown = _USERINFO.sub(r"\1***@", url)
            raise FetchError(f"{shown}: URLs with a user name or password are refused; give "
                             f"the address without them.")
        try:
            parts = urlsplit(url)
        except ValueError as e:
            raise FetchError(f"{url}: not a valid URL ({e}).") from None
        if parts.scheme not in ("http", "https"):
            raise FetchError(f"{url}: only http and https URLs can be fetched.")
        if not parts.hostname:
            raise FetchError(f"{url}: the URL has no host.")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise FetchError(f"{url}: the port is not a number from 0 to 65535.") from None
        if deadline.left() <= 0:
            raise FetchError(late)
        try:
            address = _address(parts.hostname, port, deadline, allow_private)
        except TimeoutError:
            raise FetchError(late) from None
        cls = _HTTPS if parts.scheme == "https" else _HTTP
        kwargs = {"context": ssl.create_default_context()} if parts.scheme == "https" else {}
        conn = cls(parts.hostname, port, timeout=max(0.01, deadline.left()), address=address,
                   deadline=deadline, **kwargs)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request("GET", path, headers={
                "User-Agent": USER_AGENT, "Accept": "text/html,text/plain,*/*;q=0.5",
                "Accept-Encoding": "identity", "Connection": "close"})
            resp = conn.getresponse()
            if deadline.expired:                 # cut while the headers came in
                raise FetchError(late)
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
                seen.append(url)
                url = urljoin(url, resp.getheader("Location"))
                conn.close()
                continue
            body, truncated = bytearray(), False
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if deadline.expired:
                    raise FetchError(f"{url}: the page took longer than {timeout:g} s to "
                                     f"arrive.")
                if not chunk:
                    break
                body += chunk
                if len(body) > max_bytes:
                    del body[max_bytes:]
                    truncated = True
                    break
            return Page(url, resp.status, resp.getheader("Content-Type") or "", bytes(body),
                        truncated)
        except FetchError:
            raise
        except (socket.timeout, TimeoutError):
            raise FetchError(late) from None
        except ssl.SSLError as e:
            if deadline.expired:
                raise FetchError(late) from None
            raise FetchError(f"{url}: TLS failed: {e.reason or e}.") from None
        except (OSError, http.client.HTTPException) as e:
            if deadline.expired:                 # the watchdog shut the socket
                raise FetchError(late) from None
            raise FetchError(f"{url}: could not fetch: {e}.") from None
        finally:
            conn.close()
    raise FetchError(f"{seen[0]}: more than {MAX_REDIRECTS} redirects; stopped at {url}.")


def readable(page: Page) -> tuple[str, str]:
    """(title, text) of a fetched page: main text of HTML, other text as it is."""
    ctype = page.content_type.split(";", 1)[0].strip().lower()
    charset = None
    for param in page.content_type.split(";")[1:]:
        k, _, v = param.partition("=")
        if k.strip().lower() == "charset":
            charset = v.strip().strip('"') or None
    looks_html = ctype in ("text/html", "application/xhtml+xml") or (
        not ctype and page.body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")))
    if looks_html:
        import trafilatura

        text = trafilatura.extract(page.body, url=page.url, output_format="markdown",
                                   include_links=True, include_tables=True, favor_recall=True)
        meta = trafilatura.extract_metadata(page.body)
        title = (meta.title if meta is not None and meta.title else "") or ""
        if not text:
            text = trafilatura.html2txt(page.body) or ""
        return title, text.strip()
    if ctype and not ctype.startswith(TEXT_TYPES):
        raise FetchError(f"{page.url} is {ctype}, not a text page; web_fetch reads text and "
                         f"HTML only.")
    try:
        return "", page.body.decode(charset or "utf-8")
    except (LookupError, UnicodeDecodeError):
        return "", page.body.decode("utf-8", "replace")


def web_unavailable(settings) -> str | None:
    if settings is not None and not settings.web_enabled:
        return "fetching pages is turned off ([web] enabled = false in agent.toml)"
    return None


@tool(available=web_unavailable)
def web_fetch(url: str, max_chars: int | None = None) -> str:
    """Fetch a web page (http or https) and return its main content as readable text.

    Args:
        url: The page's address, e.g. https://example.org/article.
        max_chars: The most characters of text to return (default 20000).
    """
    ctx = current_context()
    s = ctx.settings
    limit = DEFAULT_CHARS if max_chars is None else max_chars
    if not 0 < limit <= MOST_CHARS:
        raise ToolError(f"max_chars must be between 1 and {MOST_CHARS}, got {limit}.")
    page = fetch(url.strip(), timeout=float(s.web_timeout if s else 20),
                 max_bytes=int(s.web_max_bytes if s else 5_000_000),
                 allow_private=bool(s and s.web_allow_private))
    title, text = readable(page)
    head = [f"URL: {page.url}", f"Status: {page.status}"]
    if title:
        head.append(f"Title: {title}")
    if page.truncated:
        head.append("Note: the page was larger than the download limit; only its start was read.")
    if len(text) > limit:
        text = (text[:limit] + f"\n[... {len(text) - limit} more characters not shown; "
                f"ask with a larger max_chars to see more]")
    return "\n".join(head) + "\n\n" + (text or "(no readable text)")
