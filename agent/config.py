"""Vault settings from `agent.toml` (models, budgets, schedules; never secrets)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MODEL = "claude-sonnet-5-5"


from agent.errors import UserError


class SettingsError(UserError):
    pass


@dataclass
class Settings:
    model: str = DEFAULT_MODEL
    fallback_models: list[str] = field(default_factory=list)
    max_tokens: int = 4096
    agent_name: str = "agent"
    agent_email: str = "agent@localhost"
    window_tokens: int = 24000        # the active window's budget before compaction
    max_iterations: int = 12          # tool-loop cap per turn
    memory_max_lines: int = 200       # MEMORY.md size budget the dream is held to
    dream_model: str = DEFAULT_MODEL
    dream_schedule: str = "0 3 * * *"
    dream_chunk_tokens: int = 60000
    idle_compact_minutes: int = 120
    raw: dict = field(default_factory=dict)


def load_settings(root: Path) -> Settings:
    """Settings of the vault at `root`; a clear SettingsError names a broken agent.toml."""
    path = Path(root) / "agent.toml"
    if not path.exists():
        return Settings()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: {e}") from None
    model = data.get("model", {})
    identity = data.get("identity", {})
    chat = data.get("chat", {})
    memory = data.get("memory", {})
    dream = data.get("dream", {})
    serve = data.get("serve", {})
    s = Settings(raw=data)
    try:
        s.model = str(model.get("name", s.model))
        s.fallback_models = [str(m) for m in model.get("fallbacks", [])]
        s.max_tokens = int(model.get("max_tokens", s.max_tokens))
        s.agent_name = str(identity.get("name", s.agent_name))
        s.agent_email = str(identity.get("email", s.agent_email))
        s.window_tokens = int(chat.get("window_tokens", s.window_tokens))
        s.max_iterations = int(chat.get("max_iterations", s.max_iterations))
        s.memory_max_lines = int(memory.get("max_lines", s.memory_max_lines))
        s.dream_model = str(dream.get("model", s.model))
        s.dream_schedule = str(dream.get("schedule", s.dream_schedule))
        s.dream_chunk_tokens = int(dream.get("chunk_tokens", s.dream_chunk_tokens))
        s.idle_compact_minutes = int(serve.get("idle_compact_minutes", s.idle_compact_minutes))
    except (TypeError, ValueError) as e:
        raise SettingsError(f"{path}: a setting has the wrong type: {e}") from None
    return s
