"""agent: a personal AI agent whose whole mind is a Git repository of plain files."""


def version() -> str:
    """The installed version of the agent (what the gateway's health and the MCP server
    tell their clients), or "unknown" in a checkout without package metadata."""
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("agent")
    except PackageNotFoundError:
        return "unknown"
