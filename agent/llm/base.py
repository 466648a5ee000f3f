"""The seam between the agent and a language model: what a provider offers, in plain records.

Everything outside agent/llm receives a `Provider` (made at the CLI edge by
`agent.llm.make_provider()`, or a `ScriptedProvider` in unit tests) and never sees an SDK
object:

    msg = provider.stream(["claude-sonnet-4-5", "claude-haiku-4-5"], on_text=print,
                          max_tokens=1000, system=..., messages=[...], tools=[...])
    msg.content, msg.text, msg.usage, msg.model, msg.stop_reason

Parameters are those of the Anthropic Messages API (`system`, `messages`, `tools`,
`max_tokens`, `output_config` for structured output); messages and content blocks are
the plain dicts the session files store. `models` is a fallback chain: when a call fails
with an error another model may not have (overloaded, unknown model, service
unavailable), the next model is tried; `Message.model` says which one answered.
Failures are `ProviderError`s whose text is one plain line for the user.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from agent.config import Settings

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
                "cache_creation_input_tokens")


def zero_usage() -> dict[str, int]:
    return {f: 0 for f in USAGE_FIELDS}


def usage_dict(usage: Any) -> dict[str, int]:
    """The four token counts of a usage record (a dict, an object or None), 0 where absent."""
    if usage is None:
        return zero_usage()
    if isinstance(usage, dict):
        return {f: int(usage.get(f) or 0) for f in USAGE_FIELDS}
    return {f: int(getattr(usage, f, None) or 0) for f in USAGE_FIELDS}


def add_usage(total: dict[str, int], usage: Any) -> dict[str, int]:
    """Add `usage`'s four counts to `total` (in place) and return it."""
    for k, v in usage_dict(usage).items():
        total[k] = total.get(k, 0) + v
    return total


def models_for(model: str | None, settings: Settings) -> list[str]:
    """The fallback chain: `model` (or agent.toml's [model] name), then its fallbacks,
    without repeats."""
    out: list[str] = []
    for m in [model or settings.model, *settings.fallback_models]:
        if m and m not in out:
            out.append(m)
    return out


# ---- records --------------------------------------------------------------------------


@dataclass
class Message:
    """A model's reply: content blocks as plain dicts (`{"type": "text", "text": ...}`,
    `{"type": "tool_use", "id", "name", "input"}`, ...), the four token counts, the
    model that answered and why it stopped (`end_turn`, `tool_use`, `max_tokens`, ...)."""
    content: list[dict[str, Any]]
    usage: dict[str, int] = field(default_factory=zero_usage)
    model: str = ""
    stop_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]


@dataclass
class Batch:
    """A batch of requests: status is `in_progress`, `canceling` or `ended`; counts has
    processing, succeeded, errored, canceled and expired."""
    id: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status == "ended"

    def describe(self) -> str:
        """`in_progress: 1 succeeded, 2 processing, 0 errored, 0 expired, 0 canceled`"""
        c = self.counts
        return (f"{self.status}: {c.get('succeeded', 0)} succeeded, "
                f"{c.get('processing', 0)} processing, {c.get('errored', 0)} errored, "
                f"{c.get('expired', 0)} expired, {c.get('canceled', 0)} canceled")


@dataclass
class BatchResult:
    """One request's result: type `succeeded` (with message), `errored` (with error,
    `type: message` in the API's words), `canceled` or `expired`."""
    type: str
    message: Message | None = None
    error: str | None = None


