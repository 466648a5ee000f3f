"""What a dream's tokens cost, as an estimate from the list prices of agent/prices.py.

Prices change and that table does not follow them: every figure it gives is labelled
an estimate. Message Batches cost half the list price; a one-hour cache write costs
twice the input price and a cache read a tenth of it.
"""

from __future__ import annotations

from agent.prices import shipped

CACHE_WRITE_1H = 2.0
CACHE_READ = 0.1
BATCH = 0.5


def prices(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for the model's family, or None if unknown."""
    p = shipped(model)
    return None if p is None else (p.input, p.output)


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
