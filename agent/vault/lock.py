"""The vault lock and the repairs made as it is taken (`vault.lock`, a part of
agent.vault.repo.Vault).

The lock is an flock on `.agent/lock`, so a killed holder never leaves it stale. On
first entry the work tree is made consistent: lock files a killed git left are
removed, an interrupted sync is finished, a torn last JSONL line is set aside, what a
killed command wrote is committed as its change (agent.vault.journal), files no commit
may take are held back and named, and a person's uncommitted edits are committed as
theirs, so the agent's next commit holds only its own change. Claims mark folders a
running sandboxed command writes, so no other process takes them for hand edits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import stat
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from agent import clock
from agent.fs import atomic
from agent.vault import rewrite_journal
from agent.vault.change import Change, Identity, by_hand, recovered
from agent.vault.gitstate import UnfinishedGit, git_process_in, conflicted, unfinished_operation
from agent.fs.pidlock import PidLock
from agent.vault.identity import VaultIdentity
from agent.vault.journal import Journal
from agent.vault.parts import Repository

HELD_FILE = "uncommitted.json"              # in .agent/: files left uncommitted on purpose


class _Owner(Repository, Protocol):
    """What the lock and its repairs ask of the Vault that owns them."""

    too_big: list[str]      # files left uncommitted, with why, for the front-end to report

    @property
    def journal(self) -> Journal:
        ...

    @property
    def identity(self) -> VaultIdentity:
        ...

    def agent_identity(self) -> Identity:
        ...

    def status(self) -> tuple[list[str], list[str]]:
        ...

    def commit_paths(self, paths: list[str] | None, change: Change) -> str | None:
        ...


class VaultLock:
    """The lock of a Vault (`vault.lock`), the repairs made as it is taken, the files
    held back and the claims."""

    def __init__(self, vault: _Owner):      # the Vault that owns this part
        self.vault = vault
        self.root = vault.root
        self.state = vault.state
        self.depth = 0                      # re-entries of `locked` by this process
        self._thread = threading.RLock()
        self._file = PidLock(vault.state / "lock")

    @property
    def held(self) -> bool:
        """Whether this process holds the vault lock."""
        return self.depth > 0

    def held_elsewhere(self) -> str | None:
        """The pid text of another process holding the vault lock, or None."""
        return None if self.depth else self._file.busy()

    # ---- the lock and repairs ------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, repair: bool = True) -> Iterator[None]:
        """Hold the vault lock (re-entrant); on first entry, repair and commit hand edits
        (not with `repair=False`: to save what must not be lost when repairing fails).

        The lock is an flock on .agent/lock, so a killed holder never leaves it stale.
        """
        with self._thread:
            if self.depth == 0:
                self._file.acquire(block=True)
            self.depth += 1
            try:
                if self.depth == 1 and repair:
                    problem = unfinished_operation(self.root, unmerged=False)
                    if problem:
                        raise UnfinishedGit(problem)
                    self.prepare()
                yield
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self._file.release()

    def prepare(self) -> None:
        """Make the work tree consistent and commit what is not the agent's next change."""
        if rewrite_journal.pending(self.vault):   # a killed forget: its old tree is no hand edit
            self.clear_stale_git_locks()
            rewrite_journal.settle(self.vault)
        self.vault.agent_identity()  # a broken agent.toml stops us before anything is written
        self.clear_stale_git_locks()
        self.vault.journal.finish_checkout()
        dirty, unmerged = self.vault.status()
        if unmerged:
            raise UnfinishedGit(conflicted(self.root, unmerged))
        broken = self.broken_hand_edits(dirty)
        if broken:                # left uncommitted and named, never committed (nor synced)
            self.vault.too_big.extend(broken.values())
            dirty = [p for p in dirty if p not in broken]
        pending = self.vault.journal.pending_paths()
        if dirty:
            held = self.held_back(dirty)
            dirty = [p for p in dirty if p not in held]
        if not dirty:
            if pending:
                self.vault.journal.clear()
            return
        torn = self._repair_torn(p for p in dirty if p.endswith(".jsonl"))
        self.vault.recovered.extend(torn)
        if torn:
            dirty = self.vault.dirty_paths()
        live, dead = self._claims()

        def under(p: str, prefixes: Iterable[str]) -> bool:
            return any(p == x or p.startswith(x + "/") for x in prefixes)
        dirty = [p for p in dirty if not under(p, live)]
        pending |= {p for p in dirty if under(p, dead)}
        leftovers = [p for p in dirty if p in pending]
        # What a killed turn's commands wrote is held to the turn's own rule (its quota,
        # no links leading out), as its commit would have been.
        out: dict[str, str] = {}
        for prefix, quota in dead.items():
            out.update(self.uncommittable([p for p in leftovers if under(p, [prefix])], quota))
        out.update(self.uncommittable([p for p in dirty if p not in out]))
        if out:
            self.hold_back(out)
            self.vault.too_big.extend(f"{p}: {why}; not committed" for p, why in out.items())
            dirty = [p for p in dirty if p not in out]
            leftovers = [p for p in leftovers if p not in out]
        if leftovers:
            intended = self.vault.journal.intended()
            if intended is not None:
                # The interrupted change itself, as it would have been committed, marked.
                self.vault.commit_paths(leftovers, dataclasses.replace(intended, trailers={
                    **intended.trailers, "Recovered": "interrupted before its commit"}))
            else:
                self.vault.commit_paths(leftovers, recovered(leftovers))
        edits = [p for p in dirty if p not in pending and not self._too_big(p)]
        if edits:
            self.vault.commit_paths(edits, by_hand(edits, self.vault.identity.user()))
        self.vault.journal.clear()

    def broken_hand_edits(self, dirty: list[str]) -> dict[str, str]:
        """Of the hand-edited files in `dirty`, those that cannot be committed, each with
        why (a cron.json that does not parse). Committed, a broken cron.json would stop
        every job and sync would spread it: it is left uncommitted, and said so, until it
        parses."""
        return self.vault.layout.hand_edit_problems(self.root, dirty)

    def broken_hand_edit(self, dirty: list[str]) -> str | None:
        """Why a hand edit in `dirty` cannot be committed, or None (the first reason)."""
        return next(iter(self.broken_hand_edits(dirty).values()), None)

    def _too_big(self, rel: str) -> bool:
        """A hand-added file over COMMIT_BYTES: left uncommitted, and said so (once)."""
        from agent.fs.safe import COMMIT_BYTES, _size
        try:
            st = os.lstat(self.root / rel)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size <= COMMIT_BYTES:
            return False
        if self.vault.git("ls-files", "--", rel).strip():
            return False        # already tracked: a change to it is the person's to commit
        self.vault.too_big.append(f"{rel} is {_size(st.st_size)}, over the {_size(COMMIT_BYTES)} "
                            f"limit for a hand-added file: not committed (commit it with git "
                            f"yourself, or list it in .gitignore)")
        self.hold_back({rel: f"{_size(st.st_size)}, over the {_size(COMMIT_BYTES)} limit "
                             f"for a hand-added file"})
        return True

    # ---- files left uncommitted on purpose ------------------------------------------

    def uncommittable(self, paths: list[str], quota: int | None = None) -> dict[str, str]:
        """Of the changed files `paths`, those no commit may take, each with why: what
        a sync would refuse from another clone (the layout's commit_problem), and with `quota`
        (bytes one turn's commands may add), the files past it, taken in name order (a
        file bigger than the quota on its own is always past it)."""
        from agent.config import show_size
        out: dict[str, str] = {}
        used = 0
        for rel in sorted(paths):
            problem = self.vault.layout.commit_problem(self.root, rel)   # another clone refuses it
            if problem:
                out[rel] = problem
                continue
            try:
                st = os.lstat(self.root / rel)
            except OSError:
                continue                       # deleted: nothing to hold back
            if quota is not None and stat.S_ISREG(st.st_mode):
                if used + st.st_size > quota:
                    out[rel] = (f"{show_size(st.st_size)}, past the {show_size(quota)} one "
                                f"turn may add to the vault ([exec] workspace_quota)")
                else:
                    used += st.st_size
        return out

    def _signature(self, rel: str) -> list[int] | None:
        try:
            st = os.lstat(self.root / rel)
        except OSError:
            return None
        return [st.st_mode, st.st_size, st.st_mtime_ns]

    def held_back(self, dirty: list[str] | None = None) -> dict[str, str]:
        """The files left uncommitted on purpose (hold_back) that are as they were then,
        with why; no command commits them. One that changed since is judged again, and
        with `dirty` (the changed files now) one no longer among them is forgotten."""
        path = self.state / HELD_FILE
        data = atomic.read_json(path) if path.exists() else None
        if not isinstance(data, dict):
            return {}
        changed = set(dirty) if dirty is not None else None
        keep = {rel: e for rel, e in data.items() if isinstance(e, dict)
                and (changed is None or rel in changed) and e.get("sig") == self._signature(rel)}
        if dirty is not None and len(keep) != len(data):
            with contextlib.suppress(OSError):
                if keep:
                    atomic.write_json(path, keep)
                else:
                    path.unlink()
        return {rel: str(e.get("why", "")) for rel, e in keep.items()}

    def hold_back(self, why: dict[str, str]) -> None:
        """Leave the files `why` names uncommitted (call locked): kept on disk as they
        are, listed in .agent/, skipped by every commit until they change."""
        if not why:
            return
        path = self.state / HELD_FILE
        data = atomic.read_json(path) if path.exists() else None
        data = data if isinstance(data, dict) else {}
        for rel, reason in why.items():
            data[rel] = {"why": reason, "sig": self._signature(rel)}
        self.state.mkdir(exist_ok=True)
        atomic.write_json(path, data)

    def clear_stale_git_locks(self, wait: float = 2.0) -> None:
        """Remove lock files left by a git process killed mid-commit.

        We hold the vault lock, so no agent process is running git; a person's own git
        command finishes well within `wait`, so a lock still there after it is stale.
        """
        git_dir = self.vault.git_dir

        def locks() -> list[Path]:
            found = [git_dir / n for n in ("index.lock", "HEAD.lock", "packed-refs.lock")]
            found += list((git_dir / "refs" / "heads").glob("**/*.lock"))
            return [p for p in found if p.exists()]

        deadline = time.monotonic() + wait
        while stale := locks():
            if time.monotonic() > deadline:
                pid = git_process_in(self.root, lambda argv: True)
                if pid:
                    raise UnfinishedGit(
                        f"A git command (process {pid}) holds {stale[0].name} in the vault "
                        f"{self.root}: let it finish, then run again. Nothing was changed.")
                for lock in stale:
                    with contextlib.suppress(FileNotFoundError):
                        lock.unlink()
                    self.vault.recovered.append(f".git/{lock.relative_to(git_dir)} (left by a killed git) removed")
                return
            time.sleep(0.05)

    def _repair_torn(self, paths: Iterable[str]) -> list[str]:
        """Set aside a torn last line of each JSONL file into .agent/recovered/."""
        moved = []
        for rel in paths:
            path = self.root / rel
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue      # only a plain file is repaired: never a link's target
            except OSError:
                continue
            with open(path, "rb+") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    continue
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    continue
                # Find the start of the torn line: the byte after the last newline.
                pos, chunk = size, 65536
                start = 0
                while pos > 0:
                    pos = max(0, pos - chunk)
                    f.seek(pos)
                    data = f.read(min(chunk, size - pos))
                    nl = data.rfind(b"\n")
                    if nl >= 0:
                        start = pos + nl + 1
                        break
                f.seek(start)
                torn = f.read()
                dest_dir = self.state / "recovered"
                dest_dir.mkdir(parents=True, exist_ok=True)
                stamp = clock.now().strftime("%Y%m%dT%H%M%S")
                dest = dest_dir / f"{rel.replace('/', '__')}.{stamp}.torn"
                dest.write_bytes(torn)
                f.truncate(start)
                f.flush()
                os.fsync(f.fileno())
            moved.append(f"{rel} -> {dest.relative_to(self.root)}")
        return moved

    # ---- claims: files a running sandboxed command writes --------------------------

    def claim(self, prefix: str, quota: int | None = None) -> Path:
        """Mark `prefix/` as being written by a command this process runs (call locked).

        Until the claim is released, no process's repair treats changes under it as hand
        edits: they belong to the turn that ran the command and go in its commit
        (`include`). A claim whose process died is dropped and its changes recovered as
        the agent's.
        """
        folder = self.state / "claims"
        folder.mkdir(parents=True, exist_ok=True)
        import secrets
        path = folder / f"{os.getpid()}-{secrets.token_hex(4)}.json"
        path.write_text(json.dumps({"pid": os.getpid(), "prefix": prefix.strip("/"),
                                    "quota": quota}))
        return path

    def release(self, claim: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            claim.unlink()

    def _claims(self) -> tuple[list[str], dict[str, int | None]]:
        """(prefixes claimed by live processes, {prefix whose claimant died: its quota});
        dead ones removed."""
        live, dead = [], {}
        for path in (self.state / "claims").glob("*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            # A claim of another shape is no claim (a bug here must still raise).
            if not isinstance(data, dict):
                continue
            pid, prefix, quota = data.get("pid"), data.get("prefix"), data.get("quota")
            if (not isinstance(pid, int) or not isinstance(prefix, str)
                    or not (quota is None or isinstance(quota, int))):
                continue
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            except PermissionError:
                alive = True
            if alive:
                live.append(prefix)
            else:
                dead[prefix] = quota
                self.release(path)
        return live, dead
