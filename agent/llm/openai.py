"""OpenAI-compatible chat completions (OpenAI, Ollama, llama.cpp, vLLM, LM Studio,
OpenRouter): the only module that imports the `openai` SDK, at the first call.

The seam speaks the Anthropic Messages format (the one the session files store); this
module translates a request into chat completions and the reply back into content
blocks, so a session started with one provider continues with another:

    text / tool_use blocks        <->  assistant content / tool_calls
    tool_result blocks            <->  "tool" messages (before the user's own text)
    output_config json_schema     ->   response_format json_schema, else JSON mode

SDK objects and errors never leave this module.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from agent.llm.base import Message, NotFound, Provider, ProviderError, usage_dict
from agent.llm.spec import ProviderSpec

if TYPE_CHECKING:
    import openai

T = TypeVar("T")

# stop_reason in the Messages API's words for a chat completion's finish_reason.
_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use",
         "length": "max_tokens", "content_filter": "refusal"}
# Errors after which another model (of another provider, say) may succeed: unknown
# model, rate limited after the SDK's retries, overloaded or unavailable.
_FALLBACK_STATUS = {404, 429, 502, 503, 529}
_ID = re.compile(r"[^A-Za-z0-9_-]")

JSON_ONLY = ("Answer with one JSON object and nothing else (no prose, no code fence). It "
             "must match this JSON schema:\n{schema}")


# ---- requests: Messages format -> chat completions -------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for b in content or []:
        if b.get("type") == "text":
            parts.append(b.get("text", ""))
        elif b.get("type") == "image":
            parts.append("[image]")
    return "\n".join(p for p in parts if p)


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    src = block.get("source") or {}
    if src.get("type") == "base64":
        return {"type": "image_url",
                "image_url": {"url": f"data:{src.get('media_type')};base64,{src.get('data')}"}}
    if src.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": src.get("url")}}
    return None


def _user(content: Any) -> list[dict[str, Any]]:
    """A user message's blocks: its tool results first (each a "tool" message, which must
    follow the assistant's tool calls directly), then its text and images."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out, parts = [], []
    for b in content:
        kind = b.get("type")
        if kind == "tool_result":
            text = _text_of(b.get("content", ""))
            if b.get("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": b.get("tool_use_id", ""),
                        "content": text or "(empty)"})
        elif kind == "text" and b.get("text"):
            parts.append({"type": "text", "text": b["text"]})
        elif kind == "image" and (part := _image_part(b)) is not None:
            parts.append(part)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)
                    if only_text else parts})
    return out


def _assistant(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"],
                           "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)}}
             for b in content if b.get("type") == "tool_use"]
    # null beside tool calls, as the API says; "" otherwise (some chat templates of the
    # compatible servers fail on a null without them).
    msg: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        msg["tool_calls"] = calls
    return msg


