"""`agent mcp`: the vault as memory for any MCP client, over stdio, on the official SDK.

    agent mcp               # search, remember, note, recent, history, why + resources
    agent mcp --read-only   # the reading tools only
    agent mcp --review      # and review_decide: this client may decide the dream's proposals

The tools are in `agent.mcp_server.tools` (plain functions over the vault); this module wires
them to the SDK's low-level `Server`. Bad input is answered with a JSON-RPC error
(-32602, invalid params) naming the problem, before anything is read or written; a line
that is not JSON with a parse error (-32700), JSON that is not a JSON-RPC message with an
invalid request (-32600), both with id null (the SDK drops such lines without a word,
and the client would wait for an answer forever). The vault work runs in a worker thread, one call at a time, so the event loop keeps
answering (pings, cancellations) while git runs.
"""

from __future__ import annotations

import logging
import sys

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from agent import version
from agent.errors import UserError
from agent.mcp_server.tools import BadInput, VaultTools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

NAME = "agent"
INSTRUCTIONS = """\
This is the memory of a personal agent: a git repository of plain files. MEMORY.md holds \
lasting facts, USER.md facts about the person, memory/YYYY-MM-DD.md the daily notes; \
past conversations are searchable. Use `search` before answering questions about the \
past, `remember` for what should be kept (one self-contained sentence, absolute dates), \
`recent` for what happened lately, `why` to find where a fact came from. Every change is \
a git commit, so nothing is lost and everything can be undone."""


def _client_name(ctx) -> str | None:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    if info is not None and getattr(info, "name", None):
        return info.name
    return None


def build(vault: Vault, *, read_only: bool = False, review: bool = False,
          tools: VaultTools | None = None) -> Server:
    """The MCP server over `vault`; `review`: the client may decide the dream's
    proposals (review_decide)."""
    ours = version()
    tools = tools or VaultTools(vault, read_only=read_only, review=review)
    limiter = anyio.CapacityLimiter(1)

    async def run(fn, *args):
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=s.name, description=s.description, input_schema=s.schema,
                       annotations=types.ToolAnnotations(read_only_hint=not s.writes,
                                                         destructive_hint=False,
                                                         idempotent_hint=not s.writes,
                                                         open_world_hint=False))
            for s in tools.offered()])

    async def call_tool(ctx, params) -> types.CallToolResult:
        client = _client_name(ctx)
        try:
            text = await run(tools.call, params.name, params.arguments, client)
        except BadInput as e:
            raise MCPError(code=types.INVALID_PARAMS, message=str(e)) from None
        except UserError as e:
            # The vault refused (a broken agent.toml, a git problem): the client hears why.
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(e))],
                                        is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=uri, name=name, description=desc, mime_type="text/markdown")
            for uri, name, desc in tools.resources()])

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template="agent://memory/{day}.md", name="daily note",
                                   description="The daily note of a day (YYYY-MM-DD).",
                                   mime_type="text/markdown")])

    async def read_resource(ctx, params) -> types.ReadResourceResult:
        try:
            text = await run(tools.read, params.uri)
        except BadInput as e:
            raise MCPError(code=types.INVALID_PARAMS, message=str(e)) from None
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=params.uri, text=text, mime_type="text/markdown")])

    server = Server(NAME, version=ours, title="agent: a vault of plain files in git",
                    instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_list_resource_templates=list_templates,
                    on_read_resource=read_resource)
    return server


def error_for(exc: Exception) -> types.JSONRPCError:
    """The JSON-RPC answer to a line the SDK could not read as a message."""
    kinds = {e.get("type") for e in getattr(exc, "errors", lambda: [])()}
    if "json_invalid" in kinds:
        code, message = types.PARSE_ERROR, "Parse error: the line is not JSON"
    else:
        code, message = types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message"
    return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=code,
                                                                            message=message))


class _Answered:
    """The client's messages as the SDK reads them, with each unreadable line answered
    with error_for() on `write` instead of passed on (and dropped)."""

    def __init__(self, inner, write):
        self._inner, self._write = inner, write

    def __getattr__(self, name):          # last_context, close, ...: the SDK's stream's
        return getattr(self._inner, name)

    async def receive(self):
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._write.send(SessionMessage(error_for(item)))

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self._inner.aclose()


def serve(vault: Vault, *, read_only: bool = False, review: bool = False) -> None:
    """Serve MCP over this process's stdin and stdout until the client hangs up."""
    # The SDK logs every request at INFO; a client shows our stderr to the person.
    logging.getLogger("mcp").setLevel(logging.WARNING)
    server = build(vault, read_only=read_only, review=review)

    async def main():
        async with stdio_server() as (read_stream, write_stream):
            await server.run(_Answered(read_stream, write_stream), write_stream,
                             server.create_initialization_options())

    try:
        anyio.run(main)
    except KeyboardInterrupt:  # pragma: no cover - Ctrl-C in a terminal
        print("", file=sys.stderr)