class ProviderError(Exception):
    """A model call failed. str(e) is one plain line for the user; `status` is the HTTP
    status (None when the API was not reached), `kind` the API's error type
    (`overloaded_error`, ...) and `detail` its own words. `fallback` says whether another
    model may succeed where this one failed."""

    def __init__(self, message: str, *, status: int | None = None, kind: str | None = None,
                 detail: str | None = None, fallback: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.fallback = fallback

    def problem(self) -> str:
        """Short form for logs and dream records: `529 overloaded_error: Overloaded`, or
        `cannot reach the API (...)`."""
        if self.status is None:
            return f"cannot reach the API ({self.detail or self})"
        what = ": ".join(x for x in (self.kind, self.detail) if x)
        return f"{self.status} {what or self}"


class TooLarge(ProviderError):
    """A request refused before it was sent: its estimated input is over the model's
    context window (the API would refuse it, or bill it whole)."""


# The context window of the Anthropic models the agent uses, in tokens.
CONTEXT_TOKENS = 200_000


def estimate_request(params: dict[str, Any]) -> int:
    """About how many input tokens a request's system, messages and tools take (JSON
    characters / 4, the estimate every budget of the agent uses)."""
    import json

    parts = {k: params.get(k) for k in ("system", "messages", "tools") if params.get(k)}
    return len(json.dumps(parts, ensure_ascii=False, default=str)) // 4


def check_request(params: dict[str, Any], limit: int = CONTEXT_TOKENS) -> None:
    """TooLarge, before anything is sent, when a request would not fit the context window."""
    n = estimate_request(params)
    if n > limit:
        raise TooLarge(f"Refused to send a request of about {n:,} tokens: it is over the "
                       f"model's context window of {limit:,} tokens. Nothing was sent. Lower "
                       f"[chat] window_tokens or max_message_tokens in agent.toml, or run "
                       f"`agent archive` to compact the conversation.", kind="too_large")


class NotFound(ProviderError):
    """The thing asked for does not exist here (a batch, a model, an endpoint)."""


def with_fallbacks(models: str | Sequence[str], call: Callable[[str], Message]) -> Message:
    """call(model) for each model in turn while the error says another may work."""
    chain = [models] if isinstance(models, str) else list(models)
    chain = [m for i, m in enumerate(chain) if m and m not in chain[:i]]
    if not chain:
        raise ValueError("no model to call")
    for i, model in enumerate(chain):
        try:
            return call(model)
        except ProviderError as e:
            if i + 1 < len(chain) and e.fallback:
                continue
            raise
    raise AssertionError("unreachable")


# ---- the interface --------------------------------------------------------------------


class Provider(ABC):
    """A language model service. Implementations: agent.llm.anthropic.AnthropicProvider
    (the real one), agent.llm.scripted.ScriptedProvider (unit tests)."""

    name: str = "provider"

    @abstractmethod
    def stream(self, models: str | Sequence[str], *,
               on_text: Callable[[str], None] | None = None, parse: Any = None,
               **params: Any) -> Message:
        """One message, streamed: `on_text(chunk)` hears the text as it arrives; returns
        the final message with its usage. A KeyboardInterrupt stops the stream and
        propagates (the caller keeps what on_text heard)."""

    @abstractmethod
    def create(self, models: str | Sequence[str], *, parse: Any = None, **params: Any) -> Message:
        """One message without streaming (structured output: params
        `output_config={"format": {"type": "json_schema", "schema": ...}}`, and `parse`
        the pydantic model of the reply: one that does not fit is asked for again once)."""

    @abstractmethod
    def count_tokens(self, model: str, **params: Any) -> int:
        """The input tokens `params` (system, messages, tools) would cost with `model`."""

    @abstractmethod
    def list_models(self) -> list[str]:
        """The ids of the models this key may use (an authenticated call: a refused key is
        a ProviderError with status 401 or 403)."""

    @abstractmethod
    def batch_create(self, requests: list[dict[str, Any]]) -> Batch:
        """Submit `[{"custom_id": ..., "params": {"model": ..., ...}}, ...]` as one batch
        (NotFound when the service has no batches)."""

    @abstractmethod
    def batch_retrieve(self, batch_id: str) -> Batch:
        """The batch's status now (NotFound when it is not known)."""

    @abstractmethod
    def batch_results(self, batch_id: str) -> dict[str, BatchResult]:
        """custom_id -> result of an ended batch."""

    @abstractmethod
    def batch_cancel(self, batch_id: str) -> Batch:
        """Ask for the batch to be canceled (NotFound when it is gone)."""
