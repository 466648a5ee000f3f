"""`agent models`: the models agent.toml names, which provider answers each, and which
answers chat and the dream. Reads settings only: no network, no SDK."""

from __future__ import annotations

import os
from dataclasses import dataclass

from agent.config import load_settings
from agent.llm.spec import specs, split
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
