"""Folders shipped with the package (the vault template, built-in heartbeats, skills)."""

from __future__ import annotations

from pathlib import Path

from agent.errors import UserError


def package_data(name: str) -> Path:
    """A folder shipped with the package: `vault`, `heartbeat` or `skills`."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "_data" / name, package.parent / name):
        if candidate.is_dir():
            return candidate
    raise UserError(f"The package is missing its '{name}' folder; reinstall agent.")
