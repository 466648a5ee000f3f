"""Refs read from the .git folder with no process: a sync reads a handful of them after
its fetch, and `git for-each-ref` costs a process for what is a few small files.

Only a plain .git folder of loose and packed refs is read so; anything else (a
reftable, a linked work tree, a symbolic ref among those asked for, a file that does
not hold an object name) answers None, and the caller asks git.
"""

from __future__ import annotations

import os
from pathlib import Path

_HEX = frozenset("0123456789abcdef")


def _oid(text: str) -> str | None:
    text = text.strip()
    return text if len(text) in (40, 64) and set(text) <= _HEX else None


def read(root: Path, patterns: list[str]) -> dict[str, str] | None:
    """{ref: object name} of the refs of the repository at `root` that `patterns` name
    as `git for-each-ref PATTERN...` matches them (the ref itself, or a ref under it up
    to a slash); None when they cannot be read from files (ask git)."""
    git = Path(root) / ".git"
    if not git.is_dir() or (git / "reftable").exists():
        return None
    found: dict[str, str] = {}
    # Loose refs first, packed ones after: a ref `git pack-refs` moves meanwhile is
    # gone from the folder only once it is in packed-refs.
    for pattern in patterns:
        if not pattern.startswith("refs/") or ".." in pattern.split("/"):
            return None
        if not _loose(git, pattern, found):
            return None
    try:
        packed = (git / "packed-refs").read_text("ascii")
    except FileNotFoundError:
        packed = ""
    except (OSError, UnicodeDecodeError):
        return None
    for line in packed.splitlines():
        if line.startswith(("#", "^")):
            continue
        sha, _, name = line.partition(" ")
        if name in found or not any(name == p or name.startswith(p + "/") for p in patterns):
            continue
        oid = _oid(sha)
        if oid is None:
            return None
        found[name] = oid
    return found


def _loose(git: Path, ref: str, found: dict[str, str]) -> bool:
    """Add the loose ref `ref`, or every loose ref under it, to `found`; False when one
    cannot be read as an object name."""
    path = git / ref
    try:
        if path.is_dir():
            for folder, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(".lock"):
                        continue            # a ref git is writing: its old value stands
                    rel = Path(folder, name).relative_to(git).as_posix()
                    if not _loose(git, rel, found):
                        return False
            return True
        text = path.read_text("ascii")
    except FileNotFoundError:
        return True                         # none loose (or just packed): packed-refs says
    except (OSError, UnicodeDecodeError):
        return False
    oid = _oid(text)
    if oid is None:
        return False                        # a symbolic ref, or not a ref at all
    found[ref] = oid
    return True
