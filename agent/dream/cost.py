"""What a dream's tokens cost, as an estimate from a small table of list prices.

Prices change and this table does not follow them: every figure it gives is labelled
an estimate. Message Batches cost half the list price; a one-hour cache write costs
twice the input price and a cache read a tenth of it.
"""

from __future__ import annotations

import re

# (model name pattern, USD per million input tokens, per million output tokens), first match wins.
PRICES = [
    (re.compile(r"opus-4-[01]\b|opus-4-20|opus-4$|3-opus"), 15.0, 75.0),
    (re.compile(r"opus"), 5.0, 25.0),
    (re.compile(r"sonnet"), 3.0, 15.0),
    (re.compile(r"3-5-haiku|haiku-3-5"), 0.8, 4.0),
    (re.compile(r"3-haiku|haiku-3\b"), 0.25, 1.25),
    (re.compile(r"haiku"), 1.0, 5.0),
    # OpenAI's, for `openai/...` (and the same models through OpenRouter and the like).
    (re.compile(r"gpt-5-nano"), 0.05, 0.4),
    (re.compile(r"gpt-5-mini"), 0.25, 2.0),
    (re.compile(r"gpt-5"), 1.25, 10.0),
    (re.compile(r"gpt-4\.1-nano"), 0.1, 0.4),
    (re.compile(r"gpt-4\.1-mini"), 0.4, 1.6),
    (re.compile(r"gpt-4\.1"), 2.0, 8.0),
    (re.compile(r"gpt-4o-mini"), 0.15, 0.6),
    (re.compile(r"gpt-4o"), 2.5, 10.0),
]
CACHE_WRITE_1H = 2.0
CACHE_READ = 0.1
BATCH = 0.5


def prices(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for the model's family, or None if unknown."""
    name = model.lower()
    for pattern, inp, out in PRICES:
        if pattern.search(name):
            return inp, out
    return None


def estimate(model: str, usage: dict[str, int], *, batch: bool) -> float | None:
    """Estimated USD for one usage dict (input, output, cache read and write tokens)."""
    p = prices(model)
    if p is None:
        return None
    inp, out = p
    usd = (usage.get("input_tokens", 0) * inp
           + usage.get("cache_creation_input_tokens", 0) * inp * CACHE_WRITE_1H
           + usage.get("cache_read_input_tokens", 0) * inp * CACHE_READ
           + usage.get("output_tokens", 0) * out) / 1_000_000
    return usd * (BATCH if batch else 1.0)
