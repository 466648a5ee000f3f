"""A small MCP server for the tests, on the SDK's MCPServer, run as a process:

    python tests/mcp_fixture.py [--hang] [--http PORT]

Tools: add, shout, crash (the process dies mid-call), secret (an environment variable).
--hang: never answers (a server that never starts). --http PORT: streamable HTTP.
"""

import os
import sys
import time

if "--hang" in sys.argv:
    time.sleep(3600)        # a server that never answers: the client must give up on it
    sys.exit(0)

from mcp.server.mcpserver import MCPServer  # noqa: E402

server = MCPServer("fixture")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    return str(a + b)


@server.tool()
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper() + "!"


@server.tool()
def crash() -> str:
    """Die in the middle of the call."""
    os._exit(3)


@server.tool()
def secret(name: str) -> str:
    """The value of an environment variable, or (unset)."""
    return os.environ.get(name, "(unset)")


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run("stdio")
