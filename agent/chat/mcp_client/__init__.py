"""MCP servers as a tool source for the chat: `client` starts the servers `agent.toml`
names (`[mcp.servers.<name>]`), once `approval` says the person approved that exact
command line on this machine, and offers their tools to the model as `<name>__<tool>`.
The other direction, the vault as an MCP server, is a front-end: agent/mcp_server/."""

# In .agent/: the servers the person approved on this machine (approval). Named here so
# that `agent sync` can tell there are none without loading the client.
APPROVED_FILE = "mcp-approved.json"