def messages_of(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat-completions messages for Messages-API `system` and `messages`."""
    out = []
    system = _text_of(params.get("system") or "")
    if system:
        out.append({"role": "system", "content": system})
    for m in params.get("messages") or []:
        if m.get("role") == "assistant":
            out.append(_assistant(m.get("content")))
        else:
            out.extend(_user(m.get("content")))
    return out


def _tool_choice(choice: dict[str, Any]) -> Any:
    # A named tool goes as "required" over a list of that tool alone (request_of): the
    # compatible servers know only the strings, and llama-server reads the object form
    # as "auto" (with a warning in its log), so the model could answer without the call.
    kind = choice.get("type")
    return {"any": "required", "tool": "required", "none": "none"}.get(str(kind), "auto")


def request_of(model: str, params: dict[str, Any], spec: ProviderSpec, structured: str) -> dict[str, Any]:
    """The `chat.completions.create` arguments for Messages-API `params`. structured:
    "json_schema", "json_object" or "prompt", how a requested schema is enforced."""
    req: dict[str, Any] = {"model": model, "messages": messages_of(params)}
    if params.get("max_tokens"):
        req[spec.max_tokens_field] = params["max_tokens"]
    tools: list[dict[str, Any]] = [{"type": "function", "function": {
        "name": t["name"], "description": t.get("description", ""),
        "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}}
        for t in params.get("tools") or [] if t.get("type", "custom") == "custom"]
    choice = params.get("tool_choice") or {}
    if choice.get("type") == "tool":
        tools = [t for t in tools if t["function"]["name"] == choice.get("name")]
    if tools:
        req["tools"] = tools
        if choice:
            req["tool_choice"] = _tool_choice(choice)
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"),
                         ("stop_sequences", "stop"), ("frequency_penalty", "frequency_penalty"),
                         ("presence_penalty", "presence_penalty")):
        if params.get(ours) is not None:
            req[theirs] = params[ours]
    # Not in OpenAI's API, taken by llama.cpp's server, vLLM and LM Studio: in the body.
    extra = {k: params[k] for k in ("top_k", "min_p", "repeat_penalty") if params.get(k) is not None}
    if extra:
        req["extra_body"] = extra
    schema = ((params.get("output_config") or {}).get("format") or {}).get("schema")
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


# ---- replies: chat completions -> Messages format --------------------------------------


def usage_of(usage: Any) -> dict[str, int]:
    """The four counts of the seam from a completion's usage (prompt tokens include the
    cached ones; the Messages API counts those apart)."""
    if usage is None:
        return usage_dict(None)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    return usage_dict({"input_tokens": max(prompt - cached, 0), "cache_read_input_tokens": cached,
                       "output_tokens": int(getattr(usage, "completion_tokens", 0) or 0)})


def _tool_block(n: int, call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        args = None
    if not isinstance(args, dict):
        # A small model's broken JSON: the tool refuses it and the model sees why.
        args = {"unparsed_arguments": arguments}
    # The Messages API allows only these characters in an id; the session keeps one
    # that either provider accepts.
    safe = _ID.sub("_", call_id or "")[:40] or f"call_{n}"
    return {"type": "tool_use", "id": safe, "name": name, "input": args}


def _blocks(text: str, calls: list[tuple[str | None, str, str]]) -> list[dict[str, Any]]:
    blocks = [{"type": "text", "text": text}] if text else []
    blocks += [_tool_block(n, cid, name, args) for n, (cid, name, args) in enumerate(calls)]
    return blocks


def message_of(completion: Any, model: str) -> Message:
    choice = completion.choices[0] if completion.choices else None
    msg = getattr(choice, "message", None)
    calls = [(c.id, c.function.name, c.function.arguments or "")
             for c in (getattr(msg, "tool_calls", None) or []) if getattr(c, "function", None)]
    blocks = _blocks(getattr(msg, "content", None) or "", calls)
    stop = _STOP.get(getattr(choice, "finish_reason", None) or "", "end_turn")
    if calls:
        stop = "tool_use"
    return Message(blocks, usage_of(completion.usage), model, stop)


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

    def message(self, model: str) -> Message:
        calls = [tuple(self.calls[i]) for i in sorted(self.calls)]
        stop = "tool_use" if calls else _STOP.get(self.finish or "", "end_turn")
        return Message(_blocks("".join(self.text), calls), usage_of(self.usage), model, stop)


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
        # How this server takes a schema, learnt at the first refusal (model -> way).
        self._structured: dict[str, str] = {}

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

    def _send(self, model: str, params: dict[str, Any], go: Callable[[dict[str, Any]], Message]) -> Message:
        """go(request), stepping down from json_schema to JSON mode to a prompt when the
        server refuses a way of structured output (remembered for the next call)."""
        wanted = (params.get("output_config") or {}).get("format") is not None
        ways = ("json_schema", "json_object", "prompt")
        start = ways.index(self._structured.get(model, self.spec.structured))
        for way in ways[start:] if wanted else ways[:1]:
            try:
                return go(request_of(model, params, self.spec, way))
            except ProviderError as e:
                if not wanted or way == "prompt" or not _schema_refused(e):
                    raise
                self._structured[model] = ways[ways.index(way) + 1]
        raise AssertionError("unreachable")

    def stream(self, models: str | Sequence[str], *, on_text: Callable[[str], None] | None = None,
               parse: Any = None, **params: Any) -> Message:
        client = self.client
        model = models if isinstance(models, str) else models[0]

        def go(req: dict[str, Any]) -> Message:
            def run() -> Message:
                got = _Streamed()
                stream = client.chat.completions.create(
                    **req, stream=True, stream_options={"include_usage": True})
                try:
                    for chunk in stream:
                        got.take(chunk, on_text)
                except KeyboardInterrupt as e:
                    e.partial_usage = usage_of(got.usage)  # type: ignore[attr-defined]  # read by chat.turn
                    raise
                finally:
                    stream.close()
                return got.message(model)
            return self._call(run)
        return self._send(model, params, go)

    def create(self, models: str | Sequence[str], *, parse: Any = None, **params: Any) -> Message:
        client = self.client
        model = models if isinstance(models, str) else models[0]
        return self._send(model, params, lambda req: self._call(
            lambda: message_of(client.chat.completions.create(**req), model)))

    def count_tokens(self, model: str, **params: Any) -> int:
        from agent.llm.base import estimate_request
        return estimate_request(params)

    def list_models(self) -> list[str]:
        client = self.client
        return self._call(lambda: [m.id for m in client.models.list()])

    def batch_create(self, requests: list[dict[str, Any]]) -> Any:
        raise NotFound(f"The provider {self.spec.name} has no Message Batches.",
                       kind="no_batches")

    def batch_retrieve(self, batch_id: str) -> Any:
        raise NotFound(f"The provider {self.spec.name} has no batch {batch_id}.")

    def batch_results(self, batch_id: str) -> Any:
        raise NotFound(f"The provider {self.spec.name} has no batch {batch_id}.")

    def batch_cancel(self, batch_id: str) -> Any:
        raise NotFound(f"The provider {self.spec.name} has no batch {batch_id}.")
