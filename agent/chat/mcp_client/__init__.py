"""MCP servers as a tool source for the chat: `client` starts the servers `agent.toml`
names (`[mcp.servers.<name>]`), once `approval` says the person approved that exact
command line on this machine, and offers their tools to the model as `<name>__<tool>`.
The other direction, the vault as an MCP server, is a front-end: agent/mcp_server/."""
