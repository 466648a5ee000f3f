"""MCP both ways.

- `server`: `agent mcp`, the vault as memory for any MCP client (Claude Code, Claude
  Desktop, ...) over stdio: search, remember, note, recent, history, why.
- `client`: MCP servers configured in `agent.toml` (`[mcp.servers.<name>]`) whose tools
  the agent offers to the model as `<name>__<tool>`.

Both import the `mcp` SDK only when used (it takes the better part of a second).
"""
