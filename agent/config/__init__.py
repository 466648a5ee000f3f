"""Vault settings from `agent.toml` (models, budgets, schedules; never secrets).

`SCHEMA` is the one list of the settings the product knows: every command validates
the file against it when it reads it (`load_settings`), and `agent config` checks, gets
and sets by it. A bad file is refused with a one-line error naming the key.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from agent.errors import UserError
from agent.config.checking import (check_value, findings, model_problems, problems,
                                   hint, provider_names, table_of, unknown, warn_unknown)
from agent.config.schema import DEFAULT_MODEL, KEYS, SCHEMA, SECTIONS, Key
from agent.config.values import SettingsError, parse_size, show_size, user_ids

__all__ = ["CHECKED", "DEFAULT_MODEL", "FILE", "KEYS", "SCHEMA", "SECTIONS", "Key", "Settings",
           "SettingsError", "check_value", "find_key", "findings", "from_data", "load_settings",
           "model_problems", "parse_size", "parse_value", "path_of", "problems",
           "provider_key", "provider_names", "read_data", "show_size", "table_of", "unknown",
           "warn_unknown"]

FILE = "agent.toml"


@dataclass
class Settings:
    model: str = DEFAULT_MODEL
    fallback_models: list[str] = field(default_factory=list)
    max_tokens: int = 4096
    agent_name: str = "agent"
    agent_email: str = "agent@localhost"
    window_tokens: int = 24000        # the active window's budget before compaction
    max_iterations: int = 12          # tool-loop cap per turn
    force_remember: bool = True       # an ask to remember forces the remember tool
    turn_timeout: int = 900           # seconds a turn may take before it is cut
    max_message_tokens: int = 20000   # longer messages reach the model as head and tail
    memory_max_lines: int = 200       # MEMORY.md size budget the dream is held to
    memory_learn: str = "auto"        # "explicit": the dream learns only what was asked
    dream_model: str = DEFAULT_MODEL
    dream_schedule: str = "0 3 * * *"
    dream_chunk_tokens: int = 60000
    dream_raw_tokens: int = 2000      # raw messages shown per archive entry, besides its summary
    dream_max_tokens: int = 16000     # a dream reply's output budget, in both phases
    dream_review: str = "changes"     # which dream edits wait for `agent review`
    dream_concurrency: int = 4        # plain calls in flight at once, without batches
    idle_compact_minutes: int = 120
    exec_enabled: bool = True
    exec_network: bool = False
    exec_timeout: int = 60
    exec_max_timeout: int = 600
    exec_memory: int = 1024 ** 3              # bytes (agent.toml says "1G")
    exec_tmp_size: int = 100 * 1024 ** 2      # bytes
    exec_workspace_quota: int = 50 * 1024 ** 2   # bytes
    web_enabled: bool = True
    web_allow_private: bool = False
    web_timeout: int = 20
    web_max_bytes: int = 5_000_000
    agents_max_depth: int = 3
    agents_max_running: int = 20
    telegram_enabled: bool = False
    telegram_allow_from: list = field(default_factory=list)
    telegram_api_base: str = "https://api.telegram.org"
    sync_every: str | None = None     # serve's sync interval (a duration), None: no sync
    sync_remote: str | None = None
    gateway_port: int | None = None   # None: no HTTP gateway
    gateway_host: str = "127.0.0.1"
    gateway_timeout: int = 30         # seconds a connection may sit idle
    providers: dict = field(default_factory=dict)   # name -> its [providers.NAME] table
    raw: dict = field(default_factory=dict)


def path_of(root: Path) -> Path:
    return Path(root) / FILE


def read_data(root: Path) -> tuple[dict, str | None]:
    """(parsed agent.toml, its text) — ({}, None) when there is none; SettingsError names
    the file and line of a syntax error (and a file that is no regular file, too big or
    not UTF-8: agent.fs.safe)."""
    from agent.fs import safe

    path = path_of(root)
    try:
        text = safe.read_text(root, FILE, limit=1024 * 1024)
    except UserError as e:
        raise SettingsError(str(e)) from None
    if text is None:
        return {}, None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: {e}") from None
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply") from None


def from_data(data: dict, where: str = FILE) -> Settings:
    """Settings from parsed data; SettingsError names the first bad key."""
    bad = problems(data)
    if bad:
        more = f" (and {len(bad) - 1} more: agent config check lists them)" if len(bad) > 1 else ""
        raise SettingsError(f"{where}: {bad[0]}{more}")
    warn_unknown(data, where)
    return _settings(data)


def _settings(data: dict) -> Settings:
    """Settings from parsed data already checked."""
    s = Settings(raw=data)
    for k in SCHEMA:
        if k.attr is None:
            continue
        value = (table_of(data, k.section) or {}).get(k.name)
        if value is not None:
            setattr(s, k.attr, list(value) if k.kind is list else value)
    s.telegram_allow_from = user_ids(s.telegram_allow_from)
    s.telegram_api_base = s.telegram_api_base.rstrip("/")
    for attr in ("exec_memory", "exec_tmp_size", "exec_workspace_quota"):
        if isinstance(getattr(s, attr), str):
            setattr(s, attr, parse_size(getattr(s, attr)))
    if "model" not in (data.get("dream") or {}) and "dream" not in (data.get("model") or {}):
        s.dream_model = s.model
    if isinstance(data.get("providers"), dict):
        s.providers = {name: dict(t) for name, t in data["providers"].items()}
    return s


CHECKED = ".agent/settings.checked"


def _checked_digest(text: str) -> str:
    """What `CHECKED` holds for an agent.toml found sound: a hash of its text and of
    this package's checking code (a new version checks again)."""
    import hashlib

    here = Path(__file__).parent
    code = ";".join(f"{p.name}:{st.st_mtime_ns}:{st.st_size}"
                    for p in sorted(here.glob("*.py")) for st in [p.stat()])
    return hashlib.sha256(f"{code}\0{text}".encode()).hexdigest()


