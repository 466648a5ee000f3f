"""A fake Anthropic API on 127.0.0.1 that the real `anthropic` SDK talks to through
`base_url`: scripted like a queue of replies, recording every request.

Serves POST /v1/messages (plain JSON or SSE when `stream` is true),
POST /v1/messages/count_tokens and the Message Batches endpoints, with usage figures
that simulate the prompt cache so tests can assert that consecutive calls hit it.

    with FakeAnthropic() as server:
        server.add(reply(text("hi")), reply(tool_use("remember", {"text": "x"})))
        client = anthropic.Anthropic(api_key="k", base_url=server.url)

Tests use the `fake_anthropic` fixture (registered in conftest.py), which also sets
ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY. Scripts put this folder on sys.path and
import the module directly; it needs only the standard library (pytest is optional).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit, parse_qs

__all__ = [
    "FakeAnthropic", "Reply", "ErrorReply", "Recorded",
    "text", "tool_use", "reply", "json_reply", "error", "fake_anthropic",
]

_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):06d}"


# ---------------------------------------------------------------- reply builders

def text(s: str) -> dict:
    """A text content block."""
    return {"type": "text", "text": s}


def tool_use(name: str, input: dict | None = None, id: str | None = None) -> dict:
    """A tool_use content block (an id is made up when not given)."""
    return {"type": "tool_use", "id": id or _new_id("toolu"), "name": name, "input": dict(input or {})}


@dataclass
class Reply:
    """One scripted assistant message.

    delay: seconds to wait before answering at all.
    chunk_delay: when streamed, seconds to pause between SSE events (a slow stream, to
    interrupt mid-reply). chunk_size: characters per text/json delta (None: by word).
    then_error: when streamed, the content is sent and then this error arrives as an SSE
    `error` event (as the API does when overloaded mid-stream); not streamed, it is the answer.
    """
    content: list[dict]
    stop_reason: str | None = None
    usage: dict | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    chunk_size: int | None = None
    model: str | None = None
    then_error: "ErrorReply | None" = None

    def final_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.content) else "end_turn"


@dataclass
class ErrorReply:
    """An HTTP error in Anthropic's shape {"type":"error","error":{"type","message"}}."""
    status: int
    type: str
    message: str
    delay: float = 0.0
    headers: dict = field(default_factory=dict)

    def body(self) -> dict:
        return {"type": "error", "error": {"type": self.type, "message": self.message},
                "request_id": _new_id("req")}


def reply(*blocks: dict | str, stop_reason: str | None = None, usage: dict | None = None,
          delay: float = 0.0, chunk_delay: float = 0.0, chunk_size: int | None = None,
          model: str | None = None, then_error: "ErrorReply | None" = None) -> Reply:
    """An assistant message made of blocks (a bare string is a text block).

    stop_reason defaults to "tool_use" when a tool_use block is present, else "end_turn";
    usage entries given here replace the simulated figures."""
    content = [text(b) if isinstance(b, str) else dict(b) for b in blocks]
    return Reply(content, stop_reason=stop_reason, usage=usage, delay=delay,
                 chunk_delay=chunk_delay, chunk_size=chunk_size, model=model, then_error=then_error)


def json_reply(obj: Any, **kw) -> Reply:
    """A structured-output answer: one text block holding `obj` as JSON."""
    return reply(text(json.dumps(obj, ensure_ascii=False)), **kw)


_RETRYABLE = {408, 409, 429} | set(range(500, 600))


def error(status: int, type: str, message: str = "", *, delay: float = 0.0,
          retry_after_ms: float | None = 1, should_retry: bool | None = None) -> ErrorReply:
    """An API error, e.g. error(529, "overloaded_error"), error(400, "invalid_request_error", "...").

    Retryable statuses carry `retry-after-ms` (default 1 ms) so the SDK's retries are
    quick in tests; should_retry sets the SDK's `x-should-retry` header explicitly."""
    headers = {}
    if retry_after_ms is not None and status in _RETRYABLE:
        headers["retry-after-ms"] = str(retry_after_ms)
    if should_retry is not None:
        headers["x-should-retry"] = "true" if should_retry else "false"
    return ErrorReply(status, type, message or type.replace("_", " "), delay=delay, headers=headers)


