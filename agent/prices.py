"""What a model's tokens cost: the shipped list prices and agent.toml's `[prices]`.

    [prices."claude-sonnet-4-5"]      # USD per million tokens
    input = 3.0
    output = 15.0
    cache_read = 0.3                  # optional: a tenth of input
    cache_write = 3.75                # optional: 1.25 times input (a five-minute write)

A table of agent.toml names a model exactly (`openai/gpt-5`, or `gpt-5` for every
provider's model of that name, or a prefix ending at a dash: `claude-sonnet-4-5` prices
`claude-sonnet-4-5-20250929`) and wins over the shipped table, which knows Anthropic's
and OpenAI's common models by family. A model neither knows has no price: its tokens
are shown with "cost unknown", never a guess. Prices change and this table does not
follow them: every figure is an estimate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

FIELDS = ("input", "output", "cache_read", "cache_write")
CACHE_READ = 0.1          # of the input price, when a table gives none
CACHE_WRITE = 1.25        # of the input price (a five-minute cache write)
BATCH = 0.5               # Message Batches cost half the list price
MAX_PRICE = 10_000.0      # USD per million tokens: over a hundred times the dearest model's


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""
    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, usage: dict[str, int], *, batch: bool = False) -> float:
        """USD for one usage dict (the API's names: input_tokens, output_tokens, ...)."""
        usd = (usage.get("input_tokens", 0) * self.input
               + usage.get("output_tokens", 0) * self.output
               + usage.get("cache_read_input_tokens", 0) * self.cache_read
               + usage.get("cache_creation_input_tokens", 0) * self.cache_write) / 1_000_000
        return usd * (BATCH if batch else 1.0)


def price(inp: float, out: float, cache_read: float | None = None,
          cache_write: float | None = None) -> Price:
    return Price(inp, out, inp * CACHE_READ if cache_read is None else cache_read,
                 inp * CACHE_WRITE if cache_write is None else cache_write)


# (model name pattern, input, output), first match wins.
DEFAULTS: tuple[tuple[re.Pattern[str], float, float], ...] = (
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
    (re.compile(r"\bo4-mini"), 1.1, 4.4),
    (re.compile(r"\bo3\b"), 2.0, 8.0),
)


def shipped(model: str) -> Price | None:
    """The shipped list price of the model's family, or None."""
    name = model.lower()
    for pattern, inp, out in DEFAULTS:
        if pattern.search(name):
            return price(inp, out)
    return None


def overrides(table: object) -> dict[str, Price]:
    """agent.toml's `[prices]` as Prices (the table checked by problems() first)."""
    out: dict[str, Price] = {}
    if not isinstance(table, dict):
        return out
    for model, t in table.items():
        if isinstance(t, dict) and not problems_of(str(model), t):
            out[str(model)] = price(float(t["input"]), float(t["output"]),
                                    _opt(t.get("cache_read")), _opt(t.get("cache_write")))
    return out


def _opt(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def lookup(model: str, table: dict[str, Price] | None = None) -> Price | None:
    """The price of `model`: agent.toml's table first (exact, without the provider, then
    the longest prefix ending at a dash), then the shipped one; None when unknown."""
    table = table or {}
    bare = model.partition("/")[2] if "/" in model else model
    for name in (model, bare):
        if name in table:
            return table[name]
    prefixes = [k for k in table if bare.startswith(k + "-") or model.startswith(k + "-")]
    if prefixes:
        return table[max(prefixes, key=len)]
    return shipped(bare)


def problems(table: object) -> list[str]:
    """What is wrong with agent.toml's `[prices]`, each naming its key."""
    if not isinstance(table, dict):
        return ["[prices] must hold one table per model, as in [prices.\"gpt-5\"] with "
                "input = 1.25 and output = 10.0 (USD per million tokens)"]
    out = []
    for model, t in table.items():
        out.extend(problems_of(str(model), t))
    return out


def problems_of(model: str, t: object) -> list[str]:
    at = f"prices.\"{model}\""
    if not isinstance(t, dict):
        return [f"{at} must be a table with input and output (USD per million tokens), "
                f"as in [{at}] input = 3.0, output = 15.0"]
    out = [f"{at}.{k} is not a price (input, output, cache_read, cache_write)"
           for k in t if k not in FIELDS]
    for k in ("input", "output"):
        if k not in t:
            out.append(f"{at} needs {k} (USD per million tokens)")
    for k in FIELDS:
        v = t.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or not 0 <= v <= MAX_PRICE:
            out.append(f"{at}.{k} must be a number of USD per million tokens, 0 to "
                       f"{MAX_PRICE:,.0f}, not {v!r}")
    return out