def load_settings(root: Path) -> Settings:
    """Settings of the vault at `root`; a clear SettingsError names a broken agent.toml
    and its bad key.

    An agent.toml found sound before (the same text, the same checking code) is not
    checked again: loading pydantic would cost every command's start-up more than the
    rest of reading the settings."""
    data, text = read_data(root)
    if text is None:
        return from_data(data, str(path_of(root)))
    mark = Path(root) / CHECKED
    digest = _checked_digest(text)
    try:
        if mark.read_text(encoding="ascii") == digest:
            return _settings(data)
    except (OSError, UnicodeDecodeError):
        pass
    settings = from_data(data, str(path_of(root)))
    if not unknown(data) and mark.parent.is_dir():
        from agent.fs import atomic
        try:
            atomic.write_text(mark, digest)
        except OSError:
            pass                # a read-only vault checks each time
    return settings


def parse_value(k: Key, text: str):
    """A value typed on the command line for setting `k` (TOML syntax also accepted)."""
    if k.kind is bool:
        low = text.strip().lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        raise SettingsError(f"{k.key} must be true or false, not {text!r}")
    if k.kind is int:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise SettingsError(f"{k.key} must be a whole number, not {text!r}") from None
    if k.kind is float:
        try:
            return float(text.replace("_", ""))
        except ValueError:
            raise SettingsError(f"{k.key} must be a number, not {text!r}") from None
    if k.kind is list:
        stripped = text.strip()
        if stripped.startswith("["):
            try:
                return tomllib.loads(f"v = {stripped}")["v"]
            except tomllib.TOMLDecodeError:
                raise SettingsError(f"{k.key}: {text!r} is not a TOML list, as in "
                                    f"'[\"a\", \"b\"]'") from None
        return [p.strip() for p in stripped.split(",") if p.strip()]
    return text


def find_key(key: str) -> Key:
    k = KEYS.get(key)
    if k is None and key.startswith("channels.") and "token" in key.rsplit(".", 1)[-1].lower():
        raise SettingsError(f"{key} is not a setting: a bot token is a secret and never goes "
                            f"in agent.toml (the vault is no place for secrets); set "
                            f"$TELEGRAM_BOT_TOKEN in agent serve's environment instead.")
    if k is None and key.startswith("providers."):
        k = provider_key(key)
    if k is None:
        raise SettingsError(f"Unknown setting {key}{hint(key, KEYS)}.")
    return k


_PROVIDER_FIELDS = {"api": (str, "\"openai\" (chat completions) or \"anthropic\""),
                    "base_url": (str, "the server's address, as http://127.0.0.1:11434/v1"),
                    "key_env": (str, "the environment variable holding the key (\"\": none)"),
                    "context_window": (int, "the models' context window in tokens"),
                    "json_schema": (bool, "the server takes response_format json_schema"),
                    "temperature": (float, "sampling temperature of every request"),
                    "top_p": (float, "nucleus sampling of every request"),
                    "top_k": (int, "top-k sampling of every request"),
                    "min_p": (float, "min-p sampling of every request (llama.cpp)"),
                    "frequency_penalty": (float, "penalty on tokens by how often they came"),
                    "presence_penalty": (float, "penalty on tokens that came at all"),
                    "repeat_penalty": (float, "llama.cpp's penalty on repeated tokens")}


def provider_key(key: str) -> Key | None:
    """A setting of a `[providers.NAME]` table, as `agent config set` takes it."""
    parts = key.split(".")
    if len(parts) != 3:
        return None
    _, name, field_name = parts
    if field_name not in _PROVIDER_FIELDS:
        from agent.config.providers import problems as provider_problems
        wrong = provider_problems({name: {field_name: ""}})
        if wrong and "secret" in wrong[0]:
            raise SettingsError(wrong[0].replace(":", " is not a setting:", 1))
        return None
    kind, help_text = _PROVIDER_FIELDS[field_name]

    def check(value) -> str | None:
        from agent.config.providers import problems as provider_problems
        wrong = provider_problems({name: {field_name: value}})
        return wrong[0].split(" ", 1)[1] if wrong else None
    return Key(key, kind, None, help_text, check=check)
