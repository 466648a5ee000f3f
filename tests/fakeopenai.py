"""A stand-in OpenAI-compatible server (as Ollama, llama.cpp or vLLM serve) on 127.0.0.1
that the real `openai` SDK talks to through `base_url`: scripted like a queue of replies,
recording every request.

Serves POST /v1/chat/completions (plain JSON, or SSE with `stream: true`, usage in the
last chunk when `stream_options.include_usage`) and GET /v1/models.

    with FakeOpenAI() as server:
        server.add(reply("hi"), reply(call("remember", {"text": "x"})), error(503))
        client = openai.OpenAI(api_key="none", base_url=server.url)

Tests use the `fake_openai` fixture (registered in conftest.py). Scripts import the
module directly; it needs only the standard library.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Reply", "ErrorReply", "Recorded", "reply", "call", "json_reply",
           "error", "fake_openai"]

_ids = itertools.count(1)


def call(name: str, arguments: dict | str | None = None, id: str | None = None) -> dict:
    """A tool call (arguments as a dict, or a raw string such as broken JSON)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": id or f"call_fake{next(_ids):05d}", "type": "function",
            "function": {"name": name, "arguments": args}}


@dataclass
class Reply:
    """One scripted assistant message: text and tool calls. hold: an Event the server
    waits on before answering (a slow model, to kill a client mid-request). Streamed:
    `chunk_delay` seconds between pieces of text (a slow model), and `endless` repeats the
    text until the client goes away (a model that never stops; `fake.abandoned` counts
    the streams a client closed before their end); `silent` sends the text, then nothing
    until the client goes away (llama-server holding back a tool call it cannot parse)."""
    content: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict | None = None
    hold: threading.Event | None = None
    chunk_delay: float = 0.0
    endless: bool = False
    silent: bool = False

    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


@dataclass
class ErrorReply:
    """An HTTP error in OpenAI's shape {"error": {"message", "type", "code"}}."""
    status: int
    message: str
    type: str = "error"


def reply(*parts: str | dict, finish_reason: str | None = None, usage: dict | None = None,
          hold: threading.Event | None = None, chunk_delay: float = 0.0,
          endless: bool = False, silent: bool = False) -> Reply:
    """A message of text (str) and tool calls (dicts made by `call`)."""
    return Reply("".join(p for p in parts if isinstance(p, str)),
                 [p for p in parts if isinstance(p, dict)], finish_reason, usage, hold,
                 chunk_delay, endless, silent)


def json_reply(obj: Any, **kw) -> Reply:
    return reply(json.dumps(obj, ensure_ascii=False), **kw)


