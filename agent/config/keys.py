"""Where a key may go: each secret the agent reads from the environment is sent only to
a host this machine said it may go to, whatever agent.toml says.

agent.toml names which variable holds a provider's key (`key_env`) and where the
provider answers (`base_url`); `[channels.telegram] api_base` says where the bot token
goes. agent.toml is synced: a remote, a clone or a restored backup can write it, and
`key_env = "GITHUB_TOKEN"` with `base_url = "http://their-host/v1"` would hand that
token to their host with the first request. So a key and a host form a *pair*
(`$GITHUB_TOKEN` and `https://their-host`, the host as scheme, name and port: the
*origin*), and a request carries the key only when

- the key is a vendor's own and goes to that vendor (`$ANTHROPIC_API_KEY` to
  https://api.anthropic.com, `$OPENAI_API_KEY` to https://api.openai.com,
  `$TELEGRAM_BOT_TOKEN` to https://api.telegram.org), or to the address this machine's
  own environment names (ANTHROPIC_BASE_URL, OPENAI_BASE_URL); or
- the person approved the pair on this machine: asked once at a terminal, or with
  `agent keys approve VARIABLE ORIGIN`. The approvals live in the person's config
  folder (agent.fs.approvals: `~/.config/agent/keys.json`), for every vault of this
  machine, and never in a vault: no synced or cloned file can make the decision.

A vendor's key is never sent to another host on the network at all (agent config
check names the line); to this machine (a local proxy) only once approved. Without a
terminal (agent serve, a cron job, a pipe) an unapproved pair is refused with one line
saying the command that approves it. Pure but for the approvals file and the
environment: no network, no SDK.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from agent.errors import UserError
from agent.fs.approvals import Approvals, config_dir

FILE = "keys.json"
# The vendors' own keys and their one origin each.
VENDOR_KEYS = {"ANTHROPIC_API_KEY": "https://api.anthropic.com",
               "OPENAI_API_KEY": "https://api.openai.com",
               "TELEGRAM_BOT_TOKEN": "https://api.telegram.org"}
# Where an SDK sends a request when agent.toml names no address: the machine's own
# variable, else the vendor's API.
DEFAULT_URL = {"anthropic": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
               "openai": ("OPENAI_BASE_URL", "https://api.openai.com/v1")}


def origin(url: str) -> str:
    """`https://openrouter.ai` for `https://OpenRouter.ai:443/api/v1`: scheme, host and a
    port other than the scheme's own."""
    parts = urlsplit(url.strip())
    scheme = (parts.scheme or "https").lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    shown = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{shown}" + (f":{port}" if port and port != default else "")


def is_loopback(url: str | None) -> bool:
    """Whether `url` names this machine (localhost, 127.0.0.0/8, ::1)."""
    host = (urlsplit(url or "").hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Pair:
    """A key variable and the origin it would go to, and what agent.toml says so."""
    env: str                 # the variable: OPENROUTER_API_KEY
    origin: str              # https://openrouter.ai
    where: str               # providers.openrouter, channels.telegram.api_base
    machine: bool = False    # the address came from this machine's environment

    @property
    def name(self) -> str:
        return f"{self.env} {self.origin}"

    def state(self) -> str:
        """"tied" (a vendor's key to its vendor, or to where this machine's environment
        says), "approved", "unapproved" (asks at a terminal), or "refused" (a vendor's
        key to another host on the network: no approval makes it go)."""
        vendor = VENDOR_KEYS.get(self.env)
        if vendor is not None:
            if self.origin == vendor or self.machine:
                return "tied"
            if not is_loopback(self.origin):
                return "refused"
        return "approved" if _approvals().get(self.name) is not None else "unapproved"

    def refusal(self) -> str | None:
        """Why the key does not go (one line with the fix), or None when it may."""
        state = self.state()
        if state in ("tied", "approved"):
            return None
        if state == "refused":
            return (f"{self.where}: ${self.env} is {_vendor(self.env)}'s key and is sent only "
                    f"to {VENDOR_KEYS[self.env]} (or, once you approve it, to this machine), "
                    f"not to {self.origin}; give this provider a variable of its own")
        return (f"{self.where} in agent.toml sends ${self.env} to {self.origin}, which this "
                f"machine has not approved: if you mean it, run agent keys approve "
                f"{self.env} {self.origin}")


def _vendor(env: str) -> str:
    return {"ANTHROPIC_API_KEY": "Anthropic", "OPENAI_API_KEY": "OpenAI",
            "TELEGRAM_BOT_TOKEN": "Telegram"}.get(env, env)


def _approvals() -> Approvals:
    return Approvals(config_dir() / FILE, "keys")


def provider_pair(name: str, api: str, base_url: str | None, key_env: str) -> Pair | None:
    """The pair a provider's requests would form (None: it sends no key)."""
    if not key_env:
        return None
    where = f"providers.{name}"
    if base_url:
        return Pair(key_env, origin(base_url), where)
    var, default = DEFAULT_URL.get(api, DEFAULT_URL["openai"])
    from_env = os.environ.get(var, "").strip()
    # No address in agent.toml: the SDK's default, or this machine's own variable. The
    # machine decided that address, but only for the key of that vendor's own API.
    own = VENDOR_KEYS.get(key_env) == origin(default)
    return Pair(key_env, origin(from_env or default), where, machine=bool(from_env) and own)


def telegram_pair(api_base: str) -> Pair:
    return Pair("TELEGRAM_BOT_TOKEN", origin(api_base), "channels.telegram.api_base")


def approve(pair: Pair, now: datetime) -> bool:
    """Let `pair.env` go to `pair.origin` on this machine; False when it already may.
    UserError when it never may (a vendor's key to another host)."""
    state = pair.state()
    if state == "refused":
        raise UserError(pair.refusal() or "")
    if state != "unapproved":
        return False
    _approvals().put(pair.name, {"env": pair.env, "origin": pair.origin,
                                 "approved": now.isoformat(timespec="seconds"),
                                 "where": pair.where})
    return True


def revoke(env: str, where_to: str) -> bool:
    """Take back `env`'s approval for the origin of `where_to`; False when there was none."""
    return _approvals().drop(f"{env} {origin(where_to)}")


def approved() -> list[tuple[str, str, str]]:
    """(variable, origin, when approved) of every pair approved on this machine."""
    return sorted((str(e.get("env")), str(e.get("origin")), str(e.get("approved", "")))
                  for e in _approvals().entries().values())
