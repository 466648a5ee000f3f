"""The Anthropic client the agent uses, made from the environment, and its usage figures.

`anthropic` is imported inside make_client only: commands that need no model must not
pay for importing the SDK.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from agent.errors import UserError

if TYPE_CHECKING:
    import anthropic


class NoApiKey(UserError):
    """ANTHROPIC_API_KEY is not set; exit status 2 like other usage problems."""

    exit_code = 2

    def __init__(self, message: str = "No API key: set ANTHROPIC_API_KEY") -> None:
        super().__init__(message)


def make_client(*, max_retries: int = 2, timeout: float | None = None) -> "anthropic.Anthropic":
    """An `anthropic.Anthropic` client for ANTHROPIC_API_KEY (NoApiKey when unset).

    ANTHROPIC_BASE_URL is honoured by the SDK itself. timeout=None keeps the SDK's
    default timeouts (passing None to the SDK would mean no timeout at all)."""
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if not key:
        raise NoApiKey()
    import anthropic

    kwargs: dict[str, Any] = {"api_key": key, "max_retries": max_retries}
    if timeout is not None:
        kwargs["timeout"] = timeout
    return anthropic.Anthropic(**kwargs)


_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def usage_dict(usage: Any) -> dict[str, int]:
    """The four token counts of an SDK Usage (or a dict, or None), 0 where absent."""
    if usage is None:
        return {f: 0 for f in _USAGE_FIELDS}
    get = usage.get if isinstance(usage, dict) else (lambda f: getattr(usage, f, None))
    return {f: int(get(f) or 0) for f in _USAGE_FIELDS}
