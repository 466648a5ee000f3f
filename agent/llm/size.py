"""How big a request is before it is sent: the one estimate every budget of the agent
uses (the window's, compaction's, the refusal of a request over the context window).

The estimate is the characters of the JSON of the Messages API's form of the records, /4,
as it has been since the agent began (whatever provider then answers), so that a budget
set in agent.toml means what it meant.
"""

from __future__ import annotations

import json
from typing import Any

from agent.llm.anthropic import params_of, wire
from agent.llm.base import CONTEXT_TOKENS, TooLarge
from agent.llm.records import Request


def chars(obj: Any) -> int:
    """The characters of records (a block, message or tool, or a list of them; a plain
    string or dict as it is) in the Messages API's JSON."""
    return len(json.dumps(wire(obj), ensure_ascii=False, default=str))


def estimate_request(request: Request) -> int:
    """About how many input tokens a request's system, messages and tools take."""
    params = params_of(request)
    parts = {k: params.get(k) for k in ("system", "messages", "tools") if params.get(k)}
    return len(json.dumps(parts, ensure_ascii=False, default=str)) // 4


def check_request(request: Request, limit: int = CONTEXT_TOKENS) -> None:
    """TooLarge, before anything is sent, when a request would not fit the context window."""
    n = estimate_request(request)
    if n > limit:
        raise TooLarge(f"Refused to send a request of about {n:,} tokens: it is over the "
                       f"model's context window of {limit:,} tokens. Nothing was sent. Lower "
                       f"[chat] window_tokens or max_message_tokens in agent.toml, or run "
                       f"`agent archive` to compact the conversation.", kind="too_large")
