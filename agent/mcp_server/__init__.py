"""`agent mcp`: the vault as memory for any MCP client (Claude Code, Claude Desktop, ...)
over stdio (`server`), offering the operations of agent/ops as tools (`ops`): search,
remember, note, recent, history, why, review. A front-end: it parses and renders.
The MCP client (servers whose tools the agent uses) is a tool source of the chat:
agent/chat/mcp_client/.

The `mcp` SDK is imported only when used (it takes the better part of a second).
"""
