"""The `[mcp.servers.<name>]` tables of agent.toml: their shape, checked (for
agent.config, which names a wrong one like any other setting) and read into records
(for agent.chat.mcp_client.client). Imports nothing of the agent, so the settings can use it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

STARTUP_TIMEOUT = 20.0
CALL_TIMEOUT = 120.0
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ServerConfig:
    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    url: str | None = None
    env: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    enabled: bool = True
    startup_timeout: float = STARTUP_TIMEOUT
    call_timeout: float = CALL_TIMEOUT

    @property
    def where(self) -> str:
        return self.url if self.url else " ".join([self.command or "", *self.args]).strip()

    def missing_env(self) -> list[str]:
        names = list(self.env) + [v for _, value in self.headers for v in VAR.findall(value)]
        return [n for n in dict.fromkeys(names) if n not in os.environ]


class BadServer(Exception):
    pass


def read_server(name: str, t) -> ServerConfig:
    """One `[mcp.servers.<name>]` table as a ServerConfig; BadServer says what is wrong."""
    at = f"[mcp.servers.{name}]"
    if not _NAME.match(name):
        raise BadServer(f"{at}: a server's name is letters, digits, - and _ (at most 40), as it "
                   f"prefixes its tools' names")
    if not isinstance(t, dict):
        raise BadServer(f"{at} must be a table")
    unknown = sorted(set(t) - {"command", "args", "url", "env", "headers", "enabled",
                               "startup_timeout", "call_timeout"})
    if unknown:
        raise BadServer(f"{at}: unknown setting {', '.join(unknown)}")
    command, url = t.get("command"), t.get("url")
    if (command is None) == (url is None):
        raise BadServer(f"{at}: give either command (and args) for a stdio server or url for a "
                   f"streamable HTTP one")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise BadServer(f"{at}: command must be a non-empty string")
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise BadServer(f"{at}: url must be an http:// or https:// address")
    args = t.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise BadServer(f"{at}: args must be a list of strings")
    env = t.get("env", [])
    if isinstance(env, dict):
        raise BadServer(f"{at}: env lists the names of environment variables to pass through "
                   f"(env = [\"{next(iter(env), 'TOKEN')}\"]); their values never go in the vault")
    if not isinstance(env, list) or not all(isinstance(e, str) and e for e in env):
        raise BadServer(f"{at}: env must be a list of environment variable names")
    headers = t.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise BadServer(f"{at}: headers must be a table of strings")
    enabled = t.get("enabled", True)
    if not isinstance(enabled, bool):
        raise BadServer(f"{at}: enabled must be true or false")
    timeouts = {}
    for key, default in (("startup_timeout", STARTUP_TIMEOUT), ("call_timeout", CALL_TIMEOUT)):
        value = t.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise BadServer(f"{at}: {key} must be a number of seconds")
        timeouts[key] = float(value)
    return ServerConfig(name, command, tuple(args), url, tuple(env),
                        tuple(sorted(headers.items())), enabled, **timeouts)


def problems(section) -> list[str]:
    """What is wrong with agent.toml's `[mcp]` section (for agent.config's check)."""
    if not isinstance(section, dict):
        return ["[mcp] must be a table"]
    out = [f"unknown setting mcp.{k} (servers go in [mcp.servers.NAME])"
           for k in section if k != "servers"]
    servers = section.get("servers", {})
    if not isinstance(servers, dict):
        return out + ["[mcp.servers] must be a table of servers"]
    for name, t in servers.items():
        try:
            read_server(name, t)
        except BadServer as e:
            out.append(str(e))
    return out


