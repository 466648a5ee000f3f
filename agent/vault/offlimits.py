"""The off-limits rule: `.git/` (git's own) and `.agent/` (the agent's derived state)
are never read or written as vault files, by the vault, a staged turn or a tool."""

from __future__ import annotations

STATE_DIR = ".agent"
OFF_LIMITS = (".git", STATE_DIR)


def is_off_limits(rel: str) -> bool:
    """Whether the vault-relative path `rel` is inside (or is) `.git` or `.agent`."""
    return rel.split("/", 1)[0] in OFF_LIMITS


def refusal(rel: str) -> str:
    """Why a write to `rel` is refused (the vault's error message)."""
    return f"{rel}: the agent does not write inside .git/ or {STATE_DIR}/."
