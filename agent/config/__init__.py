"""Vault settings from `agent.toml` (models, budgets, schedules; never secrets).

`SCHEMA` is the one list of the settings the product knows: every command validates
the file against it when it reads it (`load_settings`), and `agent config` checks, gets
and sets by it. A bad file is refused with a one-line error naming the key.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from agent.errors import UserError, did_you_mean

DEFAULT_MODEL = "claude-sonnet-5-5"
FILE = "agent.toml"


class SettingsError(UserError):
    pass


@dataclass(frozen=True)
class Key:
    """One setting: `section.name` in agent.toml, its type, default and bounds."""
    key: str                     # "chat.window_tokens"
    kind: type                   # int, str, bool or list (of strings)
    default: object
    help: str
    attr: str | None = None      # the Settings field it fills (None: read elsewhere from raw)
    min: int | None = None
    no_chars: str = ""           # characters a string may not hold
    check: object = None         # a function value -> problem or None, for what kind can't say

    @property
    def section(self) -> str:
        """The table: `chat`, or `channels.telegram` for a nested one."""
        return self.key.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[1]


def _user_ids(value) -> str | None:
    """Telegram user ids: whole numbers, written bare or in quotes."""
    if not isinstance(value, list):
        return f"must be a list of Telegram user ids, as in [123456789], not {value!r}"
    for v in value:
        if isinstance(v, bool) or not (isinstance(v, int) or
                                       (isinstance(v, str) and v.strip().isdigit())):
            return (f"must be a list of Telegram user ids (whole numbers, as in [123456789]); "
                    f"{v!r} is not one")
    return None


def user_ids(values) -> list[int]:
    """allow_from as numbers (checked by _user_ids)."""
    return [int(str(v).strip()) for v in values]


def _http_url(value) -> str | None:
    if not isinstance(value, str) or not re.match(r"^https?://[^/\s]+", value):
        return f"must be an http(s) address such as \"https://api.telegram.org\", not {value!r}"
    return None


def _duration(value) -> str | None:
    """A duration as people write it (90s, 5m, 2h, 1d)."""
    from agent.schedule import ScheduleError, parse_duration
    if not isinstance(value, str):
        return f"must be a duration in quotes, such as \"5m\", not {value!r}"
    try:
        parse_duration(value)
    except ScheduleError as e:
        return f"must be a duration such as \"5m\" or \"1h\" ({e})"
    return None


_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size as people write it: "1G", "512M", "100 MB", "1 GiB" (K, M, G
    and T count in 1024s, as ulimit and tmpfs do); SettingsError when it is none."""
    m = _SIZE.match(str(text)) if isinstance(text, str) else None
    if m is None or (not m.group(2) and not str(text).strip().upper().endswith("B")):
        raise SettingsError(f"{text!r} is not a size: write it in quotes with a unit, "
                            f"as \"1G\", \"512M\" or \"100 MB\"")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def show_size(n: int) -> str:
    """A size in the unit it is a whole number of: 1 GiB, 100 MiB, 1536 KiB."""
    for unit, name in ((1024 ** 3, "GiB"), (1024 ** 2, "MiB"), (1024, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"


def _size_value(value) -> str | None:
    try:
        n = parse_size(value)
    except SettingsError as e:
        return f"must be a size such as \"1G\" or \"100M\" ({e})"
    return None if n > 0 else "must be more than 0 bytes"


SCHEMA: tuple[Key, ...] = (
    Key("model.name", str, DEFAULT_MODEL, "the model chat uses", "model"),
    Key("model.fallbacks", list, [], "models tried in order when it is overloaded or unavailable",
        "fallback_models"),
    Key("model.fallback", list, [], "the same as model.fallbacks", "fallback_models"),
    Key("model.dream", str, None, "the same as dream.model", "dream_model"),
    Key("model.max_tokens", int, 4096, "the most tokens a reply may have", "max_tokens", min=1),
    Key("identity.name", str, "agent", "the author name of the agent's commits", "agent_name",
        no_chars="<>\n\0"),
    Key("identity.email", str, "agent@localhost", "the author email of the agent's commits",
        "agent_email", no_chars="<>\n\0"),
    Key("chat.window_tokens", int, 24000,
        "the conversation window's budget in tokens before compaction", "window_tokens", min=1),
    Key("chat.max_message_tokens", int, 20000,
        "a message longer than this reaches the model as its head and tail (kept whole)",
        "max_message_tokens", min=1000),
    Key("chat.max_iterations", int, 12, "model calls per turn at most", "max_iterations", min=1),
    Key("chat.turn_timeout", int, 900, "seconds a turn may take, model calls and tools "
        "together (a slow local model's runaway reply is cut there)", "turn_timeout", min=1),
    Key("chat.force_remember", bool, True, "a message that asks to remember something (\"remember "
        "that...\") makes the turn's first model call a `remember` call", "force_remember"),
    Key("memory.max_lines", int, 200, "MEMORY.md's size budget in lines", "memory_max_lines",
        min=1),
    Key("memory.learn", str, "auto", "what the dream learns: \"auto\" (whatever the "
        "conversations show is worth keeping) or \"explicit\" (only what the person asked "
        "to remember)", "memory_learn",
        check=lambda v: None if v in ("auto", "explicit") else
        f"must be \"auto\" or \"explicit\", not {v!r}"),
    Key("dream.model", str, None, "the model the dream uses (default: model.name)", "dream_model"),
    Key("dream.schedule", str, "0 3 * * *", "when `agent serve` dreams (cron syntax, local time)",
        "dream_schedule"),
    Key("dream.chunk_tokens", int, 60000, "archive tokens per dream request",
        "dream_chunk_tokens", min=1),
    Key("dream.raw_tokens", int, 2000, "raw transcript tokens shown with each archive entry",
        "dream_raw_tokens", min=0),
    Key("dream.max_tokens", int, 16000, "the most tokens a dream reply may have",
        "dream_max_tokens", min=1),
    Key("dream.concurrency", int, 4, "requests the dream sends at once to a provider "
        "without a Batches API (a local server: 1)", "dream_concurrency", min=1),
    Key("dream.review", str, "changes", "which dream edits wait for `agent review`: "
        "\"changes\" (updates and removals), \"all\" or \"off\"", "dream_review",
        check=lambda v: None if v in ("all", "changes", "off") else
        f"must be \"all\", \"changes\" or \"off\", not {v!r}"),
    Key("serve.idle_compact_minutes", int, 120,
        "archive a conversation idle this long (0: never)", "idle_compact_minutes", min=0),
    Key("exec.enabled", bool, True, "offer the sandboxed `exec` tool (needs bwrap)",
        "exec_enabled"),
    Key("exec.network", bool, False, "commands run by `exec` may reach the network",
        "exec_network"),
    Key("exec.timeout", int, 60, "a command's default time limit in seconds", "exec_timeout",
        min=1),
    Key("exec.max_timeout", int, 600, "the longest time limit a command may ask for, seconds",
        "exec_max_timeout", min=1),
    Key("exec.memory", str, "1G", "address space each process of a command may use "
        "(RLIMIT_AS), as \"1G\" or \"512M\"", "exec_memory", check=_size_value),
    Key("exec.tmp_size", str, "100M", "what a command's private /tmp (and /dev/shm) may "
        "hold, as \"100M\"", "exec_tmp_size", check=_size_value),
    Key("exec.workspace_quota", str, "50M", "what one turn's commands may add to workspace/ "
        "and have committed; the rest stays there uncommitted", "exec_workspace_quota",
        check=_size_value),
    Key("web.enabled", bool, True, "offer the `web_fetch` tool", "web_enabled"),
    Key("web.allow_private", bool, False,
        "`web_fetch` may reach loopback and private addresses", "web_allow_private"),
    Key("web.timeout", int, 20, "seconds one fetch may take, redirects included", "web_timeout",
        min=1),
    Key("web.max_bytes", int, 5_000_000, "the most of a page that is downloaded",
        "web_max_bytes", min=1),
    Key("agents.max_depth", int, 3, "how deep sub-agents may nest", "agents_max_depth", min=0),
    Key("agents.max_running", int, 20, "sub-agents running at once at most",
        "agents_max_running", min=1),
    # The bot token is never a setting: it comes from $TELEGRAM_BOT_TOKEN only.
    Key("channels.telegram.enabled", bool, False,
        "`agent serve` talks on Telegram (token from $TELEGRAM_BOT_TOKEN)", "telegram_enabled"),
    Key("channels.telegram.allow_from", list, [],
        "Telegram user ids allowed to talk to the agent", "telegram_allow_from",
        check=_user_ids),
    Key("channels.telegram.api_base", str, "https://api.telegram.org",
        "the Bot API's address (requests go to {api_base}/bot{token}/{method})",
        "telegram_api_base", check=_http_url),
    Key("sync.every", str, None, "how often `agent serve` syncs with the remote (a duration "
        "such as 5m; unset: serve does not sync)", "sync_every", check=_duration),
    Key("sync.remote", str, None, "the remote `agent serve` syncs with (default: the "
        "branch's upstream, else origin)", "sync_remote", no_chars=" \n\0"),
    Key("gateway.port", int, None, "`agent serve` answers HTTP on this port (0: any free "
        "one; unset: no gateway)", "gateway_port", min=0),
    Key("gateway.host", str, "127.0.0.1", "the address the gateway listens on",
        "gateway_host"),
    Key("gateway.timeout", int, 30, "seconds a gateway client has to send a whole request "
        "(headers and body, from its first byte) or, once connected, anything at all",
        "gateway_timeout", min=1),
    Key("security.redact_secrets", bool, True, "replace API keys, tokens, private keys and "
        "passwords in URLs by [secret:KIND] before they reach the vault or the model"),
)
KEYS = {k.key: k for k in SCHEMA}
SECTIONS = sorted({k.section for k in SCHEMA})


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


def _adapter(k: Key):
    """The pydantic TypeAdapter that checks values of `k` (made at the first check)."""
    adapter = _ADAPTERS.get(k.key)
    if adapter is not None:
        return adapter
    from typing import Annotated, Any

    from pydantic import AfterValidator, Field, StrictBool, StrictInt, StrictStr, TypeAdapter

    def ours(check):
        def run(value):
            wrong = check(value)
            if wrong:
                raise ValueError(wrong)
            return value
        return AfterValidator(run)

    def no_chars(value: str) -> str | None:
        bad = [c for c in k.no_chars if c in value]
        return f"must not hold {', '.join(repr(c) for c in bad)}" if bad else None

    text = Annotated[StrictStr, Field(pattern=r"\S")]
    kind: Any
    if k.check is not None:
        kind = Annotated[Any, ours(k.check)]
    elif k.kind is bool:
        kind = StrictBool
    elif k.kind is int:
        kind = Annotated[StrictInt, Field(ge=k.min)] if k.min is not None else StrictInt
    elif k.kind is list:
        kind = list[text]
    else:
        kind = Annotated[text, ours(no_chars)] if k.no_chars else text
    adapter = _ADAPTERS[k.key] = TypeAdapter(kind)
    return adapter


_ADAPTERS: dict[str, object] = {}


def check_value(k: Key, value) -> str | None:
    """What is wrong with `value` for the setting `k`, or None (pydantic checks it; its
    first error is said in the words of agent.toml)."""
    from pydantic import ValidationError

    try:
        _adapter(k).validate_python(value)
    except ValidationError as e:
        err = e.errors()[0]
        if k.kind is list and k.check is None:
            return f"must be a list of strings, as in [\"a\", \"b\"], not {value!r}"
        return _said(err, value, k)
    return None


def _said(err: dict, value, k: Key) -> str:
    kind = err["type"]
    if kind == "value_error":
        return str(err["ctx"]["error"])
    if kind == "bool_type":
        return f"must be true or false, not {value!r}"
    if kind == "int_type":
        return f"must be a whole number, not {value!r}"
    if kind == "greater_than_equal":
        return f"must be at least {k.min}, not {value}"
    if kind == "string_type":
        return f"must be a string (in quotes), not {value!r}"
    if kind == "string_pattern_mismatch":
        return "must not be empty"
    return f"{err['msg'][:1].lower()}{err['msg'][1:]}, not {value!r}"


def _hint(word: str, choices) -> str:
    close = did_you_mean(word, choices)          # " Did you mean X?"
    return f" (d{close[2:]})" if close else " (agent config list shows the settings)"


def table_of(data: dict, section: str):
    """The table `section` (dotted for a nested one) of parsed data, or None."""
    table = data
    for part in section.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    return table


def _nested(prefix: str) -> list[str]:
    """The sections under `prefix`: channels -> [channels.telegram]."""
    return sorted(s for s in SECTIONS if s.startswith(prefix + "."))


def findings(data: dict) -> list[str]:
    """What `agent config check` reports of parsed agent.toml data as errors: its
    problems, and a dream schedule that is no cron expression."""
    found = problems(data)
    dream = data.get("dream")
    schedule = dream.get("schedule") if isinstance(dream, dict) else None
    if isinstance(schedule, str) and schedule.strip():
        from agent import schedule as sched
        try:
            sched.check_cron(schedule)
        except UserError as e:
            found.append(f"dream.schedule: {e}")
    return found


def problems(data: dict, unknown: list[str] | None = None) -> list[str]:
    """Every problem of parsed agent.toml data, each naming its key. An unknown key is no
    problem (a newer version on another machine may have written it): it goes to
    `unknown` when given, see also unknown()."""
    errors, unknowns = _walk(data)
    if unknown is not None:
        unknown.extend(unknowns)
    return errors + model_problems(data)


def unknown(data: dict) -> list[str]:
    """The keys and sections of agent.toml no setting knows (a typo, or a setting of a
    newer version synced from another machine): warned of and ignored."""
    _, warnings = _walk(data)
    return warnings


def _walk(data: dict, prefix: str = "") -> tuple[list[str], list[str]]:
    out, unknowns = [], []
    for section, table in data.items():
        if prefix:
            section = f"{prefix}.{section}"
        elif section == "mcp":
            # MCP servers are named tables of their own; agent.chat.mcp_client.client checks them.
            from agent.config.mcp_servers import problems as mcp_problems
            out.extend(mcp_problems(table))
            continue
        elif section == "providers":
            from agent.config.providers import problems as provider_problems
            out.extend(provider_problems(table))
            continue
        elif section == "prices":
            # One table per model, named as the models are: agent/prices.py checks them.
            from agent.prices import problems as price_problems
            out.extend(price_problems(table))
            continue
        if section not in SECTIONS and _nested(section):
            if not isinstance(table, dict):
                out.append(f"[{section}] must be a table, as in [{_nested(section)[0]}]")
            else:
                more, also = _walk(table, section)
                out.extend(more)
                unknowns.extend(also)
            continue
        if section not in SECTIONS:
            where = _nested(prefix) if prefix else SECTIONS
            unknowns.append(f"unknown section [{section}]{_hint(section, where)}")
            continue
        if not isinstance(table, dict):
            out.append(f"[{section}] must be a table of settings ([{section}] then "
                       f"key = value lines), not {table!r}")
            continue
        for name, value in table.items():
            key = f"{section}.{name}"
            k = KEYS.get(key)
            if k is None and section.startswith("channels.") and "token" in str(name).lower():
                out.append(f"{key}: a bot token is a secret and is never read from agent.toml "
                           f"(the vault is no place for secrets); remove the line and set "
                           f"$TELEGRAM_BOT_TOKEN in agent serve's environment")
                continue
            if k is None:
                unknowns.append(f"unknown setting {key}{_hint(key, KEYS)}")
                continue
            wrong = check_value(k, value)
            if wrong:
                out.append(f"{key} {wrong}")
    return out, unknowns


def provider_names(data: dict) -> list[str]:
    """The providers a model may name: the built-in ones and agent.toml's tables."""
    from agent.config.providers import BUILTIN

    section = data.get("providers")
    return sorted({*BUILTIN, *(section if isinstance(section, dict) else {})})


def model_problems(data: dict) -> list[str]:
    """A model named `<provider>/<model>` whose provider is neither built in nor a table."""
    names = provider_names(data)
    out = []
    for k in ("model.name", "model.fallbacks", "model.fallback", "model.dream", "dream.model"):
        table = table_of(data, KEYS[k].section)
        value = table.get(KEYS[k].name) if isinstance(table, dict) else None
        for model in value if isinstance(value, list) else [value]:
            if isinstance(model, str) and "/" not in model:
                # A bare name is an Anthropic model: one of another vendor's would be
                # sent to Anthropic's API (and fail there, or be billed as a fallback).
                if (other := vendor_of(model)) is not None:
                    meant = _provider_for(other, data)
                    table = "" if meant in names else \
                        f" (with a [providers.{meant}] table for its server: docs/providers.md)"
                    out.append(f"{k}: {model!r} is not an Anthropic model (a name without "
                               f"a provider is one); did you mean {meant}/{model}?{table}")
                continue
            if not isinstance(model, str):
                continue
            provider, _, rest = model.partition("/")
            if provider not in names:
                close = did_you_mean(provider, names)      # " Did you mean X?"
                out.append(f"{k}: {model!r} names the provider {provider!r}, which agent.toml "
                           f"does not define{f' (d{close[2:]})' if close else ''}; add a [providers."
                           f"{provider}] table or use one of {', '.join(names)}")
            elif not rest.strip():
                out.append(f"{k}: {model!r} names no model after {provider}/")
    return out


# Model names no Anthropic model has: OpenAI's families, and the open models a local
# server (Ollama, llama.cpp, vLLM, LM Studio) serves. Anthropic's all start "claude".
_OPENAI_NAMES = re.compile(r"^(gpt-|chatgpt-|o[1-9](-|$)|text-|davinci|babbage|codex-)",
                           re.IGNORECASE)
_OPEN_NAMES = re.compile(r"^(qwen|llama|gemma|mistral|mixtral|phi|deepseek|smollm|granite|"
                         r"olmo|command-r|nemotron|falcon|yi-|internlm)|:|\.gguf$", re.IGNORECASE)


def vendor_of(bare: str) -> str | None:
    """"openai" or "local" for a bare model name that is recognisably not Anthropic's
    (`gpt-5-mini`, `qwen3:8b`); None for any other (a proxy's own names pass)."""
    if _OPENAI_NAMES.match(bare):
        return "openai"
    if _OPEN_NAMES.search(bare):
        return "local"
    return None


def _provider_for(vendor: str, data: dict) -> str:
    """The provider a name of `vendor` most likely meant: openai, or the one configured
    provider table on this machine (else the name a local one is given in the docs)."""
    if vendor == "openai":
        return "openai"
    from agent.config.providers import BUILTIN

    section = data.get("providers")
    tables = [n for n in (section if isinstance(section, dict) else {}) if n not in BUILTIN]
    return tables[0] if len(tables) == 1 else "local"


_WARNED: set[str] = set()


def warn_unknown(data: dict, where: str) -> None:
    """Say once per process, on stderr, which keys of agent.toml are ignored."""
    import sys

    for w in unknown(data):
        if w not in _WARNED:
            _WARNED.add(w)
            print(f"warning: {where}: {w}; ignored", file=sys.stderr)


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
        raise SettingsError(f"Unknown setting {key}{_hint(key, KEYS)}.")
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
