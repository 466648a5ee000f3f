#!/usr/bin/env python3
"""Slowloris: can the person still reach `agent serve`'s gateway while a crowd of slow
clients holds connections? In process, against a Gateway on 127.0.0.1 with the fake
Anthropic server (tests/fakeanthropic.py), in a fresh vault:

--crowd sockets connect and each sends one byte of a never-ending request every --drip
seconds (reconnecting when the gateway lets one go); meanwhile, once a second, the
person asks: GET /v1/health with the token over TCP, the same over the Unix socket, and
GET / of the web page with a logged-in cookie. Printed: how many of each were answered
200, and how many of the crowd's connections the gateway closed.

    python scripts/bench_slowloris.py [--crowd 200] [--drip 2] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("AGENT_EMBED", "off")

from fakeanthropic import FakeAnthropic

from agent.vault.repo import Vault
from agent.ops.vaults import LAYOUT


def ask(connect, request: bytes) -> int | None:
    try:
        with connect() as s:
            s.settimeout(10)
            s.sendall(request)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return None
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crowd", type=int, default=200)
    ap.add_argument("--drip", type=float, default=2.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, FakeAnthropic() as fake:
        os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="bench-key",
                          GIT_CEILING_DIRECTORIES=d)
        from test_conversations import router

        from agent.serve.gateway import Gateway

        Vault.init(Path(d) / "vault", LAYOUT)
        vault = Vault(Path(d) / "vault")
        conv = router(vault)
        gw = Gateway(vault, conv, port=0).start()
        tcp = lambda: socket.create_connection(("127.0.0.1", gw.port))
        unix = lambda: _unix(gw.socket)
        code = gw.web.login_url().split("code=")[1]
        with tcp() as s:
            s.sendall(f"GET /login?code={code} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
                      f"Connection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        cookie = re.search(rb"set-cookie: (agent_session_\d+=[^;]+)", data, re.IGNORECASE).group(1)
        end = time.monotonic() + args.seconds
        closed = [0]

        def slow() -> None:
            s = None
            while time.monotonic() < end:
                try:
                    if s is None:
                        s = tcp()
                        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    s.sendall(b"a")
                except OSError:
                    closed[0] += 1
                    s = None
                    continue
                time.sleep(args.drip)
            if s is not None:
                s.close()
        crowd = [threading.Thread(target=slow, daemon=True) for _ in range(args.crowd)]
        for t in crowd:
            t.start()
        health = (b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                  + f"Authorization: Bearer {gw.token}\r\n\r\n".encode())
        page = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nConnection: close\r\n"
                f"Cookie: {cookie.decode()}\r\n\r\n").encode()
        tally = {"api over TCP": [0, 0], "api over the Unix socket": [0, 0],
                 "logged-in page": [0, 0]}
        while time.monotonic() < end:
            for name, connect, request in (("api over TCP", tcp, health),
                                           ("api over the Unix socket", unix, health),
                                           ("logged-in page", tcp, page)):
                tally[name][1] += 1
                tally[name][0] += ask(connect, request) == 200
            time.sleep(1)
        for t in crowd:
            t.join(args.drip + 10)
        for name, (ok, asked) in tally.items():
            print(f"{name}: {ok} of {asked} answered 200")
        print(f"crowd of {args.crowd} dripping a byte every {args.drip:g} s for "
              f"{args.seconds:g} s: {closed[0]} of its connections closed by the gateway")
        gw.close(5)
        conv.drain(10)


def _unix(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


if __name__ == "__main__":
    main()