def error(status: int, message: str = "", type: str = "error") -> ErrorReply:
    return ErrorReply(status, message or f"error {status}", type)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict
    body: Any
    raw: bytes = field(default=b"", repr=False)   # the body's bytes, as sent


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        import sys
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class FakeOpenAI:
    """The stand-in server. Attributes a test may set:

    models: the ids GET /v1/models lists.
    api_key: when set, only `Authorization: Bearer <api_key>` is accepted (else 401).
    json_schema: False answers a request with response_format json_schema by a 400
        naming it, as servers without structured output do.
    bounds: False answers a json_schema that holds maxLength or maxItems by a 400
        naming the keyword, as OpenAI's strict mode does.
    default_reply: answers when the queue is empty (None: a 500 saying it ran out).
    any_model: True answers a request for any model, listed or not, as llama-server
        (one model, whatever name a request gives) does; False answers 404 to a model
        it does not list, as Ollama does.
    """

    def __init__(self) -> None:
        self.models: list[str] = ["qwen3:8b", "llama3.2"]
        self.api_key: str | None = None
        self.json_schema = True
        self.bounds = True
        self.any_model = False
        self.abandoned = 0
        self.default_reply: Reply | None = None
        self.requests: list[Recorded] = []
        self._queue: deque = deque()
        self._lock = threading.Lock()
        self._server: _Quiet | None = None

    # -- life

    def start(self) -> "FakeOpenAI":
        self._server = _Quiet(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # -- script and record

    def add(self, *replies: Reply | ErrorReply | str) -> "FakeOpenAI":
        with self._lock:
            self._queue.extend(reply(r) if isinstance(r, str) else r for r in replies)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def calls(self, path: str = "/v1/chat/completions") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _next(self) -> Reply | ErrorReply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.default_reply or ErrorReply(500, "fake OpenAI: the script ran out")


def _usage(body: dict, r: Reply) -> dict:
    if r.usage is not None:
        return r.usage
    sent = {k: body.get(k) for k in ("messages", "tools", "response_format") if body.get(k)}
    prompt = max(1, len(json.dumps(sent, ensure_ascii=False)) // 4)
    out = max(1, (len(r.content) + len(json.dumps(r.tool_calls))) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out,
            "prompt_tokens_details": {"cached_tokens": 0}}


def _handler(fake: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> Recorded:
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            rec = Recorded(self.command, self.path.split("?")[0],
                           {k.lower(): v for k, v in self.headers.items()},
                           json.loads(raw) if raw else None, raw)
            with fake._lock:
                fake.requests.append(rec)
            return rec

        def _refused_key(self) -> bool:
            if fake.api_key is None:
                return False
            if self.headers.get("authorization") == f"Bearer {fake.api_key}":
                return False
            self._send(401, {"error": {"message": "Incorrect API key provided",
                                       "type": "invalid_request_error",
                                       "code": "invalid_api_key"}})
            return True

        def do_GET(self) -> None:
            self._record()
            if self._refused_key():
                return
            if self.path.split("?")[0] == "/v1/models":
                self._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                    for m in fake.models]})
            else:
                self._send(404, {"error": {"message": "not found", "type": "not_found"}})

        def do_POST(self) -> None:
            rec = self._record()
            if self._refused_key():
                return
            if rec.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": "not found", "type": "not_found"}})
                return
            body = rec.body or {}
            fmt = (body.get("response_format") or {}).get("type")
            if fmt == "json_schema" and not fake.json_schema:
                self._send(400, {"error": {"message": "response_format json_schema is not "
                                                      "supported", "type": "invalid_request_error"}})
                return
            sent = json.dumps(body.get("response_format") or {})
            word = next((w for w in ("maxLength", "maxItems") if f'"{w}"' in sent), None)
            if fmt == "json_schema" and not fake.bounds and word:
                self._send(400, {"error": {"message": f"Invalid schema for response_format "
                                                      f"'reply': '{word}' is not permitted.",
                                           "type": "invalid_request_error"}})
                return
            if body.get("model") not in fake.models and not fake.any_model:
                self._send(404, {"error": {"message": f"model \"{body.get('model')}\" not "
                                                      f"found, try pulling it first",
                                           "type": "not_found_error"}})
                return
            r = fake._next()
            if isinstance(r, ErrorReply):
                self._send(r.status, {"error": {"message": r.message, "type": r.type}})
                return
            if r.hold is not None:
                r.hold.wait(60)
            if body.get("stream"):
                self._stream(body, r)
            else:
                self._send(200, self._completion(body, r))

        def _completion(self, body: dict, r: Reply) -> dict:
            msg: dict[str, Any] = {"role": "assistant", "content": r.content or None}
            if r.tool_calls:
                msg["tool_calls"] = r.tool_calls
            return {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model"), "usage": _usage(body, r),
                    "choices": [{"index": 0, "message": msg, "finish_reason": r.finish()}]}

        def _stream(self, body: dict, r: Reply) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            base = {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion.chunk",
                    "created": 0, "model": body.get("model")}

            def event(choices: list, **extra) -> None:
                line = json.dumps({**base, "choices": choices, **extra})
                self.wfile.write(f"data: {line}\n\n".encode())
                self.wfile.flush()

            event([{"index": 0, "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None}])
            words = r.content.split(" ") if r.content else []
            # Endless, but not forever: a client that never stops it fails its test
            # rather than hang it.
            until, sent = time.monotonic() + 30, 0
            try:
                while True:
                    for n, word in enumerate(words):
                        sent += 1
                        piece = word if n == len(words) - 1 and not r.endless else word + " "
                        if r.chunk_delay:
                            time.sleep(r.chunk_delay)
                        event([{"index": 0, "delta": {"content": piece},
                                "finish_reason": None}])
                    if not r.endless or sent > 50_000 or time.monotonic() > until:
                        break
                if r.silent:
                    self._silent_until_gone(until)
            except (BrokenPipeError, ConnectionResetError):
                with fake._lock:
                    fake.abandoned += 1
                self.close_connection = True
                return
            for i, c in enumerate(r.tool_calls):
                args = c["function"]["arguments"]
                half = len(args) // 2
                event([{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "id": c["id"], "type": "function",
                     "function": {"name": c["function"]["name"], "arguments": args[:half]}}]},
                    "finish_reason": None}])
                event([{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": args[half:]}}]},
                    "finish_reason": None}])
            event([{"index": 0, "delta": {}, "finish_reason": r.finish()}])
            if (body.get("stream_options") or {}).get("include_usage"):
                event([], usage=_usage(body, r))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _silent_until_gone(self, until: float) -> None:
            """Send nothing until the client shuts the connection (raised as a reset,
            counted abandoned) or `until` passes (the reply then goes on and ends)."""
            while time.monotonic() < until:
                ready, _, _ = select.select([self.connection], [], [], 0.05)
                if ready and not self.connection.recv(1, socket.MSG_PEEK):
                    raise ConnectionResetError("the client went away")

    return Handler


try:
    import pytest
except ImportError:  # scripts may run without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture
    def fake_openai():
        """A started FakeOpenAI (no key needed, as a local server)."""
        with FakeOpenAI() as server:
            yield server
