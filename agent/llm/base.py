"""The seam between the agent and a language model: what a provider offers, in records.

Everything outside agent/llm receives a `Provider` (made at the CLI edge by
`agent.llm.make_provider()`, or a `ScriptedProvider` in unit tests) and never sees an SDK
object nor a vendor's wire format:

    reply = provider.stream(["claude-sonnet-4-5", "local/qwen3:8b"], request, on_text=print)
    reply.content, reply.text, reply.tool_calls, reply.usage, reply.model, reply.stop_reason

The request and the reply are the records of agent/llm/records.py (messages of text,
tool calls and tool results, tools, cache hints, usage). `models` is a fallback chain:
when a call fails with an error another model may not have (overloaded, unknown model,
service unavailable), the next model is tried; `Reply.model` says which one answered.
Failures are `ProviderError`s whose text is one plain line for the user; Ctrl-C during a
stream is an `Interrupted` carrying what had arrived.

Batches are a capability, not a duty: a provider with a batch API (Anthropic's Message
Batches) implements `Batching`; `provider.batching(model)` is that, or None when the
model's provider has none (the dream then sends plain calls).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TYPE_CHECKING, runtime_checkable

from agent.llm.records import (USAGE_FIELDS, Batch, BatchRequest, BatchResult, Reply,
                               Request)

if TYPE_CHECKING:
    from agent.config import Settings


def zero_usage() -> dict[str, int]:
    return {f: 0 for f in USAGE_FIELDS}


def usage_dict(usage: Any) -> dict[str, int]:
    """The four token counts of a usage record (a Usage, a dict, an SDK object or None),
    0 where absent."""
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


class NotFound(ProviderError):
    """The thing asked for does not exist here (a batch, a model, an endpoint)."""


def model_chain(models: str | Sequence[str]) -> list[str]:
    """The models to try, in order, each once; ValueError when there is none."""
    chain = [models] if isinstance(models, str) else list(models)
    chain = [m for i, m in enumerate(chain) if m and m not in chain[:i]]
    if not chain:
        raise ValueError("no model to call")
    return chain


def with_fallbacks(models: str | Sequence[str], call: Callable[[str], Reply]) -> Reply:
    """call(model) for each model in turn while the error says another may work."""
    chain = model_chain(models)
    for i, model in enumerate(chain):
        try:
            return call(model)
        except ProviderError as e:
            if i + 1 < len(chain) and e.fallback:
                continue
            raise
    raise AssertionError("unreachable")


# ---- the interface --------------------------------------------------------------------


@runtime_checkable
class Batching(Protocol):
    """A batch API: requests sent together, answered within a day at a lower price.
    Only a provider that has one implements it (agent.llm.anthropic); ask for it with
    `provider.batching(model)`."""

    def batch_create(self, requests: list[BatchRequest]) -> Batch:
        """Submit the requests as one batch (NotFound when this endpoint has no batches)."""
        ...

    def batch_retrieve(self, batch_id: str) -> Batch:
        """The batch's status now (NotFound when it is not known)."""
        ...

    def batch_results(self, batch_id: str) -> dict[str, BatchResult]:
        """custom_id -> result of an ended batch."""
        ...

    def batch_cancel(self, batch_id: str) -> Batch:
        """Ask for the batch to be canceled (NotFound when it is gone)."""
        ...


class Provider(ABC):
    """A language model service. Implementations: agent.llm.router.Router (the one the
    agent is given, over agent.llm.anthropic and agent.llm.openai), and
    agent.llm.scripted.ScriptedProvider (unit tests)."""

    name: str = "provider"

    @abstractmethod
    def stream(self, models: str | Sequence[str], request: Request, *,
               on_text: Callable[[str], None] | None = None) -> Reply:
        """One reply, streamed: `on_text(chunk)` hears the text as it arrives; returns
        the whole reply with its usage. Ctrl-C (or a KeyboardInterrupt raised by
        on_text) stops the stream: `Interrupted`, with what had arrived."""

    @abstractmethod
    def create(self, models: str | Sequence[str], request: Request, *,
               parse: Any = None) -> Reply:
        """One reply without streaming. With `request.schema`, `parse` may be the
        pydantic model of the reply: one that does not fit is asked for again once."""

    @abstractmethod
    def count_tokens(self, model: str, request: Request) -> int:
        """The input tokens the request (system, messages, tools) would cost with `model`."""

    @abstractmethod
    def list_models(self) -> list[str]:
        """The ids of the models this provider offers (an authenticated call: a refused
        key is a ProviderError with status 401 or 403)."""

    def batching(self, model: str) -> Batching | None:
        """The batch API that `model`'s requests may go through, or None."""
        return self if isinstance(self, Batching) else None
