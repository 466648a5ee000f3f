"""OpenAI-compatible chat completions (OpenAI, Ollama, llama.cpp, vLLM, LM Studio,
OpenRouter): the only module that imports the `openai` SDK, at the first call, and the
only home of the chat-completions wire format.

The seam's records (agent/llm/records.py) become chat-completions messages here and the
reply comes back as records, so a session started with one provider continues with
another:

    Text / ToolCall blocks        <->  assistant content / tool_calls
    ToolResult blocks             <->  "tool" messages (before the user's own text)
    Request.schema                ->   response_format json_schema, else JSON mode
                                       (its bounds, maxLength and maxItems, to servers
                                       that make a grammar of it; not to OpenAI's own
                                       API, whose strict mode refuses them)
    Request.tool_choice (a name)  ->   "required" over that tool alone, and (but on
                                       OpenAI's own API) its arguments' schema as the
                                       response format: a reply of that JSON is the call

SDK objects and errors never leave this module.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from agent.llm.base import NotFound, Provider, ProviderError
from agent.llm.deadline import Closer, http_errors
from agent.llm.records import (END, MAX_TOKENS, REFUSAL, STOPPED, TOOL_CALLS, Block,
                               Interrupted, Opaque, Reply, Request, Stop, Text, Tool,
                               ToolCall, ToolResult, Usage)
from agent.llm.spec import ProviderSpec
from agent.llm.structured import BOUNDS, bounded, plain
from agent.fs import boundedjson

if TYPE_CHECKING:
    import openai

T = TypeVar("T")

# The seam's stop reason for a chat completion's finish_reason.
_STOP = {"stop": END, "tool_calls": TOOL_CALLS, "function_call": TOOL_CALLS,
         "length": MAX_TOKENS, "content_filter": REFUSAL}
# Errors after which another model (of another provider, say) may succeed: unknown
# model, rate limited after the SDK's retries, overloaded or unavailable.
_FALLBACK_STATUS = {404, 429, 502, 503, 529}
_ID = re.compile(r"[^A-Za-z0-9_-]")

JSON_ONLY = ("Answer with one JSON object and nothing else (no prose, no code fence). It "
             "must match this JSON schema:\n{schema}")


# ---- requests: records -> chat completions ---------------------------------------------


def _is_image(b: Block) -> bool:
    return isinstance(b, Opaque) and isinstance(b.data, dict) and b.data.get("type") == "image"


def _text_of(content: str | Sequence[Block]) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for b in content:
        if isinstance(b, Text):
            parts.append(b.text)
        elif _is_image(b):
            parts.append("[image]")
    return "\n".join(p for p in parts if p)


def _image_part(b: Opaque) -> dict[str, Any] | None:
    """An image a stored conversation holds (a base64 or URL source) as an image_url."""
    src = b.data.get("source") or {}
    if src.get("type") == "base64":
        return {"type": "image_url",
                "image_url": {"url": f"data:{src.get('media_type')};base64,{src.get('data')}"}}
    if src.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": src.get("url")}}
    return None


def _user(content: str | list[Block]) -> list[dict[str, Any]]:
    """A user message's blocks: its tool results first (each a "tool" message, which must
    follow the assistant's tool calls directly), then its text and images."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for b in content:
        if isinstance(b, ToolResult):
            text = _text_of(b.content)
            if b.is_error:
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": b.call_id, "content": text or "(empty)"})
        elif isinstance(b, Text) and b.text:
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, Opaque) and _is_image(b) and (part := _image_part(b)) is not None:
            parts.append(part)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)
                    if only_text else parts})
    return out


