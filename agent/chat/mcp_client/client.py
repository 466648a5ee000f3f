"""MCP servers as tools of the agent.

    [mcp.servers.github]                 # in agent.toml
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-github"]
    env = ["GITHUB_TOKEN"]               # names passed through; values never in the vault

    [mcp.servers.docs]
    url = "https://example.com/mcp"      # streamable HTTP
    headers = { Authorization = "Bearer ${DOCS_TOKEN}" }   # ${VAR} from the environment
    enabled = true

Each server's tools are offered to the model as `<name>__<tool>`; their calls and
results go in the transcript like any tool's. The servers of a vault run in one
background event loop (a thread) and stay up across the turns of a process (a chat, or
`agent serve`); they stop when the process ends. A server that fails to start or dies is
reported once, in one line, and its tools are left out; the turn still runs. A stdio
server's stderr goes to `.agent/logs/mcp-<name>.log`, not the terminal, and so does one
line for each line it prints that is not JSON-RPC; after MAX_BAD_LINES of those it is
stopped.

No server starts before the person approved its command line on this machine
(agent.chat.mcp_client.approval, `agent mcp approve NAME`). The servers start at once, side by side:
a server that hangs costs one startup timeout, however many there are. A stdio server
runs in `.agent/mcp/`, not in the vault (see agent.chat.mcp_client.approval.server_cwd).

The `mcp` SDK is imported only when a server is configured.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import threading
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agent.config import SettingsError
from agent.chat.mcp_client import approval
from agent.config.mcp_servers import VAR, ServerConfig, problems, read_server
from agent.llm.records import Tool
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

MAX_RESULT = 100_000          # characters of one tool result given to the model
MAX_BAD_LINES = 20            # lines that are not JSON-RPC before a server is stopped
LOG_BYTES = 1024 * 1024       # of a server's stderr kept in its log, each time it starts
_PARSE_FAILED = "Failed to parse JSONRPC message from server"


class _NoParseTracebacks(logging.Filter):
    """The SDK logs a traceback for every stdout line of a server that is not JSON-RPC
    (a garbage-printing server printed 52,632 into one chat); the hub logs each as one
    line in the server's own log instead (see _guarded)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _PARSE_FAILED


_sdk_log = logging.getLogger("mcp.client.stdio")
if not any(isinstance(f, _NoParseTracebacks) for f in _sdk_log.filters):
    _sdk_log.addFilter(_NoParseTracebacks())


class Flooded(Exception):
    """A server printed too much that is not JSON-RPC; it is stopped."""


