"""A turn's writes, held back until the turn is saved: `StagedVault`.

Tools run between model calls, when the vault lock must not be held. So what they
write is staged here and applied under the lock together with the turn's transcript,
landing in the turn's one commit. Reads through the staged vault see the staged
writes, so a tool that writes then reads (or two tools in a row) sees its own changes.

Each staged change is replayed at save time against the file as it is then: an append
appends, `update(rel, fn)` runs `fn` again on the current text (so a hand edit or
another process's change made meanwhile is kept), `write_text` replaces the file.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Callable
from collections.abc import Iterator
import os
from pathlib import Path

from agent.errors import UserError
from agent.fs import safe
from agent.fs.offlimits import is_off_limits, refusal
from agent.vault.change import Change, Identity
from agent.vault.repo import CONTROL_FILES, Vault, VaultError
from agent.vault.turnvault import TurnVault


@dataclass
class _Op:
    rel: str
    kind: str          # append | write | delete | update
    payload: Any       # (lines, header) | text | None | fn(old text) -> new text


def _append(text: str | None, lines: list[str], header: str | None) -> str:
    data = "".join(line.rstrip("\n") + "\n" for line in lines)
    if not text:
        return (header or "") + data
    return text + ("" if text.endswith("\n") else "\n") + data


class StagedVault(TurnVault):
    """The vault as one turn sees it: real reads, staged writes (see the module doc).
    It offers only what a turn may do (TurnVault): no revert, checkout or git."""

    def __init__(self, vault: Vault):
        self.vault = vault
        self.root = vault.root
        self.state = vault.state
        self._ops: list[_Op] = []
        self._lock = threading.RLock()
        self.problems: list[str] = []       # staged changes that could not be applied
        self._claims: dict[str, Path] = {}   # prefix -> claim file (see VaultLock.claim)
        self._quota: dict[str, int | None] = {}  # prefix -> bytes its commands may add
        self.removed: list[str] = []         # kinds of secret kept out of what was applied

    # ---- reading the real vault (what a turn may know of it; see TurnVault) ----------

    def rel(self, path: str | os.PathLike[str]) -> str:
        return self.vault.rel(path)

    def head(self) -> str | None:
        return self.vault.head()

    def files(self, *patterns: str) -> list[str]:
        return self.vault.files(*patterns)

    def host(self, known: str | None = None) -> str:
        return self.vault.host(known)

    def agent_identity(self) -> Identity:
        return self.vault.agent_identity()

    # ---- reading -------------------------------------------------------------------

    def _target(self, rel: str) -> str:
        """Where a turn may write: never .git/ or .agent/, never the vault's control files
        (the person's settings, identity and git rules: the model reads them only)."""
        rel = self.vault.rel(rel)
        if is_off_limits(rel):
            raise VaultError(refusal(rel))
        if rel in CONTROL_FILES:
            raise VaultError(f"{rel} is the person's to change (the vault's settings and "
                             f"rules); the agent only reads it.")
        return rel

    def _disk(self, rel: str, errors: str = "strict") -> str | None:
        return safe.read_text(self.root, rel, errors=errors)

    def _replay(self, rel: str, text: str | None, ops: list[_Op]) -> str | None:
        for op in ops:
            if op.kind == "append":
                lines, header = op.payload
                text = _append(text, lines, header)
            elif op.kind == "write":
                text = op.payload
            elif op.kind == "delete":
                text = None
            else:
                text = op.payload(text)
        return text

    def current(self, rel: str, errors: str = "strict") -> str | None:
        """The text of `rel` with this turn's changes (None when it does not exist).

        `errors="replace"` shows bad bytes as U+FFFD (to read only); strict refuses them.
        """
        rel = self.vault.rel(rel)
        with self._lock:
            ops = [op for op in self._ops if op.rel == rel]
        return self._replay(rel, self._disk(rel, errors), ops)

    def read_text(self, rel: str) -> str:
        text = self.current(rel)
        if text is None:
            raise FileNotFoundError(f"{rel}: no such file in the vault")
        return text

    def exists(self, rel: str) -> bool:
        return self.current(rel) is not None

    def claim(self, prefix: str, quota: int | None = None) -> None:
        """Before a sandboxed command writes under `prefix/` directly on disk.

        Hand edits already there are committed first (as the user's); from now until the
        turn is saved, changes under `prefix/` are this turn's and go in its commit, up
        to `quota` bytes (see left_out).
        """
        with self._lock:
            if prefix in self._claims:
                return
            with self.vault.locked():
                self._claims[prefix] = self.vault.lock.claim(prefix, quota)
                self._quota[prefix] = quota

    def _claimed_changes(self) -> list[str]:
        if not self._claims:
            return []
        prefixes = tuple(p.strip("/") + "/" for p in self._claims)
        held = self.vault.lock.held_back()       # left out by an earlier turn, unchanged since
        return [p for p in self.vault.dirty_paths() if p.startswith(prefixes)
                and p not in held]

    def left_out(self, changed: list[str] | None = None) -> dict[str, str]:
        """Of the files this turn's commands changed, those its commit will not take, with
        why (Vault.uncommittable: links leading out, what is past the quota); they stay
        on disk, uncommitted."""
        changed = self._claimed_changes() if changed is None else changed
        out: dict[str, str] = {}
        for prefix, quota in self._quota.items():
            mine = [p for p in changed if p.startswith(prefix.strip("/") + "/")]
            out.update(self.vault.lock.uncommittable(mine, quota))
        return out

    def staged_paths(self) -> list[str]:
        with self._lock:
            seen = []
            for op in self._ops:
                if op.rel not in seen:
                    seen.append(op.rel)
            return seen

    def changed(self) -> list[str]:
        """The files whose text this turn's changes would alter (or its commands altered)."""
        return ([rel for rel in self.staged_paths() if self.current(rel) != self._disk(rel)]
                + self._claimed_changes())

    # ---- staging writes --------------------------------------------------------------

    def _stage(self, rel: str, kind: str, payload: Any) -> None:
        rel = self._target(rel)
        with self._lock:
            self._ops.append(_Op(rel, kind, payload))

    def append_lines(self, rel: str, lines: list[str], header: str | None = None) -> None:
        self._stage(rel, "append", (list(lines), header))

    def write_text(self, rel: str, text: str) -> None:
        self._stage(rel, "write", text)

    def delete(self, rel: str) -> None:
        self._stage(rel, "delete", None)

    def update(self, rel: str, fn: Callable[[str | None], str | None]) -> str | None:
        """Stage `fn(old text or None) -> new text`; runs now (errors raise) and at save.

        Returns the new text as it looks now.
        """
        rel = self._target(rel)
        with self._lock:
            new = fn(self.current(rel))
            self._ops.append(_Op(rel, "update", fn))
        return new

    @contextlib.contextmanager
    def locked(self) -> Iterator[StagedVault]:
        """Serialise read-modify-write steps of the turn's concurrent tool calls.

        The real vault lock is taken when the turn is saved, not here.
        """
        with self._lock:
            yield self

    def commit(self, change: Change | None = None, paths: list[str] | None = None) -> None:
        """No-op: staged changes land in the turn's own commit."""
        return None

    # ---- applying --------------------------------------------------------------------

    def apply(self) -> list[str]:
        """Write the staged changes through the vault (call under its lock); paths changed."""
        with self._lock:
            ops = list(self._ops)
            self._ops = []
        written = []
        for rel in dict.fromkeys(op.rel for op in ops):
            mine = [op for op in ops if op.rel == rel]
            disk = self._disk(rel)
            if all(op.kind == "append" for op in mine):
                lines = [line for op in mine for line in op.payload[0]]
                header = mine[0].payload[1] if disk is None else None
                if lines:
                    self.removed.extend(self.vault.append_lines(rel, lines, header=header))
                    written.append(rel)
                continue
            text = disk
            for op in mine:
                try:
                    text = self._replay(rel, text, [op])
                except UserError as e:
                    # The file changed since the tool ran (a hand edit): keep it as it is.
                    self.problems.append(f"{rel}: not changed: {e}")
            if text == disk:
                continue
            if text is None:
                self.vault.delete(rel)
            else:
                self.removed.extend(self.vault.write_text(rel, text))
            written.append(rel)
        if self._claims:
            changed = self._claimed_changes()
            out = self.left_out(changed)
            if out:
                self.vault.lock.hold_back(out)
                self.problems.extend(f"Not committed, left in place: {rel}: {why}."
                                     for rel, why in out.items())
            changed = [p for p in changed if p not in out]
            self.removed.extend(self.vault.journal.include(changed))
            written.extend(changed)
        with self._lock:
            claims, self._claims, self._quota = self._claims, {}, {}
        for claim in claims.values():
            # Safe before the commit: we hold the vault lock until it is made.
            self.vault.lock.release(claim)
        return written

    def release_claims(self) -> None:
        """Give up the claims without committing (the turn was dropped)."""
        with self._lock:
            claims, self._claims, self._quota = self._claims, {}, {}
        for claim in claims.values():
            self.vault.lock.release(claim)
