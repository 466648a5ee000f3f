"""`web_fetch` against a real HTTP server on 127.0.0.1: readable text, redirects,
limits, and loopback/private addresses refused unless `[web] allow_private = true`."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.chat.tools.registry import ToolContext, ToolError, use_context
from agent.chat.tools.web import public_address, web_fetch
from agent.config import load_settings
from agent.vault.staged import StagedVault
from fakeanthropic import reply, tool_use

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=timezone(timedelta(hours=1)))

ARTICLE = """<!doctype html><html><head><title>Kyoto in April</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a> | Subscribe to our newsletter</nav>
<div class="ad">BUY CHEAP FLIGHTS NOW</div>
<article><h1>Kyoto in April</h1>
<p>The cherry blossoms along the Philosopher's Path usually peak in the first week of April,
and the temples of Higashiyama are busiest in the mornings.</p>
<p>Book a ryokan at least three months ahead; the best ones fill by January.</p>
<ul><li>Visit Fushimi Inari at dawn.</li><li>Take the train to Arashiyama.</li></ul>
</article>
<footer>Copyright 2026 Travel Site. All rights reserved. Cookie settings.</footer>
</body></html>"""


class _Site(BaseHTTPRequestHandler):
    hits: list = []
    release = threading.Event()     # /slow answers only once the test lets it

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.hits.append(self.path)
        if self.path == "/article":
            self._send(200, "text/html; charset=utf-8", ARTICLE.encode())
        elif self.path.startswith("/hop/"):
            n = int(self.path.split("/")[2])
            self.send_response(302)
            self.send_header("Location", "/article" if n == 0 else f"/hop/{n - 1}")
            self.end_headers()
        elif self.path == "/loop":
            self.send_response(301)
            self.send_header("Location", "/loop")
            self.end_headers()
        elif self.path == "/big":
            self._send(200, "text/plain", b"x" * 3_000_000)
        elif self.path == "/image":
            self._send(200, "image/png", b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
        elif self.path == "/slow":
            _Site.release.wait(60)
            self._send(200, "text/plain", b"late")
        elif self.path == "/plain":
            self._send(200, "text/plain; charset=latin-1", "caf\xe9 au lait".encode("latin-1"))
        else:
            self._send(404, "text/plain", b"not found")

    def _send(self, status, ctype, body):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def site():
    _Site.hits = []
    _Site.release = threading.Event()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def set_web(vault, settings_text: str):
    toml = vault.root / "agent.toml"
    toml.write_text(toml.read_text().replace("allow_private = false\n", settings_text))
    return load_settings(vault.root)


@pytest.fixture
def fetch(vault):
    settings = set_web(vault, "allow_private = true\ntimeout = 2\nmax_bytes = 1000000\n")
    assert settings.web_allow_private and settings.web_timeout == 2

    def _fetch(url, max_chars=None):
        with use_context(ToolContext(StagedVault(vault), "cli/default", NOW, settings)):
            return web_fetch(url, max_chars)
    return _fetch


def test_an_article_comes_back_as_its_main_text(fetch, site):
    out = fetch(f"{site}/article")
    assert out.startswith(f"URL: {site}/article\nStatus: 200\nTitle: Kyoto in April\n")
    assert "cherry blossoms along the Philosopher's Path" in out
    assert "Book a ryokan at least three months ahead" in out
    assert "Fushimi Inari at dawn" in out
    assert "BUY CHEAP FLIGHTS" not in out and "Cookie settings" not in out


def test_redirects_are_followed_a_bounded_number_of_times(fetch, site):
    out = fetch(f"{site}/hop/3")
    assert out.startswith(f"URL: {site}/article\n") and "cherry blossoms" in out
    with pytest.raises(ToolError, match="more than 5 redirects"):
        fetch(f"{site}/loop")
    assert _Site.hits.count("/loop") == 6


def test_limits_on_size_time_and_characters(fetch, site):
    out = fetch(f"{site}/big", max_chars=1000)
    assert "only its start was read" in out
    assert "more characters not shown" in out and len(out) < 1400
    # /slow answers only when told to, after the fetch returned: a fetch that waited
    # for the answer instead of giving up at its deadline would hang here.
    with pytest.raises(ToolError, match="no answer within 2 s"):
        fetch(f"{site}/slow")
    _Site.release.set()
    assert _Site.hits.count("/slow") == 1
    with pytest.raises(ToolError, match="max_chars must be between"):
        fetch(f"{site}/article", max_chars=0)


def test_other_text_is_decoded_and_binaries_are_refused(fetch, site):
    assert fetch(f"{site}/plain").endswith("café au lait")
    with pytest.raises(ToolError, match="image/png, not a text page"):
        fetch(f"{site}/image")


def test_only_http_and_https(fetch, tmp_path):
    for url in ("file:///etc/passwd", "ftp://example.org/x", "gopher://x", "javascript:alert(1)"):
        with pytest.raises(ToolError, match="only http and https"):
            fetch(url)
    with pytest.raises(ToolError, match="user name or password"):
        fetch("http://user:pw@example.org/")


def test_loopback_and_private_addresses_are_refused_by_default(vault, site):
    settings = load_settings(vault.root)
    assert settings.web_allow_private is False
    with use_context(ToolContext(StagedVault(vault), "cli/default", NOW, settings)):
        for url in (f"{site}/article", site.replace("127.0.0.1", "localhost") + "/article",
                    f"http://[::ffff:127.0.0.1]:{site.rsplit(':', 1)[1]}/article"):
            with pytest.raises(ToolError, match="private or loopback address.*allow_private"):
                web_fetch(url)
    assert _Site.hits == []                     # refused before any request was sent
    for ip in ("10.0.0.1", "192.168.1.1", "172.16.0.1", "169.254.169.254", "::1", "fd00::1",
               "0.0.0.0", "100.64.0.1"):
        assert not public_address(ip), ip
    assert public_address("93.184.216.34") and public_address("2606:4700::1111")


def test_in_a_turn_the_model_gets_the_page(fake_anthropic, vault, run, site):
    set_web(vault, "allow_private = true\n")
    fake_anthropic.add(reply(tool_use("web_fetch", {"url": f"{site}/article"})),
                       reply("Peak bloom is early April."))
    r = run("chat", "-m", "when do the blossoms peak?")
    assert r.exit_code == 0, r.output
    result = fake_anthropic.calls()[1].body["messages"][-1]["content"][0]
    assert "is_error" not in result and "Philosopher's Path" in result["content"]
    assert {t["name"] for t in fake_anthropic.calls()[0].body["tools"]} >= {"web_fetch"}


# ---- one deadline, and nothing learnt of private ports -----------------------------------


class Trickler:
    """A raw server on 127.0.0.1 that answers a request one byte every 0.1 s: the status
    line, then header bytes (or, with `body`, whole headers and then the body), for at
    most `most` seconds."""

    def __init__(self, *, body: bool = False, most: float = 60.0):
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.body, self.most = body, most
        self.closed = threading.Event()          # the client hung up on us
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        conn, _ = self.sock.accept()
        conn.recv(65536)
        head = b"HTTP/1.1 200 OK\r\n"
        if self.body:
            head += b"Content-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
        end = time.monotonic() + self.most
        try:
            conn.sendall(head)
            while time.monotonic() < end:
                conn.sendall(b"x")
                time.sleep(0.1)         # a byte a tenth of a second: the slow server played
        except OSError:
            self.closed.set()
        finally:
            conn.close()

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("body", [False, True], ids=["headers", "body"])
def test_a_trickling_server_is_cut_off_at_the_one_deadline(vault, body):
    settings = set_web(vault, "allow_private = true\ntimeout = 1\n")
    trickler = Trickler(body=body)
    try:
        with use_context(ToolContext(StagedVault(vault), "cli/default", NOW, settings)):
            with pytest.raises(ToolError) as e:
                web_fetch(f"http://127.0.0.1:{trickler.port}/")
    finally:
        trickler.close()
    said = str(e.value)
    assert ("no answer within 1 s" in said) if not body else ("longer than 1 s" in said), said
    # The server would trickle for a minute; it saw the client hang up while it still
    # had more to send: the fetch was cut at its deadline, not at the server's end.
    assert trickler.closed.wait(30)


def test_a_private_port_open_or_closed_gives_the_model_the_same_answer(vault):
    import socket

    settings = load_settings(vault.root)
    assert settings.web_allow_private is False
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))                  # bound, not listening: connection refused
    said = []
    try:
        with use_context(ToolContext(StagedVault(vault), "cli/default", NOW, settings)):
            for port in (listener.getsockname()[1], closed.getsockname()[1]):
                for url in (f"http://127.0.0.1:{port}/", f"http://localhost:{port}/admin"):
                    with pytest.raises(ToolError) as e:
                        web_fetch(url)
                    said.append(str(e.value))
        with pytest.raises(socket.timeout):
            listener.accept()                      # nobody ever connected
    finally:
        listener.close()
        closed.close()
    assert said[0] == said[2] and said[1] == said[3], said
    assert "private or loopback address" in said[0] and "allow_private" in said[0]


def test_a_nul_path_and_a_url_with_a_password_are_clear_tool_errors(fake_anthropic, vault, run):
    # What the model sends is bad input, not a bug: one clear error each, nothing logged,
    # and the password is neither sent back to the model nor kept in the transcript.
    password = "hunter2-Xq9"
    fake_anthropic.add(reply(tool_use("read_file", {"path": "MEMORY.md\x00.png"}),
                             tool_use("web_fetch", {"url": f"http://ana:{password}@example.org/"}),
                             tool_use("web_fetch", {"url": "http://[::1/"})),
                       reply("Sorry."))
    r = run("chat", "-m", "look")
    assert r.exit_code == 0, r.output
    results = fake_anthropic.calls()[1].body["messages"][-1]["content"]
    assert [x["is_error"] for x in results] == [True, True, True]
    assert results[0]["content"].endswith(": a path cannot hold a NUL byte; give a path "
                                          "relative to the vault, for example MEMORY.md.")
    assert results[1]["content"] == ("http://***@example.org/: URLs with a user name or "
                                     "password are refused; give the address without them.")
    assert results[2]["content"] == "http://[::1/: not a valid URL (Invalid IPv6 URL)."
    assert not (vault.root / ".agent" / "logs" / "tools.log").exists()
    assert "Traceback" not in r.output
    assert password not in vault.git("log", "-p", "--all")
