"""The gateway against clients that play for time (agent/serve/httpd.py): a request must
arrive whole within its deadline however its bytes are spread, a crowd of slow
connections from one address gives way to the next client, and neither the Unix socket
nor a logged-in page can be starved from TCP. Missing static files are 404.

Raw sockets on 127.0.0.1 (and 127.0.0.2-4, loopback on Linux, for other addresses); every
loop is bounded, and what is asserted is what the server answered or that it closed."""

from __future__ import annotations

import re
import select
import socket
import sys

import pytest
from helpers import answer, router

from agent.serve.gateway import MAX_CONNECTIONS, MAX_PER_ADDRESS, Gateway

HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"


@pytest.fixture
def make_gateway(vault, fake_anthropic):
    made = []

    def make(**kw):
        conv = router(vault)
        gw = Gateway(vault, conv, port=0, **kw).start()
        made.append((conv, gw))
        return gw
    yield make
    for conv, gw in made:
        gw.close(5)
        conv.drain(10)


def connect(gw, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(30)
    s.bind((source, 0))
    s.connect(("127.0.0.1", gw.port))
    return s


def unix(gw) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(gw.socket)
    return s


def status(data: bytes) -> int | None:
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None


def ask(s: socket.socket, head: bytes, body: bytes = b"") -> int | None:
    s.sendall(head + b"\r\n" + body)
    with s:
        return status(answer(s))


def authorized(gw) -> bytes:
    return HEALTH + f"Authorization: Bearer {gw.token}\r\n".encode()


def trickle(s: socket.socket, data: bytes, pause: float) -> bool:
    """Send `data` a byte at a time, `pause` s apart, while the server keeps the
    connection: True when the server closed it before all of it was sent."""
    for i in range(len(data)):
        try:
            s.send(data[i:i + 1])
        except (BrokenPipeError, ConnectionResetError):
            return True
        readable, _, _ = select.select([s], [], [], pause)
        if readable:                                    # an answer or the close
            return answer(s) == b""
    return False


@pytest.mark.parametrize("part", ["headers", "body"])
def test_slow_bytes_cannot_stretch_a_request_past_its_deadline(make_gateway, part):
    # One byte every quarter of the deadline would keep a per-byte timer alive for
    # ever; the request had one deadline from its first byte, and is closed unanswered.
    gw = make_gateway(timeout=1)
    slow = HEALTH + b"X-Pad: " + b"a" * 400 + b"\r\n"        # 100 deadlines long
    if part == "body":
        head = (b"POST /v1/sessions/gateway/x/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: Bearer {gw.token}\r\n".encode()
                + b"Content-Length: 400\r\n\r\n")
        s = connect(gw)
        s.sendall(head)
        slow = b"a" * 400
    else:
        s = connect(gw)
    with s:
        assert trickle(s, slow, 0.25) is True
    assert not (gw.vault.root / "sessions" / "gateway").exists()
    assert ask(connect(gw), authorized(gw)) == 200          # and it serves the next


def test_a_connection_that_never_sends_is_closed(make_gateway):
    gw = make_gateway(timeout=1)
    with connect(gw) as s:
        assert answer(s) == b""


def _crowd(gw, n: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """`n` connections that each sent half a request and wait (a slowloris crowd)."""
    crowd = []
    for _ in range(n):
        s = connect(gw, source)
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        crowd.append(s)
    return crowd


def _closed(s: socket.socket) -> bool:
    readable, _, _ = select.select([s], [], [], 0)
    return bool(readable) and answer(s) == b""


def test_a_crowd_of_slow_clients_does_not_keep_out_the_api_or_the_unix_socket(make_gateway):
    gw = make_gateway()                     # 30 s deadlines: the crowd outlives the test
    crowd = _crowd(gw, MAX_CONNECTIONS + 40)
    try:
        assert ask(connect(gw), authorized(gw)) == 200
        assert ask(unix(gw), authorized(gw)) == 200
        assert ask(connect(gw), HEALTH) == 401          # a stranger is answered too
        # The oldest of the crowd were let go; at most MAX_PER_ADDRESS from it wait.
        assert _closed(crowd[0])
        assert sum(not _closed(s) for s in crowd) <= MAX_PER_ADDRESS
    finally:
        for s in crowd:
            s.close()


def test_one_address_cannot_take_the_places_of_another(make_gateway):
    gw = make_gateway()
    if sys.platform != "linux":
        pytest.skip("127.0.0.2 is a loopback address on Linux only")
    other = connect(gw, "127.0.0.3")
    other.sendall(HEALTH[:20])                          # half a request, from elsewhere
    crowd = _crowd(gw, MAX_CONNECTIONS + 40, "127.0.0.2")
    try:
        assert ask(connect(gw, "127.0.0.4"), HEALTH) == 401
        assert ask(other, HEALTH[20:]) == 401           # its place was kept
    finally:
        for s in crowd:
            s.close()


def _login(gw) -> str:
    url = gw.web.login_url()
    path = url[len(gw.url):]
    with connect(gw) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
                  f"Connection: close\r\n\r\n".encode())
        data = answer(s)
    assert status(data) == 303
    return re.search(rb"set-cookie: (agent_session_\d+=[^;]+)", data, re.IGNORECASE).group(1).decode()


def _page(gw, cookie: str, close: bool = True) -> bytes:
    return (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nCookie: {cookie}\r\n"
            + ("Connection: close\r\n" if close else "")).encode()


def _one_answer(s: socket.socket) -> int | None:
    """The status of one answer on a kept-alive connection (read to its end)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1))
    while len(body) < length:
        body += s.recv(65536)
    return status(head)


def test_a_logged_in_page_is_served_through_a_crowd(make_gateway):
    gw = make_gateway()
    cookie = _login(gw)
    kept = connect(gw)                                  # the page's kept-alive connection
    kept.sendall(_page(gw, cookie, close=False) + b"\r\n")
    assert _one_answer(kept) == 200
    crowd = _crowd(gw, MAX_CONNECTIONS + 40)
    try:
        kept.sendall(_page(gw, cookie, close=False) + b"\r\n")
        assert _one_answer(kept) == 200                 # never let go for a stranger
        assert ask(connect(gw), _page(gw, cookie)) == 200       # and a new one gets in
        more = _crowd(gw, MAX_CONNECTIONS + 40)
        crowd += more
        kept.sendall(_page(gw, cookie, close=False) + b"\r\n")
        assert _one_answer(kept) == 200
    finally:
        kept.close()
        for s in crowd:
            s.close()


@pytest.mark.parametrize("path", ["/static/nothing.css", "/static/../x",
                                  "/static/%2e%2e/agent.toml", "/static/"])
def test_a_missing_static_file_is_404(make_gateway, path):
    gw = make_gateway()
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nConnection: close\r\n"
    assert ask(connect(gw), head.encode()) == 404
