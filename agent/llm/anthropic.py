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


def check_key() -> None:
    """NoApiKey now if ANTHROPIC_API_KEY is unset (without loading the SDK)."""
    if not os.environ.get("ANTHROPIC_API_KEY", "").strip():
        raise NoApiKey()


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


# ---- calls with fallback models (added by the chat issue) ------------------------------

# Errors after which the next model of `[model] fallbacks` is tried: the model is
# overloaded, unknown here, or its service unavailable.
_FALLBACK_STATUS = {404, 503, 529}
_FALLBACK_TYPES = {"overloaded_error", "not_found_error"}


def error_type(e: BaseException) -> str | None:
    """The API's error type (`overloaded_error`, ...) of an SDK error, if it has one."""
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("type"), str):
            return err["type"]
        if isinstance(body.get("type"), str) and body.get("type") != "error":
            return body["type"]
    return None


def wants_fallback(e: BaseException) -> bool:
    """Whether another model may succeed where this error came from."""
    import anthropic

    if not isinstance(e, anthropic.APIStatusError):
        return False
    return e.status_code in _FALLBACK_STATUS or error_type(e) in _FALLBACK_TYPES


def describe_error(e: BaseException) -> str:
    """One plain line for an SDK error: what failed and the API's own words."""
    import anthropic

    if isinstance(e, anthropic.APITimeoutError):
        return "The Anthropic API did not answer in time (timeout)."
    if isinstance(e, anthropic.APIConnectionError):
        return f"Could not reach the Anthropic API: {e.__cause__ or e}"
    if isinstance(e, anthropic.APIStatusError):
        body = e.body if isinstance(e.body, dict) else {}
        err = body.get("error") if isinstance(body.get("error"), dict) else {}
        kind = err.get("type") or type(e).__name__
        msg = err.get("message") or str(e)
        status = f"HTTP {e.status_code}" if e.status_code and e.status_code != 200 else "mid-reply"
        if e.status_code in (401, 403):
            return (f"The Anthropic API refused the key ({status}, {kind}): {msg}. "
                    f"Check ANTHROPIC_API_KEY.")
        return f"The Anthropic API failed ({status}, {kind}): {msg}"
    return f"The Anthropic API failed: {e}"


def _fallbacks(models, call):
    """call(model) for each model in turn while the error says another may work."""
    models = [m for i, m in enumerate(models) if m and m not in models[:i]]
    for i, model in enumerate(models):
        try:
            return call(model), model
        except Exception as e:
            if i + 1 < len(models) and wants_fallback(e):
                continue
            raise


def stream_message(client, models: list[str], *, on_text=None, **params):
    """Stream one message, trying `models` in order: (final Message, model used).

    `on_text(chunk)` gets the text as it arrives. A KeyboardInterrupt stops the stream
    and propagates (the caller keeps what on_text saw).
    """
    def call(model):
        with client.messages.stream(model=model, **params) as stream:
            for event in stream:
                if on_text is not None and event.type == "text":
                    on_text(event.text)
            return stream.get_final_message()
    return _fallbacks(models, call)


def create_message(client, models: list[str], **params):
    """One message without streaming, trying `models` in order: (Message, model used)."""
    return _fallbacks(models, lambda model: client.messages.create(model=model, **params))
