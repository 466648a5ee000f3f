"""The `[providers.<name>]` tables of agent.toml: which services answer for a model
named `<provider>/<model>` (a pydantic model checks each table), and the built-in two
that need no table.

    [providers.local]
    api = "openai"                       # OpenAI-compatible chat completions
    base_url = "http://127.0.0.1:11434/v1"
    key_env = ""                         # no key; else the environment variable's name
    context_window = 32768               # tokens, for every model of this provider
    context_windows = { "qwen3:8b" = 40960 }   # or per model

A key is never a setting: agent.toml is synced, and a key in it would sit in every
clone's history. Only the name of the variable that holds it is, and the key goes
only where this machine said it may (agent.config.keys).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from agent.schemas import in_words as said

BUILTIN = ("anthropic", "openai")
ANTHROPIC_WINDOW = 200_000
OPENAI_WINDOW = 128_000
LOCAL_WINDOW = 32_768
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
_KEY_ENV = re.compile(r"^[A-Z][A-Z0-9_]*(KEY|TOKEN)$")


_MODEL = None


def table_model():
    """The pydantic model of one `[providers.NAME]` table (made at the first check:
    pydantic is not loaded by a command whose settings were found sound before)."""
    global _MODEL
    if _MODEL is None:
        from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

        class ProviderTable(BaseModel):
            model_config = ConfigDict(extra="forbid")

            api: Literal["openai", "anthropic"] = "openai"
            base_url: StrictStr | None = Field(default=None, pattern=r"^https?://[^/\s]+")
            key_env: StrictStr | None = None
            context_window: StrictInt | None = Field(default=None, ge=1000)
            context_windows: dict[str, StrictInt] = {}
            json_schema: bool = True   # false: the server has no response_format json_schema
            # Sampling every request to this provider carries (a request's own wins).
            temperature: float | None = Field(default=None, ge=0, le=2)
            top_p: float | None = Field(default=None, gt=0, le=1)
            top_k: StrictInt | None = Field(default=None, ge=1)
            min_p: float | None = Field(default=None, ge=0, le=1)
            frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
            presence_penalty: float | None = Field(default=None, ge=-2, le=2)
            repeat_penalty: float | None = Field(default=None, ge=0, le=5)
        _MODEL = ProviderTable
    return _MODEL


def is_loopback(url: str | None) -> bool:
    from agent.config.keys import is_loopback as here
    return bool(url) and here(url)


# The sampling options a provider's table may set: the OpenAI API's own, and those that
# llama.cpp's server (and vLLM, LM Studio) also take; Anthropic's API takes the first three.
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
            "repeat_penalty")
ANTHROPIC_SAMPLING = ("temperature", "top_p", "top_k")
_RANGES = {"temperature": "0 to 2", "top_p": "above 0 to 1", "top_k": "1 up",
           "min_p": "0 to 1", "frequency_penalty": "-2 to 2", "presence_penalty": "-2 to 2",
           "repeat_penalty": "0 to 5"}


def loc_sampling(err: Mapping[str, Any]) -> bool:
    return bool(err.get("loc")) and err["loc"][-1] in SAMPLING


def _where(loc: tuple) -> str:
    return ".".join(str(p) for p in loc)


def _why(err: Mapping[str, Any]) -> str:
    if loc_sampling(err):
        kind = err["type"]
        if kind in ("greater_than_equal", "less_than_equal", "greater_than"):
            return f"must be a number from {_RANGES[err['loc'][-1]]}, not {err.get('input')!r}"
        if kind in ("float_type", "float_parsing"):
            return f"must be a number, not {err.get('input')!r}"
    return said(err, {
        "extra_forbidden": "is not a setting of a provider (api, base_url, key_env, "
                           "context_window, context_windows, json_schema, or a sampling "
                           "option: " + ", ".join(SAMPLING) + ")",
        "literal_error": "must be \"openai\" or \"anthropic\", not {value!r}",
        "string_pattern_mismatch": "must be an http(s) address such as "
                                   "\"http://127.0.0.1:11434/v1\", not {value!r}",
        "greater_than_equal": "must be at least 1000 tokens, not {value!r}",
        "int_type": "must be a whole number of tokens, not {value!r}",
        "int_parsing": "must be a whole number of tokens, not {value!r}"})


def problems(section) -> list[str]:
    """What is wrong with agent.toml's `[providers]` tables, each naming its key."""
    if not isinstance(section, dict):
        return ["[providers] must hold tables, as in [providers.local]"]
    out = []
    for name, table in section.items():
        at = f"providers.{name}"
        secret = [k for k in (table if isinstance(table, dict) else {}) if k != "key_env"
                  and re.search(r"key$|token|secret|password", str(k), re.IGNORECASE)]
        for k in secret:
            out.append(f"{at}.{k}: a key is a secret and is never read from agent.toml (it is "
                       f"synced with the vault); remove the line, set key_env = \"NAME_OF_"
                       f"VARIABLE\" and export the key in that variable")
        if secret:
            continue
        if not _NAME.match(str(name)):
            out.append(f"[{at}]: a provider's name is lower-case letters, digits, - and _ "
                       f"(it is the part before / in a model's name)")
            continue
        if not isinstance(table, dict):
            out.append(f"[{at}] must be a table of settings")
            continue
        from pydantic import ValidationError
        try:
            t = table_model().model_validate(table)
        except ValidationError as e:
            out.extend(f"{at}.{_where(err['loc'])} {_why(err)}" for err in e.errors())
            continue
        out.extend(_key_problems(at, name, t))
        if t.api == "anthropic":
            out.extend(f"{at}.{k}: Anthropic's API takes only {', '.join(ANTHROPIC_SAMPLING)}"
                       for k in SAMPLING if k not in ANTHROPIC_SAMPLING
                       and getattr(t, k) is not None)
    return out


def _key_problems(at: str, name: str, t) -> list[str]:
    env = t.key_env
    if env is None and name in BUILTIN:         # the built-in provider's own variable
        env = f"{name.upper()}_API_KEY"
    if env is None or env == "":
        return []
    if not _KEY_ENV.match(env):
        return [f"{at}.key_env names the environment variable holding the key, which must "
                f"end in KEY or TOKEN (as OPENROUTER_API_KEY), not {env!r}"]
    from agent.config import keys
    pair = keys.provider_pair(name, t.api, t.base_url, env)
    if pair is not None and pair.state() == "refused":
        return [f"{pair.refusal()} (key_env = \"{name.upper().replace('-', '_')}_API_KEY\")"]
    return []