class _ServerLog:
    """`.agent/logs/mcp-<name>.log`: the server's stderr, at most LOG_BYTES of it each
    time it starts (a server looping on stderr does not fill the disk), and the agent's
    own lines about it. Written from the event loop and from the thread copying stderr."""

    def __init__(self, path: Path):
        self._file = open(path, "a", encoding="utf-8", errors="replace")
        self._lock = threading.Lock()
        self._users = 2               # the connection and the stderr copier
        self.kept = 0

    def write(self, text: str) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.write(text)
                self._file.flush()

    def done(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users <= 0:
                self._file.close()

    def copy_stderr(self, fd: int) -> None:
        """Copy the server's stderr (read end `fd`) until it closes; past LOG_BYTES the
        rest is read and dropped, so the server never blocks on a full pipe."""
        try:
            with os.fdopen(fd, "rb") as f:
                while chunk := f.read1(65536):
                    if self.kept < LOG_BYTES:
                        part = chunk[:LOG_BYTES - self.kept]
                        self.kept += len(part)
                        self.write(part.decode("utf-8", "replace"))
                        if self.kept >= LOG_BYTES:
                            self.write(f"\nagent: the server wrote more than {LOG_BYTES} bytes "
                                       f"to stderr; the rest is not kept.\n")
        except OSError:
            pass
        finally:
            self.done()


@asynccontextmanager
async def _guarded(make_transport, log_path: Path, name: str):
    """A stdio server's streams with what is not JSON-RPC taken out: each bad line on
    stdout is one line in the server's log, never a traceback in the terminal, and the
    server is stopped at the MAX_BAD_LINES-th. `make_transport(errlog)` is the SDK's
    stdio transport writing the server's stderr to `errlog` (see _ServerLog)."""
    import anyio
    log = _ServerLog(log_path)
    err_r, err_w = os.pipe()
    async with AsyncExitStack() as stack:
        stack.callback(log.done)
        try:
            with os.fdopen(err_w, "w") as errlog:     # the server holds its own copy
                read, write = await stack.enter_async_context(make_transport(errlog))
        except BaseException:  # any: the pipe is closed, then the error raised again
            os.close(err_r)
            log.done()                                 # the copier's share: never started
            raise
        threading.Thread(target=log.copy_stderr, args=(err_r,), daemon=True,
                         name=f"mcp-{name}-stderr").start()
        send, receive = anyio.create_memory_object_stream(0)

        async def pump():
            bad = 0
            async with send:
                async for item in read:
                    if not isinstance(item, Exception):
                        await send.send(item)
                        continue
                    bad += 1
                    log.write(f"agent: line {bad} from the server is not JSON-RPC "
                              f"({_one_line(item)[:200]})\n")
                    if bad >= MAX_BAD_LINES:
                        raise Flooded(f"stopped after {bad} lines that are not JSON-RPC "
                                      f"(see .agent/logs/mcp-{name}.log)")

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            try:
                yield receive, write
            finally:
                tg.cancel_scope.cancel()


def load_configs(raw: dict, where: str = "agent.toml") -> list[ServerConfig]:
    """The `[mcp.servers.<name>]` tables of agent.toml (SettingsError names a wrong one)."""
    section = (raw or {}).get("mcp")
    if section is None:
        return []
    bad = problems(section)
    if bad:
        raise SettingsError(f"{where}: {bad[0]}")
    return [read_server(name, t) for name, t in (section.get("servers") or {}).items()]


def tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, in the characters and length the API accepts for tool names."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}__{tool}")[:64]


