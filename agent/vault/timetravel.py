"""Time travel in the vault's history: a file as it was, a copy of the vault as it was,
and a fact's timeline (added, updated, removed, restored).

    sha, subject = resolve(vault, "2026-11-20")          # or "3 days ago", or a commit
    text = file_at(vault, sha, "MEMORY.md")
    events = fact_history(vault, "Kyoto", ("MEMORY.md", "USER.md"))   # oldest first
"""

from __future__ import annotations

from agent import clock

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.vault import git
from agent.vault.repo import Vault, VaultError
from agent.vault import gitcmd


class TimeError(VaultError):
    """WHEN names no moment of the vault's history; the message says what it has."""


def resolve(vault: Vault, when: str) -> tuple[str, str]:
    """(commit, "abc1234 2026-11-20 subject") of the vault as it was at WHEN: a commit
    (sha, tag, HEAD~3) or what `git log --until` takes (2026-11-20, '3 days ago')."""
    when = when.strip()
    if not when or when.startswith("-"):
        raise TimeError(f"--as-of needs a date or a commit, not {when!r}.")
    sha = vault.git("rev-parse", "--verify", "-q", "--end-of-options", f"{when}^{{commit}}",
                    check=False).strip()
    if not sha:
        # git reads a word it does not know (banana) as now: say so rather than show HEAD
        if gitcmd.date_stamp(vault, when, clock.now().timestamp()) is None:
            raise TimeError(f"--as-of {when!r}: neither a commit nor a date git understands; "
                            f"use e.g. 2026-11-01, yesterday, '2 weeks ago' or HEAD~3.")
        sha = vault.git("rev-list", "-1", f"--until={when}", "HEAD", check=False).strip()
    if not sha:
        first = vault.git("log", "--reverse", "--format=%ad", "--date=short", check=False)
        since = first.split("\n", 1)[0].strip() or "no commits"
        raise TimeError(f"The vault has no commit at or before {when!r} (its history starts "
                        f"{since}); give a later date or a commit.")
    line = vault.git("log", "-1", "--format=%h %ad %s", "--date=format:%Y-%m-%d %H:%M",
                     sha).strip()
    return sha, line


def file_at(vault: Vault, sha: str, rel: str) -> str | None:
    """The text of vault file `rel` in commit `sha`, or None when it had no such file."""
    p = git.run(["cat-file", "blob", f"{sha}:{rel}"], vault.root, input=b"", text=False)
    if p.returncode:
        return None
    return p.stdout.decode("utf-8", "replace")


def copy_at(vault: Vault, sha: str, dest: Path) -> Path:
    """A throwaway copy of the vault's files as they were in `sha`, at `dest` (its own
    git repository sharing this one's objects; remove it with `shutil.rmtree`)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for where, args in ((vault.root, ["clone", "--quiet", "--shared", "--no-checkout",
                                      str(vault.root), str(dest)]),
                        (dest, ["checkout", "--quiet", "--detach", sha])):
        p = git.run(args, where, input="", errors="replace")
        if p.returncode:
            shutil.rmtree(dest, ignore_errors=True)
            raise TimeError(f"Could not make the vault as of {sha[:7]}: "
                            f"{p.stderr.strip()[-200:]}")
    return dest


# ---- a fact's timeline -------------------------------------------------------------------


@dataclass
class Event:
    kind: str                  # added, updated, removed, restored
    sha: str
    date: str
    author: str
    subject: str
    file: str
    old: str | None = None     # the line before (updated, removed)
    new: str | None = None     # the line after (added, updated, restored)
    trailers: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "commit": self.sha, "date": self.date, "author": self.author,
                "subject": self.subject, "file": self.file, "old": self.old, "new": self.new,
                "source": self.trailers}


def _trailers(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(": ")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", k):
            out[k] = v.strip()
    return out


def fact_history(vault: Vault, text: str, files: tuple[str, ...]) -> list[Event]:
    """Every change to a line of MEMORY.md or USER.md holding `text` (any case), oldest
    first; the first parent's view, so a sync merge shows as the change it brought."""
    needle = " ".join(text.split()).lower()
    if not needle:
        return []
    out = vault.git("log", "--reverse", "--first-parent", "-m", "--no-color", "--unified=0",
                    "--format=%x1e%H%x1f%an <%ae>%x1f%aI%x1f%s%x1f%(trailers:only,unfold)%x1f",
                    "-p", "--", *files, check=False)
    events = []
    for record in out.split("\x1e")[1:]:
        parts = record.split("\x1f")
        if len(parts) < 6:
            continue
        sha, author, date, subject, trailers, diff = parts[:6]
        current = None
        removed: dict[str, list[str]] = {}
        added: dict[str, list[str]] = {}
        for line in diff.splitlines():
            if line.startswith("+++ "):
                current = line[6:] if line.startswith("+++ b/") else current
                continue
            if line.startswith("--- "):
                current = line[6:] if line.startswith("--- a/") else current
                continue
            if current is None or not line[:1] in "+-" or needle not in \
                    " ".join(line[1:].split()).lower():
                continue
            (added if line[0] == "+" else removed).setdefault(current, []).append(line[1:])
        for rel in dict.fromkeys(list(removed) + list(added)):
            olds, news = removed.get(rel, []), added.get(rel, [])
            for i in range(max(len(olds), len(news))):
                old = olds[i] if i < len(olds) else None
                new = news[i] if i < len(news) else None
                if old is not None and new is not None:
                    kind = "updated"
                elif new is not None:
                    kind = "restored" if subject.startswith("restore") else "added"
                else:
                    kind = "removed"
                events.append(Event(kind, sha, date, author, subject, rel, old, new,
                                    _trailers(trailers)))
    return events
