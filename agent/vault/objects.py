"""Looking things up by git's own names: what a record of ids (agent.stores.used) resolves
through. An object by its (abbreviated) id, a file version's text, a commit where a file
had that version, who wrote each line of it there, the tracked files holding a string,
a trailer of the newest commit whose subject matches.

Every argument here may come from a synced file: ids are checked to be hex before git
sees them, and a path is only ever a pathspec after `--`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

# Ids of SHA-1 (40 hex digits) or SHA-256 (64) repositories, abbreviated or in full.
_HEX = re.compile(r"[0-9a-f]{4,64}")
_FULL = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_BLAME = re.compile(r"^([0-9a-f]{40}(?:[0-9a-f]{24})?) (\d+) (\d+)")


def object_id(vault: Vault, abbrev: str, kind: str) -> str | None:
    """The full id of the `kind` ("blob", "commit") object `abbrev` names, or None (not
    hex, unknown here, ambiguous, or another kind)."""
    if not _HEX.fullmatch(abbrev) or kind not in ("blob", "commit"):
        return None
    out = vault.git("rev-parse", "--verify", "-q", f"{abbrev}^{{{kind}}}", check=False).strip()
    return out if _FULL.fullmatch(out) else None


def blob_text(vault: Vault, blob: str) -> str:
    """The text of blob `blob` (a full id from object_id)."""
    return vault.git("cat-file", "blob", blob)


def commit_holding(vault: Vault, rel: str, blob: str, first: str | None = None) -> str | None:
    """A commit whose `rel` is `blob`: `first` when it holds it, else the newest that
    brought that version (a path-limited walk)."""
    candidates = [first] if first else []
    out = vault.git("log", "--format=%H", f"--find-object={blob}", "--", rel, check=False)
    candidates += out.split()
    for sha in candidates:
        if vault.git("rev-parse", "--verify", "-q", f"{sha}:{rel}", check=False).strip() == blob:
            return sha
    return None


def blame_all(vault: Vault, rel: str, rev: str) -> dict[int, tuple[str, str, int]]:
    """line -> (the commit that wrote it, the path then, the line then) for every line
    of `rel` as of commit `rev`: one blame for the whole file."""
    out = vault.git("blame", "--porcelain", rev, "--", rel, check=False)
    found: dict[int, tuple[str, str, int]] = {}
    paths: dict[str, str] = {}
    current: tuple[str, int, int] | None = None
    for row in out.splitlines():
        head = _BLAME.match(row)
        if head:
            current = (head.group(1), int(head.group(2)), int(head.group(3)))
        elif row.startswith("filename ") and current:
            paths[current[0]] = row[9:]
        elif row.startswith("\t") and current:
            sha, orig, final = current
            found[final] = (sha, paths.get(sha, rel), orig)
    return found


def files_holding(vault: Vault, text: str, under: str) -> list[str]:
    """The tracked files under folder `under` whose work-tree text holds `text`."""
    out = vault.git("grep", "-l", "-F", "-e", text, "--", under, check=False)
    return out.splitlines()


def newest_trailer(vault: Vault, subject: str, key: str) -> str:
    """Trailer `key` of the newest commit whose subject matches the regular expression
    `subject` ("" when none has it)."""
    return vault.git("log", "-1", "-E", f"--grep={subject}",
                     f"--format=%(trailers:key={key},valueonly,unfold)", check=False).strip()
