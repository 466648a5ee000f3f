"""The keys agent.toml would send, and where: each a pair of a variable and an origin,
which this machine approves or not (agent.config.keys). `agent keys`, `agent config
check`, `agent doctor` and the commands that ask at a terminal read them here."""

from __future__ import annotations

from agent.config import keys
from agent.llm.spec import specs, split
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.config import Settings


def models(settings: Settings) -> list[str]:
    """The models agent.toml names: chat's, its fallbacks, the dream's."""
    named = [settings.model, *settings.fallback_models, settings.dream_model]
    return [m for i, m in enumerate(named) if m and m not in named[:i]]


def pairs(settings: Settings, *, used: bool = False, model: str | None = None) -> list[keys.Pair]:
    """Each pair the settings make: the providers of agent.toml's models and of `model`
    (a command's --model; with `used`, only those, else every provider that has a key)
    and Telegram's bot token when its channel is on. One pair once, in that order."""
    known = specs(settings)
    names = [split(m)[0] for m in ([model] if model else []) + models(settings)]
    if not used:
        names += [n for n in known if n not in names]
    out: list[keys.Pair] = []
    for name in dict.fromkeys(names):
        spec = known.get(name)
        pair = spec.pair() if spec is not None else None
        if pair is not None and pair not in out:
            out.append(pair)
    if getattr(settings, "telegram_enabled", False):
        out.append(keys.telegram_pair(settings.telegram_api_base))
    return out


def not_approved(settings: Settings, *, used: bool = False) -> list[keys.Pair]:
    """The pairs of `pairs` whose key does not go (unapproved, or a vendor's key sent
    elsewhere)."""
    return [p for p in pairs(settings, used=used) if p.refusal() is not None]
