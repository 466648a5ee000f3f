"""The vault's writes (`vault.writes`, a part of agent.vault.repo.Vault): whole lines appended,
flushed and fsynced; whole files replaced through a temporary file and `os.replace`;
each path journalled before it is written (agent.vault.journal) and refused when it is
off limits (.git/, .agent/, outside the vault, not a regular file); secrets kept out
(agent.redact). Reads go through the one safe reader (agent.fs.safe).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from agent import redact
from agent.fs import atomic
from agent.vault.git import VaultError
from agent.fs.offlimits import is_off_limits, refusal


class Writes:
    """The file writes of a Vault (`vault.writes`). Each write returns the kinds of
    secret the filter kept out of it (agent.redact), for the front-end to tell."""

    def __init__(self, root: Path, rel: Callable[[str], str], note: Callable[[str], None]):
        """`rel`: a path as the vault names it (Vault.rel, refusing one outside it);
        `note`: journal a path before it is written (Journal.note)."""
        self.root = root
        self.rel = rel
        self.note = note

    def check_writable(self, rel: str) -> str:
        """The vault path the agent would write for `rel`, or VaultError saying why not
        (outside the vault, .git/ or .agent/, not a regular file). A command checks its
        target this way before taking the lock, so a refusal commits nothing."""
        rel = self.rel(rel)
        if is_off_limits(rel):
            raise VaultError(refusal(rel))
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if not stat.S_ISREG(os.stat(self.root / rel).st_mode):
                raise VaultError(f"{rel} is not a regular file (a FIFO, device or folder); "
                                 f"the agent does not write to it.")
        return rel

    def writable(self, rel: str) -> Path:
        rel = self.rel(rel)
        if is_off_limits(rel):
            raise VaultError(refusal(rel))
        path = self.root / rel
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise VaultError(f"{rel} is not a regular file (a FIFO, device or folder); "
                                 f"the agent does not write to it.")
        self.note(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def append_lines(self, rel: str, lines: list[str], header: str | None = None) -> list[str]:
        """Append whole lines, flushed and fsynced; `header` starts a new file."""
        path = self.writable(rel)
        lines, kept = redact.guard_lines(self.root, rel, lines)      # keys stay out
        new = not path.exists() or path.stat().st_size == 0
        data = "".join(line.rstrip("\n") + "\n" for line in lines)
        if new and header:
            data = header + data
        elif not new:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    data = "\n" + data
        with open(path, "a", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if new:
            atomic.fsync_dir(path.parent)
        return kept

    def write_text(self, rel: str, text: str) -> list[str]:
        """Replace a file atomically: a temporary file, fsync, then os.replace."""
        text, kept = redact.guard(self.root, rel, text)              # keys stay out
        atomic.write_text(self.writable(rel), text, sync_dir=True)
        return kept

    def delete(self, rel: str) -> None:
        path = self.writable(rel)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def read_text(self, rel: str, errors: str = "strict") -> str:
        """A vault file's text through the one safe read (agent.fs.safe)."""
        from agent.fs import safe
        text = safe.read_text(self.root, rel, errors=errors)
        if text is None:
            raise FileNotFoundError(f"{rel}: no such file in the vault")
        return text
