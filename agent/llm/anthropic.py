"""The Anthropic provider: the only module that imports the `anthropic` SDK.

The SDK is imported, and its client made, at the first model call: commands that need
no model do not pay for importing it, and `agent chat` builds its prompt while the SDK
loads in the background (agent.llm.preload). ANTHROPIC_BASE_URL is honoured by the SDK itself.
The only home of the Messages API's wire format: the seam's records
(agent/llm/records.py) become its dicts here, and its replies become records. SDK
objects and errors never leave this module: replies become `Reply`s, batches `Batch`es,
errors `ProviderError`s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TYPE_CHECKING, TypeVar, cast

from agent.llm.deadline import Closer, http_errors
from agent.llm.base import NotFound, Provider, ProviderError, usage_dict, with_fallbacks
from agent.llm.records import (END, MAX_TOKENS, REFUSAL, STOPPED, TOOL_CALLS, Batch,
                               BatchRequest, BatchResult, Block, CacheHint, Interrupted,
                               Message, Opaque, Reply, Request, Stop, Text, Tool, ToolCall,
                               ToolResult, Usage)
from agent.llm.spec import NoApiKey, ProviderSpec, specs
from agent.llm.structured import plain

__all__ = ["AnthropicProvider", "NoApiKey", "check_key", "make_client", "params_of",
           "translate", "usage_dict", "wire"]

ANTHROPIC = specs(None)["anthropic"]

if TYPE_CHECKING:
    import anthropic

T = TypeVar("T")


def _api_key(spec: ProviderSpec | None = None) -> str:
    key = (spec or ANTHROPIC).key()
    if not key:
        raise NoApiKey(f"No API key for the provider {(spec or ANTHROPIC).name}: set its key_env")
    return key


def check_key() -> None:
    """NoApiKey now if ANTHROPIC_API_KEY is unset (without loading the SDK)."""
    _api_key()


def make_client(*, max_retries: int = 2, timeout: float | None = None,
                spec: ProviderSpec | None = None) -> "anthropic.Anthropic":
    """An `anthropic.Anthropic` client for the provider's key (NoApiKey when unset).

    timeout=None keeps the SDK's default timeouts (passing None to the SDK would mean no
    timeout at all)."""
    key = _api_key(spec)
    import anthropic

    kwargs: dict[str, Any] = {"api_key": key, "max_retries": max_retries}
    if spec is not None and spec.base_url:
        kwargs["base_url"] = spec.base_url
    if timeout is not None:
        kwargs["timeout"] = timeout
    return anthropic.Anthropic(**kwargs)


# ---- errors ---------------------------------------------------------------------------

# Errors after which the next model of `[model] fallbacks` is tried: the model is
# overloaded, unknown here, or its service unavailable.
_FALLBACK_STATUS = {404, 503, 529}
_FALLBACK_TYPES = {"overloaded_error", "not_found_error"}


def _error_body(body: Any) -> tuple[str | None, str | None]:
    """(type, message) of an API error body: `{"type": "error", "error": {...}}`, or the
    inner `{"type", "message"}`, as a dict or an SDK object."""
    def get(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    if body is None:
        return None, None
    inner = get(body, "error")
    if inner is None or isinstance(inner, str):
        inner = body
    kind, msg = get(inner, "type"), get(inner, "message")
    if kind == "error":
        kind = None
    return (kind if isinstance(kind, str) else None), (msg if isinstance(msg, str) else None)


def _describe(e: "anthropic.APIError", kind: str | None, msg: str | None) -> str:
    """One plain line for an SDK error: what failed and the API's own words."""
    import anthropic

    if isinstance(e, anthropic.APITimeoutError):
        return "The Anthropic API did not answer in time (timeout)."
    if isinstance(e, anthropic.APIConnectionError):
        import os
        url = os.environ.get("ANTHROPIC_BASE_URL", "").strip()
        # The usual cause of a wrong address is this variable: name it.
        where = f" at {url!r} (set by ANTHROPIC_BASE_URL: check it, or unset it)" if url else ""
        return f"Could not reach the Anthropic API{where}: {e.__cause__ or e}"
    if isinstance(e, anthropic.APIStatusError):
        status = f"HTTP {e.status_code}" if e.status_code and e.status_code != 200 else "mid-reply"
        kind, msg = kind or type(e).__name__, msg or str(e)
        if e.status_code in (401, 403):
            return (f"The Anthropic API refused the key ({status}, {kind}): {msg}. "
                    f"Check ANTHROPIC_API_KEY.")
        return f"The Anthropic API failed ({status}, {kind}): {msg}"
    return f"The Anthropic API failed: {e}"