def _coerce(item: Any) -> Any:
    if isinstance(item, str):
        return reply(item)
    if isinstance(item, dict):  # a bare content block
        return reply(item)
    if isinstance(item, (Reply, ErrorReply)) or callable(item):
        return item
    raise TypeError(f"not a scripted reply: {item!r}")


# ---------------------------------------------------------------- usage simulation

def _tokens(n_chars: int) -> int:
    return max(1, n_chars // 4)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _cache_units(body: dict) -> list[tuple[str, bool]]:
    """The request's cacheable units in cache order (tools, system, messages): each
    unit's identity (cache_control stripped, so a moved breakpoint keeps the prefix the
    same) and whether it carries a cache_control breakpoint."""
    units: list[tuple[str, bool]] = []

    def add(kind: str, block: Any) -> None:
        if isinstance(block, dict):
            marked = "cache_control" in block and block["cache_control"] is not None
            stripped = {k: v for k, v in block.items() if k != "cache_control"}
        else:
            marked, stripped = False, block
        units.append((_dumps([kind, stripped]), marked))

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    if isinstance(system, str):
        add("system", {"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add("system", block)
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content or []:
            add(msg.get("role", "?"), block)
    if body.get("cache_control") and units:
        # Top-level cache_control: automatic caching puts the breakpoint on the last block.
        units[-1] = (units[-1][0], True)
    return units


def _body_tokens(body: dict) -> int:
    return _tokens(len(_dumps({k: v for k, v in body.items() if k != "stream"})))


# ---------------------------------------------------------------- recorded requests

@dataclass
class Recorded:
    """One request the server received. `body` is the parsed JSON (None without a body)."""
    method: str
    path: str
    headers: dict
    body: Any
    query: dict = field(default_factory=dict)
    raw: bytes = field(default=b"", repr=False)   # the body's bytes, as sent
    status: int | None = None      # the status answered
    completed: bool = False        # False when the client hung up mid-answer (e.g. Ctrl-C;
                                   # best effort: a hang-up near the end may go unseen)
    finished: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    text_sent: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def json(self) -> Any:
        return self.body

    def wait_for_text(self, timeout: float = 60.0) -> "Recorded":
        """Block until the streamed answer has sent its first piece of text."""
        if not self.text_sent.wait(timeout):
            raise TimeoutError(f"fake Anthropic: no text streamed for {self.path} after {timeout}s")
        return self

    def wait(self, timeout: float = 60.0) -> "Recorded":
        """Block until the server has finished answering this request."""
        if not self.finished.wait(timeout):
            raise TimeoutError(f"fake Anthropic: {self.method} {self.path} still answering after {timeout}s")
        return self


class _QuietServer(ThreadingHTTPServer):
    """A client hanging up (a dropped keep-alive, a Ctrl-C) is normal here, not an error
    to print into the output the tests read."""

    def handle_error(self, request, client_address):
        import sys
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


# ---------------------------------------------------------------- batches

@dataclass
class Batch:
    id: str
    requests: list[dict]
    created_at: str
    expires_at: str
    status: str = "in_progress"
    polls: int = 0
    ended_at: str | None = None
    cancel_initiated_at: str | None = None
    results: list[dict] | None = None


def _iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------- the server

class FakeAnthropic:
    """The fake API. Attributes a test may set:

    batch_polls: retrieves a batch answers `in_progress` before it ends (default 1).
    batches_supported: False makes every batch endpoint answer 404 not_found_error.
    default_reply: used when the queue is empty (None: a 500 saying the script ran out).
    cache_min_tokens: prefixes shorter than this are never cached (default 0).
    models: the model ids GET /v1/models lists (and /v1/models/{id} finds).
    api_keys: when set, only these keys (x-api-key, or authorization: Bearer) are accepted
        (else 401 authentication_error).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[Any] = []
        self._batch_scripts: list[tuple[str, Any]] = []
        self._cache: set[str] = set()
        self.requests: list[Recorded] = []
        self.batches: dict[str, Batch] = {}
        self.batch_creates = 0
        self.batch_polls = 1
        self.batches_supported = True
        self.default_reply: Any = None
        self.cache_min_tokens = 0
        self.models: list[str] = ["claude-sonnet-5-5", "claude-sonnet-4-6", "claude-haiku-4-5"]
        self.api_keys: set[str] | None = None
        self.exhausted = 0  # times a request found the script empty
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> "FakeAnthropic":
        if self._httpd is not None:
            return self
        handler = type("Handler", (_Handler,), {"fake": self})
        httpd = _QuietServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="fake-anthropic",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None

    def __enter__(self) -> "FakeAnthropic":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL to give the SDK (or to set as ANTHROPIC_BASE_URL)."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # -- scripting

    def add(self, *replies: Any) -> "FakeAnthropic":
        """Queue replies, answered in order: Reply, ErrorReply, a string (a text reply),
        a content block, or a callable taking the request JSON and returning one of those."""
        with self._lock:
            self._queue.extend(_coerce(r) for r in replies)
        return self

    @property
    def pending(self) -> int:
        """Replies still queued."""
        with self._lock:
            return len(self._queue)

    def batch_result(self, custom_id_prefix: str, outcome: Any) -> "FakeAnthropic":
        """Script the result of the next batch request whose custom_id starts with the
        prefix (used once): a reply, an error(...) (-> errored), or "errored", "expired",
        "canceled"."""
        if not (isinstance(outcome, str) and outcome in ("errored", "expired", "canceled")):
            outcome = _coerce(outcome)
        with self._lock:
            self._batch_scripts.append((custom_id_prefix, outcome))
        return self

    # -- assertions

    def calls(self, path: str = "/v1/messages", method: str = "POST") -> list[Recorded]:
        """Recorded requests to one endpoint (default: message creation)."""
        with self._lock:
            return [r for r in self.requests if r.path == path and r.method == method]

    @property
    def last(self) -> Recorded:
        with self._lock:
            return self.requests[-1]

    def wait_for_requests(self, n: int, path: str | None = None, timeout: float = 60.0) -> list[Recorded]:
        """Block until at least n requests (to `path` if given) arrived; raise on timeout."""
        def matching():
            return [r for r in self.requests if path is None or r.path == path]
        with self._cond:
            if not self._cond.wait_for(lambda: len(matching()) >= n, timeout=timeout):
                raise TimeoutError(f"fake Anthropic: {len(matching())} of {n} requests after {timeout}s")
            return matching()

    # -- internals used by the handler

    def _record(self, rec: Recorded) -> None:
        with self._cond:
            self.requests.append(rec)
            self._cond.notify_all()

    def _next(self, request_json: dict) -> Any:
        with self._lock:
            if self._queue:
                item = self._queue.pop(0)
            elif self.default_reply is not None:
                item = _coerce(self.default_reply)
            else:
                self.exhausted += 1
                return error(500, "api_error",
                             "fake Anthropic: the test's script ran out of replies "
                             f"(request #{len(self.requests)}); add more with server.add(...)",
                             retry_after_ms=None, should_retry=False)
        while callable(item) and not isinstance(item, (Reply, ErrorReply)):
            item = _coerce(item(request_json))
        return item

    def usage_for(self, body: dict, output_tokens: int) -> dict:
        """Simulated usage of a request: the longest previously seen prefix ending at a
        block boundary up to the last cache breakpoint is read from cache, the rest of
        that prefix is written to it, the remainder is plain input."""
        units = _cache_units(body)
        total = _body_tokens(body)
        marks = [i for i, (_, marked) in enumerate(units) if marked]
        read = write = 0
        if marks:
            last = marks[-1]
            h = hashlib.sha256(_dumps(body.get("model")).encode())
            hashes, sizes, size = [], [], 0
            for ident, _ in units[: last + 1]:
                h.update(ident.encode())
                hashes.append(h.hexdigest())
                size += len(ident)
                sizes.append(size)
            with self._lock:
                hit = next((i for i in range(last, -1, -1) if hashes[i] in self._cache), None)
                prefix = _tokens(sizes[last])
                if prefix >= self.cache_min_tokens:
                    read = _tokens(sizes[hit]) if hit is not None else 0
                    write = prefix - read
                    for i in marks:
                        self._cache.add(hashes[i])
        total = max(total, read + write + 1)
        return {"input_tokens": total - read - write, "output_tokens": output_tokens,
                "cache_creation_input_tokens": write, "cache_read_input_tokens": read}

    def _message(self, r: Reply, body: dict, *, service_tier: str = "standard") -> dict:
        out = _tokens(len(_dumps(r.content)))
        usage = self.usage_for(body, out)
        usage["service_tier"] = service_tier
        usage.update(r.usage or {})
        return {"id": _new_id("msg"), "type": "message", "role": "assistant",
                "model": r.model or body.get("model") or "claude-fake",
                "content": [dict(b) for b in r.content],
                "stop_reason": r.final_stop_reason(), "stop_sequence": None, "usage": usage}

    # -- batches

    def _batch_json(self, b: Batch) -> dict:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if b.status == "ended":
            for res in b.results or []:
                counts[res["result"]["type"]] += 1
        else:
            counts["processing"] = len(b.requests)
        return {"id": b.id, "type": "message_batch", "processing_status": b.status,
                "request_counts": counts, "created_at": b.created_at, "expires_at": b.expires_at,
                "ended_at": b.ended_at, "cancel_initiated_at": b.cancel_initiated_at,
                "archived_at": None,
                "results_url": f"{self.url}/v1/messages/batches/{b.id}/results"
                if b.status == "ended" else None}

    def _end_batch(self, b: Batch) -> None:
        canceled = b.status == "canceling"
        results = []
        for req in b.requests:
            cid = req.get("custom_id", "")
            if canceled:
                results.append({"custom_id": cid, "result": {"type": "canceled"}})
                continue
            with self._lock:
                idx = next((i for i, (p, _) in enumerate(self._batch_scripts) if cid.startswith(p)), None)
                outcome = self._batch_scripts.pop(idx)[1] if idx is not None else None
            params = req.get("params") or {}
            if outcome is None:
                outcome = self._next(params)
            while callable(outcome) and not isinstance(outcome, (Reply, ErrorReply)):
                outcome = _coerce(outcome(params))
            if outcome in ("expired", "canceled"):
                result = {"type": outcome}
            elif outcome == "errored":
                result = {"type": "errored", "error": error(500, "api_error", "batch request failed").body()}
            elif isinstance(outcome, ErrorReply):
                result = {"type": "errored", "error": outcome.body()}
            else:
                result = {"type": "succeeded", "message": self._message(outcome, params, service_tier="batch")}
            results.append({"custom_id": cid, "result": result})
        b.results = results
        b.status = "ended"
        b.ended_at = _iso(datetime.now(timezone.utc))


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropic
    protocol_version = "HTTP/1.1"
    timeout = 60  # idle keep-alive connections give their thread back eventually

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    # -- plumbing

    def _read(self) -> Recorded:
        parts = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        rec = Recorded(self.command, parts.path, {k.lower(): v for k, v in self.headers.items()},
                       body, query=parse_qs(parts.query), raw=raw)
        self._rec = rec
        self.fake._record(rec)
        return rec

    def _send(self, rec: Recorded, status: int, payload: Any, *, headers: dict | None = None,
              content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        rec.status = status
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", _new_id("req"))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            rec.completed = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _error(self, rec: Recorded, e: ErrorReply) -> None:
        if e.delay:
            time.sleep(e.delay)         # a slow API, as the test scripted it
        self._send(rec, e.status, e.body(), headers=e.headers)

    def _not_found(self, rec: Recorded, what: str) -> None:
        self._error(rec, error(404, "not_found_error", what))

    # -- routing

    def handle_one_request(self) -> None:
        self._rec: Recorded | None = None
        try:
            super().handle_one_request()
        finally:
            if self._rec is not None:
                self._rec.finished.set()

    def _unauthorized(self, rec: Recorded) -> bool:
        bearer = rec.headers.get("authorization", "").removeprefix("Bearer ")
        key = rec.headers.get("x-api-key") or bearer
        if self.fake.api_keys is not None and key not in self.fake.api_keys:
            self._error(rec, error(401, "authentication_error", "invalid x-api-key"))
            return True
        return False

    def _models(self, rec: Recorded, model_id: str | None) -> None:
        def obj(m: str) -> dict:
            return {"type": "model", "id": m, "display_name": m, "created_at": "2026-01-01T00:00:00Z"}
        if model_id is None:
            data = [obj(m) for m in self.fake.models]
            return self._send(rec, 200, {"data": data, "has_more": False,
                                         "first_id": data[0]["id"] if data else None,
                                         "last_id": data[-1]["id"] if data else None})
        if model_id not in self.fake.models:
            return self._not_found(rec, f"model: {model_id}")
        self._send(rec, 200, obj(model_id))

    def do_GET(self) -> None:
        rec = self._read()
        if self._unauthorized(rec):
            return
        m = re.fullmatch(r"/v1/models(?:/([^/]+))?", rec.path)
        if m:
            return self._models(rec, m.group(1))
        m = re.fullmatch(r"/v1/messages/batches(?:/([^/]+)(/results)?)?", rec.path)
        if m:
            return self._batches(rec, m.group(1), m.group(2))
        self._not_found(rec, f"fake Anthropic: no route GET {rec.path}")

    def do_POST(self) -> None:
        rec = self._read()
        if self._unauthorized(rec):
            return
        if rec.path == "/v1/messages":
            return self._messages(rec)
        if rec.path == "/v1/messages/count_tokens":
            return self._send(rec, 200, {"input_tokens": _body_tokens(rec.body or {})})
        m = re.fullmatch(r"/v1/messages/batches(?:/([^/]+)/(cancel))?", rec.path)
        if m:
            return self._batches(rec, m.group(1), m.group(2))
        self._not_found(rec, f"fake Anthropic: no route POST {rec.path}")

    def do_DELETE(self) -> None:
        rec = self._read()
        m = re.fullmatch(r"/v1/messages/batches/([^/]+)", rec.path)
        if m:
            return self._batches(rec, m.group(1), "delete")
        self._not_found(rec, f"fake Anthropic: no route DELETE {rec.path}")

    # -- /v1/messages

    def _messages(self, rec: Recorded) -> None:
        body = rec.body if isinstance(rec.body, dict) else {}
        for key in ("model", "max_tokens", "messages"):
            if key not in body:
                return self._error(rec, error(400, "invalid_request_error", f"{key}: Field required"))
        item = self.fake._next(body)
        if isinstance(item, ErrorReply):
            return self._error(rec, item)
        if item.delay:
            time.sleep(item.delay)      # a slow API, as the test scripted it
        msg = self.fake._message(item, body)
        if item.then_error is not None and not body.get("stream"):
            return self._error(rec, item.then_error)
        if body.get("stream"):
            self._stream(rec, msg, item)
        else:
            self._send(rec, 200, msg)

    def _stream(self, rec: Recorded, msg: dict, r: Reply) -> None:
        rec.status = 200
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.send_header("request-id", _new_id("req"))
            self.end_headers()
            for i, (event, data) in enumerate(_sse_events(msg, r.chunk_size, r.then_error)):
                if i and r.chunk_delay:
                    time.sleep(r.chunk_delay)       # a reply streamed slowly, as scripted
                chunk = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                if data.get("delta", {}).get("type") == "text_delta":
                    rec.text_sent.set()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            rec.completed = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- /v1/messages/batches

    def _batches(self, rec: Recorded, batch_id: str | None, action: str | None) -> None:
        fake = self.fake
        if not fake.batches_supported:
            return self._not_found(rec, "fake Anthropic: Message Batches are not supported here")
        now = datetime.now(timezone.utc)
        with fake._lock:
            if batch_id is None and rec.method == "POST":
                requests = (rec.body or {}).get("requests") if isinstance(rec.body, dict) else None
                if not requests:
                    return self._error(rec, error(400, "invalid_request_error", "requests: Field required"))
                b = Batch(_new_id("msgbatch"), [dict(r) for r in requests], _iso(now), _iso(now + timedelta(hours=24)))
                fake.batches[b.id] = b
                fake.batch_creates += 1
                return self._send(rec, 200, fake._batch_json(b))
            if batch_id is None:  # list, newest first
                data = [fake._batch_json(b) for b in reversed(list(fake.batches.values()))]
                return self._send(rec, 200, {"data": data, "has_more": False,
                                             "first_id": data[0]["id"] if data else None,
                                             "last_id": data[-1]["id"] if data else None})
            b = fake.batches.get(batch_id)
            if b is None:
                return self._not_found(rec, f"fake Anthropic: no batch {batch_id}")
            if action == "cancel":
                if b.status == "in_progress":
                    b.status = "canceling"
                    b.cancel_initiated_at = _iso(now)
                return self._send(rec, 200, fake._batch_json(b))
            if action == "delete":
                if b.status != "ended":
                    return self._error(rec, error(400, "invalid_request_error",
                                                  "a batch must end before it can be deleted"))
                del fake.batches[batch_id]
                return self._send(rec, 200, {"id": batch_id, "type": "message_batch_deleted"})
            if action == "/results":
                if b.status != "ended":
                    return self._error(rec, error(400, "invalid_request_error",
                                                  f"batch {batch_id} has not ended yet"))
                lines = "".join(json.dumps(res) + "\n" for res in b.results or [])
                return self._send(rec, 200, lines.encode(), content_type="application/binary")
            # retrieve
            if b.status != "ended":
                b.polls += 1
                if b.status == "canceling" or b.polls > fake.batch_polls:
                    fake._end_batch(b)
            return self._send(rec, 200, fake._batch_json(b))


def _pieces(s: str, size: int | None) -> list[str]:
    if not s:
        return []
    if size:
        return [s[i:i + size] for i in range(0, len(s), size)]
    return re.findall(r"\S*\s*", s)[:-1] or [s]


def _sse_events(msg: dict, chunk_size: int | None, then_error: ErrorReply | None = None):
    """The SSE events of a streamed message, as the real API sends them."""
    usage = msg["usage"]
    start = dict(msg, content=[], stop_reason=None, stop_sequence=None,
                 usage=dict(usage, output_tokens=1))
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for i, block in enumerate(msg["content"]):
        kind = block.get("type")
        if kind == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            for piece in _pieces(block["text"], chunk_size):
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": piece}}
        elif kind == "tool_use":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": dict(block, input={})}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "input_json_delta", "partial_json": ""}}
            for piece in _pieces(json.dumps(block["input"]), chunk_size or 12):
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta", "partial_json": piece}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": block}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    if then_error is not None:
        yield "error", then_error.body()
        return
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                            "usage": {k: usage[k] for k in ("input_tokens", "output_tokens",
                                                            "cache_creation_input_tokens",
                                                            "cache_read_input_tokens")}}
    yield "message_stop", {"type": "message_stop"}


# ---------------------------------------------------------------- pytest fixture

try:
    import pytest
except ImportError:  # scripts may run without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture
    def fake_anthropic(monkeypatch):
        """A started FakeAnthropic; ANTHROPIC_BASE_URL points at it, ANTHROPIC_API_KEY is "test-key"."""
        with FakeAnthropic() as server:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
            yield server
