"""The one seam to a language model.

`Provider` (base.py) is what the rest of the agent calls; `make_provider()` makes the real
one (anthropic.py, the only module importing the SDK, which it does at the first call);
`ScriptedProvider` (scripted.py) answers from a queue in unit tests.
"""

from __future__ import annotations

from agent.llm.base import (CONTEXT_TOKENS, Batch, BatchResult, Message, NotFound, Provider,
                            ProviderError, TooLarge, add_usage, check_request,
                            estimate_request, models_for, usage_dict, zero_usage)

__all__ = ["CONTEXT_TOKENS", "Batch", "BatchResult", "Message", "NotFound", "Provider",
           "ProviderError", "TooLarge", "add_usage", "check_request", "estimate_request",
           "make_provider", "models_for", "usage_dict", "zero_usage"]


def make_provider(*, max_retries: int = 2, timeout: float | None = None,
                  lazy: bool = False, eager: bool = False) -> Provider:
    """The provider for this environment: Anthropic, keyed by ANTHROPIC_API_KEY (NoApiKey
    now when it is unset, or at the first model call with lazy=True).

    The SDK is loaded at the first model call; eager=True loads it now (a long-running
    process such as `agent serve` pays for it at start, not in its first job)."""
    from agent.llm.anthropic import AnthropicProvider

    return AnthropicProvider(max_retries=max_retries, timeout=timeout, lazy=lazy, eager=eager)