def result_text(result) -> tuple[str, bool]:
    """An MCP CallToolResult as the text of a tool_result, and whether it is an error."""
    parts = []
    for c in result.content or []:
        kind = getattr(c, "type", "")
        if kind == "text":
            parts.append(c.text)
        elif kind == "resource":
            res = c.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {c.uri}]")
        else:
            parts.append(f"[{kind} content ({getattr(c, 'mime_type', '') or 'binary'}) "
                         f"not shown]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts) or "(no output)"
    if len(text) > MAX_RESULT:
        text = text[:MAX_RESULT] + f"\n... (cut at {MAX_RESULT} characters)"
    return text, bool(result.is_error)


def _one_line(exc: BaseException) -> str:
    """An exception (or an exception group from the SDK's task groups) in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, FileNotFoundError) and exc.filename:
        text = f"no such command: {exc.filename}"
    return text[:300]


@dataclass
class _Conn:
    config: ServerConfig
    ready: threading.Event = field(default_factory=threading.Event)
    client: object = None
    tools: list = field(default_factory=list)        # mcp Tool objects
    error: str | None = None
    dead: bool = False
    unapproved: bool = False
    stop: object = None                               # an anyio Event, set to stop
    future: object = None
    deadline: float = 0.0                             # time.monotonic() to be ready by


class Hub:
    """The MCP servers of one vault, connected from a background event loop."""

    def __init__(self, root, configs: list[ServerConfig]):
        self.root = root
        self.configs = [c for c in configs if c.enabled]
        self.conns: dict[str, _Conn] = {}
        self.reported: set[tuple[str, str]] = set()
        self._portal = None
        self._portal_cm = None
        self._lock = threading.Lock()

    # -- the event loop

    def _ensure_portal(self):
        if self._portal is None:
            from anyio.from_thread import start_blocking_portal
            self._portal_cm = start_blocking_portal()
            self._portal = self._portal_cm.__enter__()
        return self._portal

    def _transport(self, c: ServerConfig):
        if c.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client
            headers = {k: VAR.sub(lambda m: os.environ.get(m.group(1), ""), v)
                       for k, v in c.headers}
            return streamable_http_client(c.url, http_client=create_mcp_http_client(headers))
        from mcp.client.stdio import StdioServerParameters, stdio_client
        env = {n: os.environ[n] for n in c.env if n in os.environ}
        # A Python server's __pycache__ would land in its pinned vault folder: a change
        # there would unapprove it (and a hand-edit commit would sync it).
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        logs = self.root / ".agent" / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        cwd = approval.server_cwd(self.root)       # part of what the person approved
        cwd.mkdir(parents=True, exist_ok=True)
        params = StdioServerParameters(command=c.command, args=list(c.args), env=env,
                                       cwd=str(cwd))
        return _guarded(lambda errlog: stdio_client(params, errlog=errlog),
                        logs / f"mcp-{c.name}.log", c.name)

    async def _serve(self, conn: _Conn):
        import anyio
        from mcp import Client
        from mcp_types import Implementation
        conn.stop = anyio.Event()
        try:
            async with Client(self._transport(conn.config), mode="legacy",
                              client_info=Implementation(name="agent", version="0.1")) as client:
                tools = []
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                    tools.extend(page.tools)
                    cursor = getattr(page, "next_cursor", None)
                    if not cursor:
                        break
                conn.client, conn.tools = client, tools
                conn.ready.set()
                await conn.stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported, never raised into the turn
            if not conn.ready.is_set():
                conn.error = conn.error or _one_line(e)
            else:
                conn.dead = True
                why = _one_line(e)
                conn.error = conn.error or (why if why.startswith("stopped") else
                                            f"stopped: {why}")
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            conn.dead = True
            conn.ready.set()

    # -- starting

    def start(self) -> list[str]:
        """Connect the servers not connected yet (again, if one died): one line per new
        problem, to tell the person once."""
        problems = []
        with self._lock:
            pending = []
            for c in self.configs:
                conn = self.conns.get(c.name)
                refused = approval.refusal_line(self.root, c)
                if conn is not None and not conn.dead:
                    if refused:
                        # What it loads changed while it ran (serve synced): a server
                        # that imports lazily would run the new code; it is stopped.
                        conn.unapproved, conn.error = True, refused
                        self._stop(conn)
                    continue
                if conn is not None and conn.error and not conn.client and not conn.unapproved:
                    continue            # never started: not retried in this process
                conn = _Conn(c)
                self.conns[c.name] = conn
                if refused:
                    # Approved later (`agent mcp approve` while serve runs): started then.
                    conn.unapproved, conn.dead = True, True
                    conn.error = refused
                    continue
                portal = self._ensure_portal()
                conn.future = portal.start_task_soon(self._serve, conn)
                conn.deadline = time.monotonic() + c.startup_timeout
                pending.append(conn)
            # They start side by side: each waits out its own deadline, counted from
            # the common start, so hanging servers cost one timeout, not one each.
            for conn in pending:
                if not conn.ready.wait(max(0.0, conn.deadline - time.monotonic())):
                    conn.error = f"did not answer within {conn.config.startup_timeout:g}s"
                    conn.future.cancel()
                    conn.dead = True
            for conn in self.conns.values():
                if conn.dead and conn.error:
                    problems.append(self._report(conn))
        return [p for p in problems if p]

    def _report(self, conn: _Conn) -> str | None:
        c = conn.config
        if conn.unapproved:
            key = (c.name, conn.error or "")
            if key in self.reported:
                return None
            self.reported.add(key)
            return conn.error
        missing = c.missing_env()
        unset = f" ({', '.join(missing)} not set)" if missing else ""
        line = (f"MCP server {c.name} ({c.where}) {'did not start' if not conn.client else 'died'}: "
                f"{conn.error}{unset}; its tools are left out.")
        key = (c.name, conn.error or "")
        if key in self.reported:
            return None
        self.reported.add(key)
        return line

    # -- the tools

    def definitions(self) -> list[Tool]:
        out = []
        for conn in self.conns.values():
            if conn.dead or not conn.client:
                continue
            for t in conn.tools:
                schema = dict(t.input_schema or {})
                schema.setdefault("type", "object")
                desc = f"[{conn.config.name}] {t.description or t.title or t.name}"
                out.append(Tool(tool_name(conn.config.name, t.name), desc, schema))
        return sorted(out, key=lambda d: d.name)

    def _find(self, name: str):
        for conn in self.conns.values():
            if conn.dead or not conn.client:
                continue
            for t in conn.tools:
                if tool_name(conn.config.name, t.name) == name:
                    return conn, t.name
        return None

    def owns(self, name: str) -> bool:
        return self._find(name) is not None

    def call(self, name: str, data) -> tuple[str, bool]:
        """Call tool `name` (`<server>__<tool>`): (result text, is_error)."""
        found = self._find(name)
        if found is None:
            return f"The MCP tool {name} is not available (its server is not running).", True
        conn, tool = found
        import anyio

        async def go():
            with anyio.fail_after(conn.config.call_timeout):
                return await conn.client.call_tool(tool, data if isinstance(data, dict) else {})
        try:
            result = self._portal.call(go)
        except TimeoutError:
            return (f"The MCP server {conn.config.name} did not answer {tool} within "
                    f"{conn.config.call_timeout:g}s.", True)
        except Exception as e:  # noqa: BLE001 - an MCPError is a refusal; anything else, a broken connection
            from mcp.shared.exceptions import MCPError
            from mcp_types import CONNECTION_CLOSED
            if isinstance(e, MCPError) and e.code != CONNECTION_CLOSED:
                return f"{conn.config.name} refused {tool}: {e.message}", True
            # The connection broke: the server died mid-call.
            conn.dead = True
            conn.error = conn.error or f"stopped during {tool}: {_one_line(e)}"
            return (f"The MCP server {conn.config.name} stopped during {tool} "
                    f"({_one_line(e)}).", True)
        return result_text(result)

    def problems(self) -> list[str]:
        """New one-line reports about servers that died since the last time."""
        return [p for p in (self._report(c) for c in self.conns.values()
                            if c.dead and c.error) if p]

    # -- stopping

    def _signal_stop(self, conn: _Conn) -> None:
        if conn.stop is not None and self._portal is not None:
            try:
                self._portal.call(conn.stop.set)
            except RuntimeError:        # its loop already ended: nothing to stop
                pass

    def _stop(self, conn: _Conn) -> None:
        """Stop one server and wait for it (up to 10 s)."""
        self._signal_stop(conn)
        conn.dead = True
        if conn.future is not None:
            try:
                conn.future.result(timeout=10)
            except BaseException:  # noqa: BLE001, S110 - it is being stopped; how it ends is moot
                pass

    def close(self) -> None:
        """Stop every server (each gets its stdin closed, then a signal) and the loop."""
        if self._portal is None:
            return
        for conn in self.conns.values():
            self._signal_stop(conn)
        deadline = time.monotonic() + 10
        for conn in self.conns.values():
            if conn.future is not None:
                try:
                    conn.future.result(timeout=max(0.1, deadline - time.monotonic()))
                except BaseException:  # noqa: BLE001, S110 - whatever ended a server, it is stopped; the rest must be too
                    pass
        try:
            self._portal.call(self._portal.stop, True)
        except RuntimeError:                # the portal's loop already ended
            pass
        try:
            self._portal_cm.__exit__(None, None, None)
        except BaseException:  # noqa: BLE001, S110 - a server's error on the way out; close() must finish
            pass
        self._portal = self._portal_cm = None
        self.conns = {}


_hubs: dict[str, tuple[list[ServerConfig], Hub]] = {}
_hubs_lock = threading.Lock()      # turns of several sessions start at once in serve


def hub_for(root, raw: dict) -> Hub | None:
    """The hub of the vault at `root` for agent.toml's settings `raw`, or None when no
    server is configured and enabled. Kept for the process; made again if the settings
    changed."""
    configs = load_configs(raw)
    if not any(c.enabled for c in configs):
        return None
    key = str(root)
    with _hubs_lock:
        known = _hubs.get(key)
        if known is not None and known[0] == configs:
            return known[1]
        if known is not None:
            known[1].close()
        hub = Hub(root, configs)
        _hubs[key] = (configs, hub)
        return hub


@atexit.register
def close_all() -> None:
    for _, hub in list(_hubs.values()):
        hub.close()
    _hubs.clear()


def configured(vault: Vault) -> list[ServerConfig]:
    """The servers of the vault's agent.toml (SettingsError names a wrong table)."""
    from agent.config import load_settings
    return load_configs(load_settings(vault.root).raw)


def survey(vault: Vault, timeout: float | None = None) -> list[dict]:
    """`agent mcp list`: each configured server, whether it is approved on this machine,
    and (the approved ones, started for the look) whether it starts and its tools."""
    configs = configured(vault)
    if timeout is not None:
        configs = [ServerConfig(**{**c.__dict__, "startup_timeout": timeout}) for c in configs]
    out = [{"name": c.name, "where": c.where, "enabled": c.enabled,
            "approval": approval.status(vault.root, c), "starts": None, "error": None,
            "missing_env": c.missing_env(), "tools": [],
            "changed": approval.changes(vault.root, c)} for c in configs]
    hub = Hub(vault.root, configs)
    try:
        hub.start()
        for c, row in zip(configs, out):
            conn = hub.conns.get(c.name)
            if not c.enabled or row["approval"] != "approved" or conn is None:
                continue
            row["starts"] = bool(conn.client)
            if not conn.client:
                row["error"] = conn.error or "not tried"
                continue
            row["tools"] = [{"name": tool_name(c.name, t.name),
                             "description": " ".join((t.description or "").split())}
                            for t in conn.tools]
        return out
    finally:
        hub.close()


def describe_servers(vault: Vault, timeout: float | None = None) -> tuple[list[str], bool]:
    """`agent mcp list` as lines, and whether every enabled server is approved and starts."""
    rows = survey(vault, timeout)
    if not rows:
        return (["No MCP servers in agent.toml. Add one as:", "",
                 "  [mcp.servers.NAME]", '  command = "..."      # or url = "https://..."',
                 '  args = ["..."]', '  env = ["TOKEN_NAME"]  # passed through, never stored',
                 "", "then approve it on this machine: agent mcp approve NAME"], True)
    lines, ok = [], True
    for row in rows:
        name = row["name"]
        lines.append(f"{name}  ({row['where']})")
        if not row["enabled"]:
            lines.append("  disabled (enabled = false)")
            continue
        if row["approval"] != "approved":
            ok = False
            lines.append(_unapproved(row))
            continue
        if not row["starts"]:
            ok = False
            missing = row["missing_env"]
            unset = f" ({', '.join(missing)} not set)" if missing else ""
            lines.append(f"  approved; does not start: {row['error']}{unset}")
            continue
        n = len(row["tools"])
        lines.append(f"  approved; starts; {n} tool{'s' * (n != 1)}:")
        for t in row["tools"]:
            desc = t["description"]
            if len(desc) > 70:
                desc = desc[:67] + "..."
            lines.append(f"    {t['name']}  {desc}".rstrip())
    return lines, ok


def lapsed(vault: Vault) -> list[str]:
    """For `agent sync`: one line for each approved server that what came in changed
    (it is not started until approved again)."""
    try:
        configs = configured(vault)
    except SettingsError:
        return []       # the sync's own report, and every command, say what is wrong there
    out = []
    for c in configs:
        if c.enabled and approval.status(vault.root, c) == "changed":
            out.append(approval.refusal_line(vault.root, c))
    return out


def _unapproved(row: dict) -> str:
    name = row["name"]
    if row["approval"] == "unpinnable":
        return f"  cannot be approved: see agent mcp approve {name}"
    if row["approval"] == "changed":
        changed = row["changed"]
        files = f" ({', '.join(changed[:3])}{' and more' * (len(changed) > 3)})" if changed else ""
        return (f"  changed since it was approved{files}: review it, then run "
                f"agent mcp approve {name}")
    return f"  not approved on this machine: review agent.toml, then run agent mcp approve {name}"


def find(vault: Vault, name: str) -> ServerConfig:
    """The server `name` of agent.toml, or a UserError listing the ones there are."""
    from agent.errors import UserError
    configs = configured(vault)
    for c in configs:
        if c.name == name:
            return c
    there = ", ".join(c.name for c in configs) or "none"
    raise UserError(f"agent.toml has no MCP server {name} (servers: {there}).")
