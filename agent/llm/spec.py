"""Which provider answers for a model name, and how to reach it.

A model is named `<provider>/<model>` ("local/qwen3:8b", "openai/gpt-5-mini") or bare
("claude-sonnet-4-5", an Anthropic model). The providers are the built-in `anthropic`
and `openai` and the `[providers.NAME]` tables of agent.toml (agent.config.providers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, TYPE_CHECKING

from agent.config import keys
from agent.config.providers import (ANTHROPIC_WINDOW, BUILTIN, LOCAL_WINDOW, OPENAI_WINDOW,
                                    is_loopback)
from agent.errors import UserError

if TYPE_CHECKING:
    from agent.config import Settings


class NoApiKey(UserError):
    """A provider's key variable is not set; exit status 2 like other usage problems."""

    exit_code = 2

    def __init__(self, message: str = "No API key: set ANTHROPIC_API_KEY") -> None:
        super().__init__(message)


class KeyNotApproved(NoApiKey):
    """A key agent.toml would send to a host this machine has not approved (see
    agent.config.keys): as good as no key, and the message says how to approve it."""


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    api: str                        # "anthropic" or "openai"
    base_url: str | None = None     # None: the SDK's default (or its *_BASE_URL variable)
    key_env: str = ""               # "": no key
    context_window: int = ANTHROPIC_WINDOW
    context_windows: dict[str, int] = field(default_factory=dict)
    structured: str = "json_schema"
    # Sampling options every request carries unless it sets its own (agent.config.providers
    # SAMPLING): a repeat or frequency penalty keeps a small local model from running away.
    sampling: dict[str, float] = field(default_factory=dict)

    def key(self) -> str | None:
        """The key from the environment (None when the provider needs none); NoApiKey
        naming the variable when it is unset, KeyNotApproved when this machine has not
        said it may go where the provider answers (agent.config.keys)."""
        if not self.key_env:
            return None
        key = os.environ.get(self.key_env, "").strip()
        if not key:
            if self.key_env == "ANTHROPIC_API_KEY":
                raise NoApiKey()
            raise NoApiKey(f"No API key for the provider {self.name}: set ${self.key_env}")
        pair = self.pair()
        why = pair.refusal() if pair is not None else None
        if why:
            raise KeyNotApproved(why)
        return key

    def pair(self) -> keys.Pair | None:
        """The key variable and the origin its requests go to (None: no key)."""
        return keys.provider_pair(self.name, self.api, self.base_url, self.key_env)

    def window(self, model: str) -> int:
        return self.context_windows.get(model, self.context_window)

    @property
    def url(self) -> str:
        """Where it answers, for messages: the base URL, else the SDK's default."""
        env = "ANTHROPIC_BASE_URL" if self.api == "anthropic" else "OPENAI_BASE_URL"
        default = "https://api.anthropic.com" if self.api == "anthropic" else \
            "https://api.openai.com/v1"
        return self.base_url or (os.environ.get(env) if self.name in BUILTIN else None) or default

    @property
    def local(self) -> bool:
        """Whether it answers on this machine (a configured server on loopback; the
        built-in ones, even behind a local proxy, are the vendors' and bill)."""
        return self.name not in BUILTIN and is_loopback(self.base_url)


def _builtin(name: str) -> ProviderSpec:
    if name == "openai":
        return ProviderSpec("openai", "openai", key_env="OPENAI_API_KEY",
                            context_window=OPENAI_WINDOW)
    return ProviderSpec("anthropic", "anthropic", key_env="ANTHROPIC_API_KEY")


def spec_of(name: str, table: dict[str, Any] | None) -> ProviderSpec:
    """The spec of provider `name` from its `[providers.NAME]` table, checked already
    (agent.config.providers; None: a built-in one)."""
    if table is None:
        return _builtin(name)
    api = table.get("api", "openai")
    base = _builtin(name) if name in BUILTIN and api == _builtin(name).api else None
    if table.get("key_env") is not None:
        key_env = table["key_env"]
    elif base is not None:
        key_env = base.key_env
    else:
        key_env = ""
    window = table.get("context_window") or (base.context_window if base else
                                             ANTHROPIC_WINDOW if api == "anthropic" else
                                             LOCAL_WINDOW)
    from agent.config.providers import SAMPLING

    return ProviderSpec(name, api, table.get("base_url"), key_env, window,
                        dict(table.get("context_windows") or {}),
                        "json_schema" if table.get("json_schema", True) else "json_object",
                        {k: table[k] for k in SAMPLING if table.get(k) is not None})


def specs(settings: Settings | None) -> dict[str, ProviderSpec]:
    """Every provider a model may name, for these settings (None: the built-in ones)."""
    tables = getattr(settings, "providers", None) or {}
    out = {name: _builtin(name) for name in BUILTIN}
    out.update({name: spec_of(name, t) for name, t in tables.items()})
    return out


def split(model: str) -> tuple[str, str]:
    """("local", "qwen3:8b") for "local/qwen3:8b"; ("anthropic", name) for a bare name."""
    provider, sep, rest = model.partition("/")
    return (provider, rest) if sep else ("anthropic", model)
