"""The off-limits rule: `.git/` (git's own) and `.agent/` (the agent's derived state)
are never read or written as vault files, by the vault, a staged turn or a tool."""

from __future__ import annotations

STATE_DIR = ".agent"
OFF_LIMITS = (".git", STATE_DIR)


def is_off_limits(rel: str) -> bool:
    """Whether the vault-relative path `rel` is inside (or is) `.git` or `.agent`."""
    # Any case, and with the trailing dots a disk drops: on macOS and Windows .GIT/hooks
    # is .git/hooks.
    return rel.split("/", 1)[0].rstrip(". ").lower() in OFF_LIMITS


def refusal(rel: str) -> str:
    """Why a write to `rel` is refused (the vault's error message)."""
    return f"{rel}: the agent does not write inside .git/ or {STATE_DIR}/."


def link_problem(rel: str, target: str) -> str | None:
    """Why a symlink at the vault path `rel` pointing to `target` is never committed (None:
    it stays inside the vault). The same rule as for a link a remote sends: absolute, or
    `..` past the vault's root, or into .git/ or .agent/, it leads out; on another
    machine it would point at whatever is there."""
    import posixpath

    if not target or target.startswith("/") or "\\" in target or \
            any(ord(c) < 32 or ord(c) == 127 for c in target):
        return f"a symlink leading out of the vault (to {target!r})"
    where = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if where == ".." or where.startswith("../"):
        return f"a symlink leading out of the vault (to {target!r})"
    first = where.split("/", 1)[0]
    if first.rstrip(". ").lower() in OFF_LIMITS:   # any case: one folder on a case-insensitive disk
        return f"a symlink into {first}/ (to {target!r})"
    return None
