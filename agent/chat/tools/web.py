"""`web_fetch`: a web page as readable text.

Fetching is done here with http.client, not by the extraction library, so that every
limit is ours: http and https only; at most MAX_REDIRECTS redirects, each hop checked
again; the address actually connected to (after DNS, so a rebinding name cannot slip
through) must be public unless `[web] allow_private = true`; no proxy from the
environment; a time limit for the whole fetch and a byte limit on the body.

The page's main text is extracted with trafilatura (maintained, the best-scoring
open-source extractor in published main-text benchmarks, and it keeps headings, lists
and tables as Markdown); it is imported only when a page is fetched (about 0.45 s).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
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


def _checked(conn_cls):
    class Checked(conn_cls):
        allow_private = False

        def connect(self):
            super().connect()
            peer = self.sock.getpeername()[0]
            if not self.allow_private and not public_address(peer):
                self.sock.close()
                raise FetchError(f"{self.host} is a private or loopback address ({peer}); "
                                 f"refused ([web] allow_private = true in agent.toml allows it).")
    return Checked


_HTTP = _checked(http.client.HTTPConnection)
_HTTPS = _checked(http.client.HTTPSConnection)


@dataclass
class Page:
    url: str                # after redirects
    status: int
    content_type: str
    body: bytes
    truncated: bool         # the body was longer than the byte limit


def fetch(url: str, *, timeout: float, max_bytes: int, allow_private: bool) -> Page:
    """GET `url` following at most MAX_REDIRECTS redirects, within the limits."""
    deadline = time.monotonic() + timeout
    seen = []
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise FetchError(f"{url}: only http and https URLs can be fetched.")
        if not parts.hostname:
            raise FetchError(f"{url}: the URL has no host.")
        if parts.username or parts.password:
            raise FetchError(f"{url}: URLs with a user name or password are refused.")
        left = deadline - time.monotonic()
        if left <= 0:
            raise FetchError(f"{url}: no answer within {timeout:g} s.")
        cls = _HTTPS if parts.scheme == "https" else _HTTP
        kwargs = {"context": ssl.create_default_context()} if parts.scheme == "https" else {}
        conn = cls(parts.hostname, parts.port, timeout=left, **kwargs)
        conn.allow_private = allow_private
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request("GET", path, headers={
                "User-Agent": USER_AGENT, "Accept": "text/html,text/plain,*/*;q=0.5",
                "Accept-Encoding": "identity", "Connection": "close"})
            resp = conn.getresponse()
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
                seen.append(url)
                url = urljoin(url, resp.getheader("Location"))
                conn.close()
                continue
            body, truncated = bytearray(), False
            while True:
                if time.monotonic() > deadline:
                    raise FetchError(f"{url}: the page took longer than {timeout:g} s to arrive.")
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
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
            raise FetchError(f"{url}: no answer within {timeout:g} s.") from None
        except ssl.SSLError as e:
            raise FetchError(f"{url}: TLS failed: {e.reason or e}.") from None
        except (OSError, http.client.HTTPException) as e:
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