def translate(e: "anthropic.APIError") -> ProviderError:
    """The ProviderError (NotFound for 404) for an SDK error."""
    import anthropic

    status = getattr(e, "status_code", None) if isinstance(e, anthropic.APIStatusError) else None
    kind, msg = _error_body(getattr(e, "body", None))
    fallback = status in _FALLBACK_STATUS or kind in _FALLBACK_TYPES
    cls = NotFound if isinstance(e, anthropic.NotFoundError) else ProviderError
    detail: str | None
    if status is None:                       # not reached: what stood in the way
        detail = str(e.__cause__ or e) if isinstance(e, anthropic.APIConnectionError) else str(e)
    else:
        detail = msg or (None if kind else str(e))
    return cls(_describe(e, kind, msg), status=status, kind=kind, detail=detail,
               fallback=fallback)


# ---- conversions: records <-> the Messages API -----------------------------------------

_STOP = {"end_turn": END, "stop_sequence": END, "tool_use": TOOL_CALLS,
         "max_tokens": MAX_TOKENS, "refusal": REFUSAL}


def _cache(hint: CacheHint) -> dict[str, str]:
    return {"type": "ephemeral", **({"ttl": hint.ttl} if hint.ttl else {})}


def wire_block(b: Block) -> dict[str, Any] | None:
    """A block as the Messages API takes it (None: an opaque part that is no block)."""
    out: dict[str, Any]
    if isinstance(b, Text):
        out = {"type": "text", "text": b.text}
    elif isinstance(b, ToolCall):
        out = {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
    elif isinstance(b, ToolResult):
        out = {"type": "tool_result", "tool_use_id": b.call_id,
               "content": wire_content(b.content)}
        if b.is_error:
            out["is_error"] = True
    elif isinstance(b.data, dict):
        out = {k: v for k, v in b.data.items() if k != "cache_control"}
    else:
        return None
    if b.cache is not None:
        out["cache_control"] = _cache(b.cache)
    return out


def wire_content(content: str | list[Block]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [w for w in map(wire_block, content) if w is not None]


def wire_message(m: Message) -> dict[str, Any]:
    return {"role": m.role, "content": wire_content(m.content)}


def wire_tool(t: Tool) -> dict[str, Any]:
    return {"name": t.name, "description": t.description, "input_schema": t.schema}


def wire(obj: Any) -> Any:
    """Records (a block, message, tool, or a list of them) in the Messages API's form."""
    if isinstance(obj, list):
        return [wire(o) for o in obj]
    if isinstance(obj, Message):
        return wire_message(obj)
    if isinstance(obj, Tool):
        return wire_tool(obj)
    if isinstance(obj, (Text, ToolCall, ToolResult, Opaque)):
        return wire_block(obj)
    return obj


def params_of(request: Request, model: str | None = None,
              sampling: dict[str, float] | None = None) -> dict[str, Any]:
    """The Messages API parameters of a request (`model` first when given), with the
    provider's sampling options (agent.toml checks an Anthropic table sets only
    temperature, top_p and top_k, which the API takes)."""
    out: dict[str, Any] = {"model": model} if model is not None else {}
    out["max_tokens"] = request.max_tokens
    out.update({k: v for k, v in (sampling or {}).items() if v is not None})
    if request.system:
        out["system"] = (request.system if isinstance(request.system, str) else
                         [wire_block(t) for t in request.system])
    out["messages"] = [wire_message(m) for m in request.messages]
    if request.tools:
        out["tools"] = [wire_tool(t) for t in request.tools]
        if request.tool_choice:
            out["tool_choice"] = ({"type": "any"} if request.tool_choice == "required" else
                                  {"type": "none"} if request.tool_choice == "none" else
                                  {"type": "tool", "name": request.tool_choice})
    if request.schema is not None:
        # Anthropic's structured outputs refuse maxLength and maxItems (a grammar's bounds,
        # agent.llm.structured); Claude keeps to the prompt's lengths without them.
        out["output_config"] = {"format": {"type": "json_schema",
                                           "schema": plain(request.schema)}}
    return out


def _usage(u: Any) -> Usage:
    return Usage(**usage_dict(u))


def _reply_block(b: Any) -> Block:
    d = b.model_dump(mode="json", exclude_none=True) if hasattr(b, "model_dump") else dict(b)
    if d.get("type") == "text":
        return Text(d.get("text", ""))
    if d.get("type") == "tool_use":
        return ToolCall(d["id"], d["name"], d.get("input", {}))
    return Opaque(d)


def _message(m: Any, model: str = "") -> Reply:
    stop = getattr(m, "stop_reason", None)
    return Reply(content=[_reply_block(b) for b in m.content or []], usage=_usage(m.usage),
                 model=model or getattr(m, "model", None) or "",
                 stop_reason=_STOP.get(stop, stop) if stop else None)


def _batch(b: Any) -> Batch:
    c = b.request_counts
    return Batch(b.id, b.processing_status,
                 {k: int(getattr(c, k, 0) or 0)
                  for k in ("processing", "succeeded", "errored", "canceled", "expired")})


def _result(r: Any) -> BatchResult:
    kind = getattr(r, "type", None) or "missing"
    if kind == "succeeded":
        return BatchResult(kind, message=_message(r.message))
    if kind == "errored":
        t, msg = _error_body(getattr(r, "error", None))
        text = f"{t}: {msg}" if t or msg else str(getattr(r, "error", ""))
        return BatchResult(kind, error=text)
    return BatchResult(kind)


# ---- the provider ---------------------------------------------------------------------


class AnthropicProvider(Provider):
    """The Messages and Message Batches APIs through the `anthropic` SDK (Batching).

    The key is read now, or (lazy=True) at the first call: then a command that may need
    no model (a dream with nothing to send) runs without one. The SDK is imported and the
    client made at the first call, or now with eager=True."""

    name = "anthropic"

    def __init__(self, *, max_retries: int = 2, timeout: float | None = None,
                 lazy: bool = False, eager: bool = False,
                 spec: ProviderSpec | None = None) -> None:
        self.spec = spec or ANTHROPIC
        self._max_retries = max_retries
        self._timeout = timeout
        self._client: "anthropic.Anthropic | None" = None
        self._lock = threading.Lock()
        if eager:
            _ = self.client
        elif not lazy:
            _api_key(self.spec)

    @property
    def client(self) -> "anthropic.Anthropic":
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = make_client(max_retries=self._max_retries,
                                               timeout=self._timeout, spec=self.spec)
        return self._client

    def _call(self, fn: Callable[[], T]) -> T:
        import anthropic

        try:
            return fn()
        except anthropic.APIError as e:
            raise translate(e) from e

    def stream(self, models: str | Sequence[str], request: Request, *,
               on_text: Callable[[str], None] | None = None) -> Reply:
        params = params_of(request, sampling=self.spec.sampling)
        client = self.client

        def one(model: str) -> Reply:
            def go() -> Reply:
                import anthropic

                heard: list[str] = []
                with client.messages.stream(model=model, **params) as stream:
                    def so_far() -> Usage | None:
                        # What the stream reported so far (its input tokens at the start).
                        snapshot: Any = getattr(stream, "current_message_snapshot", None)
                        usage = getattr(snapshot, "usage", None)
                        return _usage(usage) if usage is not None else None

                    def stopped() -> Reply:
                        return Reply([Text("".join(heard))] if heard else [],
                                     so_far() or Usage(), model, STOPPED)

                    closer = Closer(request.deadline, stream.response)
                    broken: tuple[type[BaseException], ...] = (anthropic.APIConnectionError,
                                                                 *http_errors())
                    try:
                        with closer:
                            for event in stream:
                                if event.type == "text":
                                    heard.append(event.text)
                                    if on_text is not None:
                                        on_text(event.text)
                    except Stop:
                        return stopped()
                    except KeyboardInterrupt as e:
                        raise Interrupted("".join(heard), so_far()) from e
                    except broken:
                        if closer.fired.is_set():   # the deadline shut the connection
                            return stopped()
                        raise
                    snapshot: Any = getattr(stream, "current_message_snapshot", None)
                    if closer.fired.is_set() and not getattr(snapshot, "stop_reason", None):
                        return stopped()
                    return _message(stream.get_final_message(), model)
            return self._call(go)
        return with_fallbacks(models, one)

    def create(self, models: str | Sequence[str], request: Request, *,
               parse: Any = None) -> Reply:
        params = params_of(request, sampling=self.spec.sampling)
        client = self.client
        return with_fallbacks(models, lambda model: self._call(
            lambda: _message(client.messages.create(model=model, **params), model)))

    def count_tokens(self, model: str, request: Request) -> int:
        params = params_of(request)
        params.pop("max_tokens", None)
        client = self.client
        return self._call(lambda: client.messages.count_tokens(model=model, **params)).input_tokens

    def list_models(self) -> list[str]:
        client = self.client
        return self._call(lambda: [m.id for m in client.models.list(limit=1000)])

    # -- Batching

    def batch_create(self, requests: list[BatchRequest]) -> Batch:
        wire_requests = [{"custom_id": r.custom_id, "params": params_of(r.request, r.model,
                                                                  self.spec.sampling)}
                         for r in requests]
        client = self.client
        return _batch(self._call(lambda: client.messages.batches.create(
            requests=cast(Any, wire_requests))))

    def batch_retrieve(self, batch_id: str) -> Batch:
        client = self.client
        return _batch(self._call(lambda: client.messages.batches.retrieve(batch_id)))

    def batch_results(self, batch_id: str) -> dict[str, BatchResult]:
        client = self.client
        return self._call(lambda: {r.custom_id: _result(r.result)
                                   for r in client.messages.batches.results(batch_id)})

    def batch_cancel(self, batch_id: str) -> Batch:
        client = self.client
        return _batch(self._call(lambda: client.messages.batches.cancel(batch_id)))
