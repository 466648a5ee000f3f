"""The `agent` command line."""
from agent.cli.app import cli, main

__all__ = ["cli", "main"]
