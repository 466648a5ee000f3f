"""A git host on 127.0.0.1: git's own smart HTTP (`git http-backend`, as a web server
runs it as CGI) behind a small threaded HTTP server, with the faults a real host has.

    host = GitHttp(root).start()          # serves every bare repository under root
    url = host.url("vault.git")
    host.fault = "stall"                  # every request: read, then never answer
    host.fault = "drop"                   # every push: half its body read, then hung up
    host.fault = "drop-after"             # every push: applied, then hung up unanswered
    host.close()

Every request is recorded (method, path) in `host.requests`.
"""

from __future__ import annotations

import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):        # quiet: the test reads `requests`
        pass

    def do_GET(self):
        self._serve()

    def do_POST(self):
        self._serve()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _serve(self):
        host = self.server.host
        path, _, query = self.path.partition("?")
        host.requests.append((self.command, path))
        fault = host.fault
        if fault == "stall":
            host.stalled.set()
            host.release.wait(120)          # until the test ends: never an answer
            self.close_connection = True
            return
        pushing = self.command == "POST" and path.endswith("/git-receive-pack")
        if pushing and fault == "drop":
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n // 2)
            else:
                self.rfile.readline()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        body = self._body()
        env = {**os.environ,
               "GIT_PROJECT_ROOT": str(host.root), "GIT_HTTP_EXPORT_ALL": "1",
               "REQUEST_METHOD": self.command, "PATH_INFO": path, "QUERY_STRING": query,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
               "REMOTE_USER": "tester",
               "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.receivepack",
               "GIT_CONFIG_VALUE_0": "true"}
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        for k in list(env):
            if k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
                env.pop(k)
        p = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        if pushing and fault == "drop-after":  # applied on the host; the client never hears
            self.close_connection = True
            self.connection.shutdown(2)
            return
        head, _, out = p.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.split(b"\r\n"):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    host: "GitHttp"


class GitHttp:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.requests: list[tuple[str, str]] = []
        self.fault: str | None = None
        self.stalled = threading.Event()
        self.release = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.host = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> GitHttp:
        self._thread.start()
        return self

    def bare(self, name: str = "vault.git") -> Path:
        """An empty bare repository on the host, as a hosting service makes one."""
        path = self.root / name
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
        return path

    def url(self, name: str = "vault.git") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}"

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
