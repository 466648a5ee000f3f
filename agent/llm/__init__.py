"""The one seam to a language model.

`Provider` (base.py) is what the rest of the agent calls, with the records of records.py
(a `Request` of `Message`s of `Text`, `ToolCall` and `ToolResult` blocks, `Tool`s and
`CacheHint`s; a `Reply` with its `Usage`); `make_provider(settings)` makes the real one
(router.py), which sends each model to its provider (spec.py): anthropic.py and
openai.py, the only modules importing an SDK (each at its first call) and the only homes
of their wire formats. A batch API is a capability (`Batching`, `provider.batching(model)`).
`ScriptedProvider` (scripted.py) answers from a queue in unit tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.llm.base import (CONTEXT_TOKENS, Batching, NotFound, Provider, ProviderError,
                            TooLarge, add_usage, models_for, usage_dict, zero_usage)
from agent.llm.records import (Batch, BatchRequest, BatchResult, Block, CacheHint,
                               Interrupted, Message, Opaque, Reply, Request, Stop, Text,
                               Tool, ToolCall, ToolResult, Usage)

if TYPE_CHECKING:
    from agent.config import Settings
    from agent.llm.router import Router

__all__ = ["CONTEXT_TOKENS", "Batch", "BatchRequest", "BatchResult", "Batching", "Block",
           "CacheHint", "Interrupted", "Message", "NotFound", "Opaque", "Provider",
           "ProviderError", "Reply", "Request", "Stop", "Text", "TooLarge", "Tool", "ToolCall",
           "ToolResult", "Usage", "add_usage", "make_provider", "models_for", "usage_dict",
           "zero_usage"]


def sdk_of(settings: Settings | None = None, model: str | None = None) -> str:
    """The SDK module `model` (default: the chat model) is called through: "anthropic"
    or "openai" (for agent.llm.preload)."""
    from agent.llm.spec import specs, split

    name, _ = split(model or getattr(settings, "model", None) or "anthropic/")
    spec = specs(settings).get(name)
    return "openai" if spec is not None and spec.api == "openai" else "anthropic"


def make_provider(settings: Settings | None = None, *, max_retries: int = 2, timeout: float | None = None,
                  lazy: bool = False, eager: bool = False, model: str | None = None) -> Router:
    """The provider for these settings (agent.config.Settings; None: the built-in
    providers only): each model goes to the provider its name says (agent.llm.router).

    The key of `model` (default: the chat model)'s provider is checked now (NoApiKey
    when its variable is unset), or at the first call with lazy=True. The SDKs load at
    the first call; eager=True loads that model's now (a long-running process such as
    `agent serve` pays for it at start, not in its first job)."""
    from agent.llm.router import Router
    from agent.llm.spec import specs

    router = Router(specs(settings), max_retries=max_retries, timeout=timeout)
    model = model or getattr(settings, "model", None) or "anthropic/"
    try:
        if eager:
            router.load(model)
        elif not lazy:
            router.check_key(model)
    except ProviderError as e:          # a model of no known provider: a usage problem
        from agent.errors import UserError
        raise UserError(str(e)) from None
    return router