def _assistant(content: str | list[Block]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    text = "".join(b.text for b in content if isinstance(b, Text))
    calls = [{"id": b.id, "type": "function",
              "function": {"name": b.name,
                           "arguments": json.dumps(b.input or {}, ensure_ascii=False)}}
             for b in content if isinstance(b, ToolCall)]
    # null beside tool calls, as the API says; "" otherwise (some chat templates of the
    # compatible servers fail on a null without them).
    msg: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        msg["tool_calls"] = calls
    return msg


def messages_of(request: Request) -> list[dict[str, Any]]:
    """The chat-completions messages for a request's system and messages."""
    out = []
    system = _text_of(request.system)
    if system:
        out.append({"role": "system", "content": system})
    for m in request.messages:
        if m.role == "assistant":
            out.append(_assistant(m.content))
        else:
            out.extend(_user(m.content))
    return out


def _tool_choice(choice: str) -> str:
    # A named tool goes as "required" over a list of that tool alone (request_of): the
    # compatible servers know only the strings, and llama-server reads the object form
    # as "auto" (with a warning in its log), so the model could answer without the call.
    return choice if choice == "none" else "required"


def _openais_own(spec: ProviderSpec) -> bool:
    return (urlsplit(spec.url).hostname or "") == "api.openai.com"


def _max_tokens_field(spec: ProviderSpec) -> str:
    """OpenAI's own API wants max_completion_tokens for its newer models; the compatible
    servers know max_tokens."""
    return "max_completion_tokens" if _openais_own(spec) else "max_tokens"


def forced_tool(request: Request, spec: ProviderSpec) -> Tool | None:
    """The tool a request makes the model call, when this server is also asked for the
    call's arguments as structured output: llama-server's "required" lets the model
    write prose first and call the tool only after it (a grammar of any text, then the
    call), and a small model writes prose until max_tokens; the arguments' JSON schema
    as the response format leaves it no word but the call's (json_schema servers only;
    OpenAI's own API keeps a forced call to the call)."""
    choice = request.tool_choice
    if choice in (None, "required", "none") or request.schema is not None or _openais_own(spec):
        return None
    return next((t for t in request.tools if t.name == choice), None)


# The provider's sampling options (ProviderSpec.sampling): OpenAI's own, as fields;
# llama.cpp's server, vLLM and LM Studio's further ones, in the body beside them.
_SAMPLING = ("temperature", "top_p", "frequency_penalty", "presence_penalty")
_SAMPLING_EXTRA = ("top_k", "min_p", "repeat_penalty")


def request_of(model: str, request: Request, spec: ProviderSpec, structured: str,
               bounds: bool = True) -> dict[str, Any]:
    """The `chat.completions.create` arguments for a request. structured: "json_schema",
    "json_object" or "prompt", how a requested schema is enforced; bounds: False sends
    it without its bounds (agent.llm.structured), as OpenAI's own API always is."""
    req: dict[str, Any] = {"model": model, "messages": messages_of(request)}
    if request.max_tokens:
        req[_max_tokens_field(spec)] = request.max_tokens
    choice = request.tool_choice
    tools: list[dict[str, Any]] = [{"type": "function", "function": {
        "name": t.name, "description": t.description,
        "parameters": t.schema or {"type": "object", "properties": {}}}}
        for t in request.tools
        if choice in (None, "required", "none") or t.name == choice]
    if tools:
        req["tools"] = tools
        if choice:
            req["tool_choice"] = _tool_choice(choice)
    sampling = spec.sampling
    req.update({k: sampling[k] for k in _SAMPLING if sampling.get(k) is not None})
    extra = {k: sampling[k] for k in _SAMPLING_EXTRA if sampling.get(k) is not None}
    if extra:
        req["extra_body"] = extra
    forced = forced_tool(request, spec)
    if forced is not None and structured == "json_schema":
        req["response_format"] = {"type": "json_schema", "json_schema": {
            "name": forced.name, "schema": forced.schema or {"type": "object"}}}
    schema = request.schema
    if schema is not None and (not bounds or _openais_own(spec)):
        schema = plain(schema)
    if schema is not None:
        if structured == "json_schema":
            req["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "reply", "schema": schema, "strict": True}}
        else:
            if structured == "json_object":
                req["response_format"] = {"type": "json_object"}
            note = JSON_ONLY.format(schema=json.dumps(schema, ensure_ascii=False))
            msgs = req["messages"]
            if msgs and msgs[0]["role"] == "system":
                msgs[0] = {"role": "system", "content": f"{msgs[0]['content']}\n\n{note}"}
            else:
                msgs.insert(0, {"role": "system", "content": note})
    return req


# ---- replies: chat completions -> records ----------------------------------------------


def usage_of(usage: Any) -> Usage:
    """The seam's usage from a completion's (prompt tokens include the cached ones; the
    seam counts those apart)."""
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    return Usage(input_tokens=max(prompt - cached, 0), cache_read_input_tokens=cached,
                 output_tokens=int(getattr(usage, "completion_tokens", 0) or 0))


def _tool_call(n: int, call_id: str | None, name: str, arguments: str) -> ToolCall:
    try:
        args = boundedjson.loads(arguments) if arguments.strip() else {}
    except ValueError:
        args = None
    if not isinstance(args, dict):
        # A small model's broken JSON: the tool refuses it and the model sees why.
        args = {"unparsed_arguments": arguments}
    # Only these characters in an id: the session keeps one that every provider accepts.
    safe = _ID.sub("_", call_id or "")[:40] or f"call_{n}"
    return ToolCall(safe, name, args)


def _blocks(text: str, calls: Sequence[tuple[str | None, str, str]]) -> list[Block]:
    blocks: list[Block] = [Text(text)] if text else []
    blocks += [_tool_call(n, cid, name, args) for n, (cid, name, args) in enumerate(calls)]
    return blocks


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def as_call(reply: Reply, tool: Tool) -> Reply:
    """A forced call's reply (forced_tool): the server's own tool call when it made one,
    else its text, the arguments' JSON (llama-server may fence it), as the call."""
    if reply.tool_calls:
        return reply
    if reply.stop_reason == STOPPED:        # cut: half a call's arguments are no call
        return Reply([], reply.usage, reply.model, STOPPED)
    text = reply.text
    fenced = _FENCE.match(text)
    call = _tool_call(0, f"call_{uuid.uuid4().hex[:24]}", tool.name,
                      fenced.group(1) if fenced else text)
    return Reply([call], reply.usage, reply.model, TOOL_CALLS)


def message_of(completion: Any, model: str) -> Reply:
    choice = completion.choices[0] if completion.choices else None
    msg = getattr(choice, "message", None)
    calls = [(c.id, c.function.name, c.function.arguments or "")
             for c in (getattr(msg, "tool_calls", None) or []) if getattr(c, "function", None)]
    blocks = _blocks(getattr(msg, "content", None) or "", calls)
    finish = getattr(choice, "finish_reason", None) or ""
    stop = TOOL_CALLS if calls else _STOP.get(finish, END)
    return Reply(blocks, usage_of(completion.usage), model, stop)


class _Streamed:
    """What a stream said so far: text, tool calls by index, finish reason and usage."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, list[Any]] = {}
        self.finish: str | None = None
        self.usage: Any = None

    def take(self, chunk: Any, on_text: Callable[[str], None] | None) -> None:
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        for choice in chunk.choices or []:
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
                if on_text is not None:
                    on_text(delta.content)
            for c in (getattr(delta, "tool_calls", None) or []):
                slot = self.calls.setdefault(c.index if c.index is not None else len(self.calls),
                                             [None, "", ""])
                if c.id:
                    slot[0] = c.id
                if c.function is not None:
                    slot[1] += c.function.name or ""
                    slot[2] += c.function.arguments or ""
            if choice.finish_reason:
                self.finish = choice.finish_reason

    def message(self, model: str) -> Reply:
        calls = [(c[0], c[1], c[2]) for c in (self.calls[i] for i in sorted(self.calls))]
        stop = TOOL_CALLS if calls else _STOP.get(self.finish or "", END)
        return Reply(_blocks("".join(self.text), calls), usage_of(self.usage), model, stop)

    def stopped(self, model: str) -> Reply:
        """What had arrived when the caller stopped the stream (a tool call half written
        is no call)."""
        return Reply(_blocks("".join(self.text), []), usage_of(self.usage), model, STOPPED)


# ---- errors ---------------------------------------------------------------------------


def _detail(e: Any) -> str | None:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return getattr(e, "message", None) or None


def translate(e: "openai.APIError", spec: ProviderSpec) -> ProviderError:
    import openai

    where = f"{spec.name} ({spec.base_url or 'api.openai.com'})"
    if isinstance(e, openai.APITimeoutError):
        return ProviderError(f"The provider {where} did not answer in time (timeout).",
                             detail="timeout", fallback=True)
    if isinstance(e, openai.APIConnectionError):
        cause = str(e.__cause__ or e)
        return ProviderError(f"Could not reach the provider {where}: {cause}", detail=cause,
                             fallback=True)
    status = getattr(e, "status_code", None)
    detail = _detail(e) or str(e)
    if status in (401, 403):
        key = f"${spec.key_env}" if spec.key_env else "no key (key_env is empty)"
        text = (f"The provider {where} refused the key (HTTP {status}): {detail}. "
                f"Check {key}.")
    else:
        text = f"The provider {where} failed (HTTP {status}): {detail}"
    cls = NotFound if status == 404 else ProviderError
    return cls(text, status=status, kind=type(e).__name__, detail=detail,
               fallback=status in _FALLBACK_STATUS)


def _bounds_refused(e: ProviderError, request: Request) -> bool:
    """A refusal of a schema that names one of its bounds (a server whose strict mode
    takes the schema but not maxLength or maxItems)."""
    detail = e.detail or ""
    return (request.schema is not None and bounded(request.schema)
            and any(word in detail for word in BOUNDS))


def _schema_refused(e: ProviderError) -> bool:
    """A 400 (or 422/501) that names response_format: this server has no json_schema."""
    words = (e.detail or "").lower()
    return e.status in (400, 422, 500, 501) and any(
        w in words for w in ("response_format", "json_schema", "response format", "json schema",
                             "structured"))


# ---- the provider ---------------------------------------------------------------------


class OpenAIProvider(Provider):
    """Chat completions through the `openai` SDK, for one configured provider."""

    name = "openai"

    def __init__(self, spec: ProviderSpec, *, max_retries: int = 2,
                 timeout: float | None = None) -> None:
        self.spec = spec
        self._max_retries = max_retries
        self._timeout = timeout
        self._client: "openai.OpenAI | None" = None
        self._lock = threading.Lock()
        # How this server takes a schema, learnt at the first refusal (model -> way),
        # and the models that refused a schema's bounds.
        self._structured: dict[str, str] = {}
        self._unbounded: set[str] = set()

    @property
    def client(self) -> "openai.OpenAI":
        if self._client is None:
            with self._lock:
                if self._client is None:
                    key = self.spec.key()        # NoApiKey before the SDK loads
                    import openai

                    kwargs: dict[str, Any] = {"api_key": key or "none",
                                              "max_retries": self._max_retries}
                    if self.spec.base_url:
                        kwargs["base_url"] = self.spec.base_url
                    if self._timeout is not None:
                        kwargs["timeout"] = self._timeout
                    self._client = openai.OpenAI(**kwargs)
        return self._client

    def _call(self, fn: Callable[[], T]) -> T:
        import httpx
        import openai

        try:
            return fn()
        except openai.APIError as e:
            raise translate(e, self.spec) from e
        except httpx.HTTPError as e:     # the connection broke while a stream was read
            raise ProviderError(f"The connection to the provider {self.spec.name} "
                                f"({self.spec.url}) broke mid-reply: {e}", detail=str(e),
                                fallback=True) from e

    def _send(self, model: str, request: Request, go: Callable[[dict[str, Any]], Reply]) -> Reply:
        """go(arguments), stepping down from json_schema to JSON mode to a prompt when
        the server refuses a way of structured output (remembered for the next call)."""
        wanted = request.schema is not None or forced_tool(request, self.spec) is not None
        ways = ("json_schema", "json_object", "prompt")
        start = ways.index(self._structured.get(model, self.spec.structured))
        for way in ways[start:] if wanted else ways[:1]:
            for _ in range(2):
                try:
                    return go(request_of(model, request, self.spec, way,
                                         bounds=model not in self._unbounded))
                except ProviderError as e:
                    if not wanted or not _schema_refused(e):
                        raise
                    if way != "json_schema" or model in self._unbounded \
                            or not _bounds_refused(e, request):
                        if way == "prompt":
                            raise
                        break
                    self._unbounded.add(model)      # the same way, without the bounds
            self._structured[model] = ways[ways.index(way) + 1]
        raise AssertionError("unreachable")

    def stream(self, models: str | Sequence[str], request: Request, *,
               on_text: Callable[[str], None] | None = None) -> Reply:
        model = models if isinstance(models, str) else models[0]
        forced = forced_tool(request, self.spec)
        if forced is not None:
            # A call's arguments are not the reply's text: nothing to show as they come.
            return as_call(self._stream(model, request, None), forced)
        return self._stream(model, request, on_text)

    def _stream(self, model: str, request: Request,
                on_text: Callable[[str], None] | None) -> Reply:
        client = self.client

        def go(req: dict[str, Any]) -> Reply:
            def run() -> Reply:
                import openai

                got = _Streamed()
                stream = client.chat.completions.create(
                    **req, stream=True, stream_options={"include_usage": True})
                closer = Closer(request.deadline, stream.response)
                broken: tuple[type[BaseException], ...] = (openai.APIConnectionError,
                                                             *http_errors())
                try:
                    with closer:
                        for chunk in stream:
                            got.take(chunk, on_text)
                except Stop:
                    return got.stopped(model)
                except KeyboardInterrupt as e:
                    raise Interrupted("".join(got.text), usage_of(got.usage)) from e
                except broken:
                    if closer.fired.is_set():       # the deadline shut the connection
                        return got.stopped(model)
                    raise
                finally:
                    stream.close()
                if closer.fired.is_set() and got.finish is None:
                    # A body that runs to the connection's end ends cleanly when shut.
                    return got.stopped(model)
                return got.message(model)
            return self._call(run)
        return self._send(model, request, go)

    def create(self, models: str | Sequence[str], request: Request, *,
               parse: Any = None) -> Reply:
        client = self.client
        model = models if isinstance(models, str) else models[0]
        reply = self._send(model, request, lambda req: self._call(
            lambda: message_of(client.chat.completions.create(**req), model)))
        forced = forced_tool(request, self.spec)
        return reply if forced is None else as_call(reply, forced)

    def count_tokens(self, model: str, request: Request) -> int:
        from agent.llm.size import estimate_request
        return estimate_request(request)

    def list_models(self) -> list[str]:
        client = self.client
        return self._call(lambda: [m.id for m in client.models.list()])
