"""`SCHEMA`, the one list of the settings the product knows: each one's key in
agent.toml, type, default, help and bounds."""

from __future__ import annotations

from dataclasses import dataclass

from agent.config.values import duration_problem, http_url_problem, size_problem, user_ids_problem

DEFAULT_MODEL = "claude-sonnet-5-5"


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
        "(RLIMIT_AS), as \"1G\" or \"512M\"", "exec_memory", check=size_problem),
    Key("exec.tmp_size", str, "100M", "what a command's private /tmp (and /dev/shm) may "
        "hold, as \"100M\"", "exec_tmp_size", check=size_problem),
    Key("exec.workspace_quota", str, "50M", "what one turn's commands may add to workspace/ "
        "and have committed; the rest stays there uncommitted", "exec_workspace_quota",
        check=size_problem),
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
        check=user_ids_problem),
    Key("channels.telegram.api_base", str, "https://api.telegram.org",
        "the Bot API's address (requests go to {api_base}/bot{token}/{method})",
        "telegram_api_base", check=http_url_problem),
    Key("sync.every", str, None, "how often `agent serve` syncs with the remote (a duration "
        "such as 5m; unset: serve does not sync)", "sync_every", check=duration_problem),
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
