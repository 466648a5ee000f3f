"""`agent models`: the models agent.toml names, which provider answers each, and which
answers chat and the dream. `configured` reads settings only (no network, no SDK);
`served` asks a provider's server what it serves, for `agent models --served` and
`agent doctor`.

A local server does not always list a model under the name agent.toml gives it:
llama-server lists the GGUF file it loaded (or its `--alias`) and answers whatever name
a request gives; Ollama lists `qwen3:latest` for `qwen3`; LM Studio and vLLM list what
they loaded. So a model counts as served when the listing names it, names it as a file
or a tag, or (for a server on this machine) when it answers a one-token request.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agent.config import load_settings
from agent.llm.spec import specs, split
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.llm.router import Router
    from agent.vault.repo import Vault


@dataclass
class ModelRow:
    model: str            # as agent.toml names it
    roles: list[str]      # "chat", "fallback 1", "dream"
    provider: str
    api: str              # "anthropic" or "openai"
    url: str
    key: str              # "$VAR (set)", "$VAR (not set)" or "none needed"
    context_window: int
    local: bool
    served: str | None = None     # with --served: how its server answers for it


def configured(vault: Vault) -> list[ModelRow]:
    """Each model of agent.toml once, in the order chat tries them, then the dream's."""
    settings = load_settings(vault.root)
    known = specs(settings)
    roles: dict[str, list[str]] = {}
    roles.setdefault(settings.model, []).append("chat")
    for n, m in enumerate(settings.fallback_models, 1):
        roles.setdefault(m, []).append(f"fallback {n}")
    roles.setdefault(settings.dream_model, []).append("dream")
    rows = []
    for model, its in roles.items():
        name, bare = split(model)
        spec = known[name]
        if spec.key_env:
            key = f"${spec.key_env} ({'set' if os.environ.get(spec.key_env, '').strip() else 'not set'})"
        else:
            key = "none needed"
        rows.append(ModelRow(model, its, name, spec.api, spec.url, key, spec.window(bare),
                             spec.local))
    return rows


# ---- what a server serves ----------------------------------------------------------------


def _stem(model_id: str) -> str:
    """`/models/SmolLM2-135M.Q4_1.gguf` -> `smollm2-135m.q4_1`; `qwen3:latest` -> `qwen3`."""
    base = model_id.replace("\\", "/").rsplit("/", 1)[-1].lower()
    for ending in (".gguf", ":latest"):
        base = base.removesuffix(ending)
    return base


def listed_as(model: str, listed: list[str]) -> str | None:
    """The id of `listed` that names `model`: the same id, or the same file or tag (a
    path to a GGUF file, Ollama's `:latest`), letter case aside; None when none does."""
    if model in listed:
        return model
    wanted = _stem(model)
    return next((m for m in listed if _stem(m) == wanted), None)


@dataclass
class Listing:
    """What a provider's server said to GET /models: the ids it lists, or why it did not
    answer (`problem`, with the ProviderError's status: None when it was not reached)."""
    provider: str
    url: str
    ids: list[str] = field(default_factory=list)
    problem: str | None = None
    status: int | None = None
    no_key: bool = False


def listing(router: Router, provider: str) -> Listing:
    """One call to the provider's /models (its key checked first)."""
    from agent.llm import ProviderError
    from agent.llm.spec import NoApiKey

    spec = router.specs[provider]
    try:
        spec.key()
        ids = router.backend(provider).list_models()
    except NoApiKey as e:
        return Listing(provider, spec.url, problem=str(e), no_key=True)
    except ProviderError as e:
        return Listing(provider, spec.url, problem=e.detail or str(e), status=e.status)
    return Listing(provider, spec.url, ids)


@dataclass
class Served:
    """How a server answers for one model: `listed` (under its own name), `as` (listed
    as `served_as`, a file or tag), `answers` (not listed, but a request for it is
    answered: the server takes any name), or `missing` (with the server's words)."""
    how: str
    served_as: str | None = None
    detail: str = ""

    def describe(self, model: str, listed: list[str]) -> str:
        if self.how == "listed":
            return f"lists {model}"
        if self.how == "as":
            return f"serves {model} as {self.served_as}"
        if self.how == "answers":
            what = f" (it serves {', '.join(listed)})" if listed else ""
            return f"answers for {model}{what}"
        return f"does not serve {model}" + (f": {self.detail}" if self.detail else "")


def served(router: Router, found: Listing, model: str) -> Served:
    """Whether the provider of `found` serves `model` (its bare name). A server on this
    machine that does not list it is asked for one token: llama-server, and others that
    hold one model, answer any name."""
    name = listed_as(model, found.ids)
    if name == model:
        return Served("listed", model)
    if name is not None:
        return Served("as", name)
    spec = router.specs[found.provider]
    if not spec.local:
        return Served("missing")
    from agent.llm import Message, ProviderError, Request

    try:
        router.backend(found.provider).create(
            model, Request([Message("user", "Say ok.")], max_tokens=1))
    except ProviderError as e:
        return Served("missing", detail=e.detail or str(e))
    return Served("answers")
