"""Editing MEMORY.md or USER.md by hand from a front-end that is not a text editor (the
web page's text area): the text is written as the person gave it and committed as their
hand edit (`edit: MEMORY.md by hand`, authored by their git identity), exactly as a save
in their own editor would be; refused, with the reason and nothing written, when it
would break the file or when the file changed since they opened it."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from agent.errors import UserError
from agent.stores import memory
from agent.fs import atomic, safe
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

FILES = memory.MEMORY_FILES
_CONFLICT = re.compile(r"^(<<<<<<<|>>>>>>>)( |$)", re.M)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class EditRefused(UserError):
    pass


@dataclass
class Opened:
    rel: str
    text: str
    base: str          # what the text was when opened: an edit against another is refused


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def open_file(vault: Vault, rel: str) -> Opened:
    if rel not in FILES:
        raise EditRefused(f"{rel!r} is not a memory file: only {' and '.join(FILES)} are "
                          f"edited here.")
    text = safe.read_text(vault.root, rel) or ""
    return Opened(rel, text, fingerprint(text))


def problem(text: str) -> str | None:
    """Why `text` would break a memory file (None: it would not)."""
    m = _CONTROL.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        return f"line {line} holds a control character ({m.group()!r}), which no fact holds"
    m = _CONFLICT.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        return f"line {line} is a merge conflict marker ({m.group(1)}): resolve it first"
    if len(text.encode()) > safe.COMMIT_BYTES:
        return f"the text is over {safe.COMMIT_BYTES} bytes"
    return None


def save(vault: Vault, rel: str, text: str, base: str) -> str | None:
    """Write `text` as `rel` and commit it as the person's hand edit; the commit's sha,
    None when nothing changed. A browser's CRLF line ends are the file's LF."""
    open_file(vault, rel)               # a memory file, or refused
    text = text.replace("\r\n", "\n")
    if text and not text.endswith("\n"):
        text += "\n"
    why = problem(text)
    if why:
        raise EditRefused(f"{rel} was not changed: {why}.")
    with vault.locked():                 # earlier hand edits go in first, on their own
        now = safe.read_text(vault.root, rel) or ""
        if fingerprint(now) != base:
            raise EditRefused(f"{rel} was not changed: it changed since you opened it "
                              f"(the agent or another edit wrote it); open it again.")
        if now == text:
            return None
        atomic.write_text(vault.root / rel, text)
    before = vault.head()
    with vault.locked():                 # commits it as the person's hand edit
        pass
    after = vault.head()
    return after if after != before else None
