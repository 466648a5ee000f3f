"""The tools a turn offers and how the calls of one reply run: all at once, one thread
each, MCP servers' tools beside the built-in ones, every result through the secrets door."""

from __future__ import annotations

import traceback
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import TYPE_CHECKING, Any, Callable

from agent import clock, redact
from agent.chat.tools import registry
from agent.llm.records import Tool, ToolCall, ToolResult

if TYPE_CHECKING:
    from agent.chat.mcp_client.client import Hub
    from agent.chat.turn.options import TurnOptions
    from agent.config import Settings
    from agent.vault.repo import Vault
    from agent.vault.staged import StagedVault

MAX_PARALLEL_TOOLS = 8


def _tool_logger(vault: StagedVault) -> Callable[[str, BaseException], None]:
    def log_exception(name: str, exc: BaseException) -> None:
        logs = vault.state / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / "tools.log", "a", encoding="utf-8") as f:
            f.write(f"--- {clock.now().isoformat()} tool {name}\n")
            f.write("".join(traceback.format_exception(exc)))
    return log_exception


def run_tools(calls: list[ToolCall], ctx: registry.ToolContext, *,
              on_tool: Callable[[str, Any], None] | None = None, mcp: Hub | None = None,
              on_tool_done: Callable[[str, bool], None] | None = None,
              kept: list[str] | None = None) -> list[ToolResult]:
    """The results of the tool calls `calls`, run at once, in their order.

    `mcp` (an agent.chat.mcp_client.client.Hub) answers the calls of its servers' tools;
    `on_tool_done(name, is_error)` hears of each call as it ends (from its thread).
    """
    logger = _tool_logger(ctx.vault)

    def one(call: ToolCall) -> ToolResult:
        if mcp is not None and mcp.owns(call.name):
            text, is_error = mcp.call(call.name, call.input)
        else:
            with registry.use_context(ctx):
                text, is_error = registry.call(call.name, call.input, log=logger)
        text, found = redact.door(ctx.vault.root, text)    # a key a tool read stays out
        if kept is not None:
            kept.extend(found)
        if on_tool_done is not None:
            on_tool_done(call.name, bool(is_error))
        return ToolResult(call.id, text, is_error=bool(is_error))

    for call in calls:
        if on_tool is not None:
            on_tool(call.name, call.input)
    if len(calls) == 1:
        return [one(calls[0])]
    # A spawn_agent call mostly waits for its run: each gets a worker of its own, so the
    # sub-agents of one reply all run at once.
    spawns = sum(c.name == "spawn_agent" for c in calls)
    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_TOOLS + spawns, len(calls)),
                              thread_name_prefix="tool")
    try:
        futures = [pool.submit(copy_context().run, one, c) for c in calls]
        return [f.result() for f in futures]
    finally:
        # On Ctrl-C do not wait for tools still running; their staged writes are dropped.
        pool.shutdown(wait=False, cancel_futures=True)


def mcp_servers(vault: Vault, settings: Settings) -> tuple[Hub | None, list[str]]:
    """The MCP servers of agent.toml, started (once per process), and one line for each
    that failed; (None, []) when there are none (the SDK is not even imported)."""
    if not (settings.raw.get("mcp") or {}).get("servers"):
        return None, []
    from agent.chat.mcp_client.client import hub_for
    hub = hub_for(vault.root, settings.raw)
    if hub is None:
        return None, []
    return hub, hub.start()


def forced_tool(text: str, opts: TurnOptions, settings: Settings,
                tools: list[Tool]) -> str | None:
    """`remember` when the person's message asks to keep something ("Remember that my
    boat is called Wren"): the turn's first call must then call it, so a model that would
    only say "I'll remember that" (small local ones often do) cannot drop the fact. The
    same reading of an ask as explicit learning's (agent.dream.learning): never a
    question ("do you remember..."); only the person's own chat turn, never a job's, a
    heartbeat's or a sub-agent's message; `[chat] force_remember = false` turns it off."""
    from agent.dream.learning import REMEMBER_TOOL, asks_to_remember

    if (opts.kind != "chat" or opts.depth or opts.readonly
            or not getattr(settings, "force_remember", True)):
        return None
    if not any(t.name == REMEMBER_TOOL for t in tools) or not asks_to_remember(text):
        return None
    return REMEMBER_TOOL
