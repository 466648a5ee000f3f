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
    from agent.vault import safe

    path = Path(root) / "agent.toml"
    try:
        text = safe.read_text(root, "agent.toml", limit=1024 * 1024)
    except UserError as e:
        raise SettingsError(str(e)) from None
    if text is None:
        return Settings()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: {e}") from None
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply") from None

    def table(name: str) -> dict:
        value = data.get(name, {})
        if not isinstance(value, dict):
            raise SettingsError(f"{path}: [{name}] must be a table of settings (as in "
                                f"[{name}] then key = value lines), not {type(value).__name__}")
        return value

    model, identity, chat = table("model"), table("identity"), table("chat")
    memory, dream, serve = table("memory"), table("dream"), table("serve")
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
    except (TypeError, ValueError, OverflowError) as e:
        raise SettingsError(f"{path}: a setting has the wrong type: {e}") from None
    if not s.agent_name.strip() or not s.agent_email.strip() or any(
            c in s.agent_name + s.agent_email for c in "<>\n\0"):
        raise SettingsError(f"{path}: [identity] name and email must be non-empty and "
                            f"hold no <, > or line breaks")
    return s
