"""The vault's journals, so that a kill at any instant is finished or recovered by the
next command (`vault.journal`, a part of agent.vault.repo.Vault):

- the write journal (`.agent/pending.json`): every path this process is about to write,
  and the change it is making (`intend`), so the repair commits a killed command's
  leftovers as that change (`recover`, or the intended change marked `Recovered:`);
- the checkout journal (`.agent/checkout.json`): a sync's move of HEAD and the work
  tree to another commit, finished forward by the next command, or given up by
  `agent doctor --fix` when git refuses it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any, ContextManager, Protocol

from agent import redact
from agent.fs import atomic
from agent.vault import git
from agent.vault.change import Change
from agent.vault.git import GitError, VaultError
from agent.fs.offlimits import STATE_DIR, is_off_limits
from agent.vault.parts import Repository, StaleLocks

# The command that gives up a checkout that cannot be finished (Journal.abandon_checkout).
FIX_CHECKOUT = "agent doctor --fix"
CHECKOUT_JOURNAL = "checkout.json"          # in .agent/
PENDING_JOURNAL = "pending.json"            # in .agent/


class CheckoutStuck(VaultError):
    """A sync's checkout a kill interrupted cannot be finished (the commit it moves to
    is one git refuses to check out): nothing is committed until `agent doctor --fix`."""


class _Owner(Repository, Protocol):
    """What the journals ask of the Vault that owns them."""

    @property
    def lock(self) -> StaleLocks:
        ...

    def rel(self, path: str | os.PathLike[str]) -> str:
        ...

    def locked(self, repair: bool = True) -> ContextManager[object]:
        ...


class Journal:
    """The write and checkout journals of a Vault (`vault.journal`; see the module's
    docstring)."""

    def __init__(self, vault: _Owner):      # the Vault that owns this part
        self.vault = vault
        self.root = vault.root
        self.state = vault.state
        self.touched: list[str] = []         # what this process wrote, not yet committed
        self.intent: Change | None = None    # the agent change being written (intend)

    # ---- the checkout journal: a sync's move to another commit ----------------------

    def checkout_commit(self, new: str, reflog: str) -> None:
        """Move HEAD and the work tree from HEAD to commit `new` (a sync's merge or
        fast-forward), so that a kill at any instant is finished by the next command.

        The work tree is clean here (hand edits were committed first, under the lock),
        so the two-tree `read-tree -m -u` only writes what differs between the commits
        (from nothing when HEAD has no commit yet: `old` is then None).
        """
        old = self.vault.head()
        journal = self.state / CHECKOUT_JOURNAL
        atomic.write_json(journal, {"old": old, "new": new, "reflog": reflog})
        try:
            self.vault.git("read-tree", "-m", "-u", old or self._empty_tree(), new)
        except GitError:
            # Git refuses that commit (a path it will not write, ...): a replay would
            # too, so it is given up at once and the vault stays as it was.
            self.abandon_checkout()
            raise
        self.vault.git("update-ref", "-m", reflog, "HEAD", new, old or "")   # "": HEAD had none
        journal.unlink()

    def _empty_tree(self) -> str:
        return self.vault.git("hash-object", "-t", "tree", "--stdin", input="").strip()

    def _checkout_journal(self) -> tuple[str | None, str, str] | None:
        """(old, new, reflog) of a checkout journal that still has work to do: HEAD is
        at `old` (None: no commit yet) and `new` is a commit. None otherwise (a stale or
        unreadable journal is removed)."""
        journal = self.state / CHECKOUT_JOURNAL
        j = atomic.read_json(journal)
        try:
            old, new, reflog = j["old"], j["new"], j["reflog"]
        except (KeyError, TypeError):
            journal.unlink(missing_ok=True)
            return None
        if not ((old is None or isinstance(old, str)) and isinstance(new, str)
                and isinstance(reflog, str)) \
                or self.vault.head() != old \
                or self.vault.git("cat-file", "-t", new, check=False).strip() != "commit":
            journal.unlink(missing_ok=True)
            return None
        return old, new, reflog

    def finish_checkout(self) -> None:
        """Finish a checkout a kill interrupted (see `checkout_commit`); CheckoutStuck
        when git refuses it, saying what to run."""
        todo = self._checkout_journal()
        if todo is None:
            return
        old, new, reflog = todo
        try:
            # Forward: git writes the index last, so --reset rewrites every path the
            # interrupted checkout may have left half-done, and nothing else.
            self.vault.git("read-tree", "--reset", "-u", new)
            self.vault.git("update-ref", "-m", reflog, "HEAD", new, old or "")
        except GitError as e:
            raise CheckoutStuck(self._stuck(old, new, e.stderr)) from None
        self.vault.recovered.append(f"an interrupted sync was finished ({reflog})")
        (self.state / CHECKOUT_JOURNAL).unlink()

    def _stuck(self, old: str | None, new: str, why: str, short: bool = False) -> str:
        back = f"{old[:7]}, the commit before that sync" if old else "before that sync"
        why = " ".join((why.strip().splitlines() or ["git refused it"])[-1].split())
        what = f"moving the vault to commit {new[:7]} fails ({why.removeprefix('error: ')})"
        if short:
            return (f"an interrupted sync cannot be finished: {what}; its journal is "
                    f"{STATE_DIR}/{CHECKOUT_JOURNAL}")
        return (f"The vault {self.root} is stuck in an interrupted sync: {what}, and its "
                f"journal {self.state / CHECKOUT_JOURNAL} cannot be replayed. Run "
                f"`{FIX_CHECKOUT}` to go back to {back} "
                f"(your files and edits are kept).")

    def checkout_problem(self) -> str | None:
        """What stops the next command finishing an interrupted sync's checkout (a short
        form of CheckoutStuck's message), or None: there is none, or git will take it.
        Writes nothing: the commit is tried in a throwaway index."""
        journal = self.state / CHECKOUT_JOURNAL
        j = atomic.read_json(journal) if journal.exists() else None
        if not isinstance(j, dict) or self.vault.head() != j.get("old"):
            return None
        new = j.get("new")
        if not isinstance(new, str) or \
                self.vault.git("cat-file", "-t", new, check=False).strip() != "commit":
            return None
        import tempfile
        with tempfile.TemporaryDirectory(dir=self.state) as tmp:
            p = git.run(["read-tree", new], self.root,
                        env={**os.environ, "GIT_INDEX_FILE": os.path.join(tmp, "index")})
        return self._stuck(j["old"], new, p.stderr, short=True) if p.returncode else None

    def repair_checkout(self) -> list[str]:
        """`agent doctor --fix`: finish an interrupted sync's checkout, or, when git
        refuses the commit it moves to, give it up (abandon_checkout). What was done,
        one line each (nothing: there was nothing to do)."""
        with self.vault.locked(repair=False):
            self.vault.lock.clear_stale_git_locks()
            try:
                self.finish_checkout()
            except CheckoutStuck:
                return self.abandon_checkout()
            done, self.vault.recovered = self.vault.recovered, []
            return done

    def abandon_checkout(self) -> list[str]:
        """Give up the journalled checkout (call locked): HEAD stays at the commit before
        it, each file the checkout had already written is put back as it was there, and
        every other change in the work tree (a person's edits since) is kept, to be
        committed as theirs by the next command. Nothing is lost: a file put back held
        exactly the refused commit's version."""
        journal = self.state / CHECKOUT_JOURNAL
        todo = self._checkout_journal()
        if todo is None:
            return []
        old, new, _ = todo
        # The index back to HEAD's tree; the work tree is not touched by this.
        self.vault.git("read-tree", old or "--empty")
        moved = {p for p in self.vault.git("diff-tree", "-r", "-z", "--no-renames", "--name-only",
                                     old or self._empty_tree(), new).split("\0") if p}
        written = [p for p in self.vault.dirty_paths() if p in moved and self._holds(p, new)]
        restore = []
        for rel in written:
            if old and self.vault.git("ls-tree", "--name-only", old, "--", rel).strip():
                restore.append(rel)
            else:
                # A file only the refused commit has: not a person's (it is that
                # commit's own bytes), so it goes.
                (self.root / rel).unlink(missing_ok=True)
                parent = (self.root / rel).parent
                while parent != self.root and not any(parent.iterdir()):
                    parent.rmdir()
                    parent = parent.parent
        if restore:
            self.vault.git("checkout-index", "-f", "-q", "--", *restore)
        journal.unlink(missing_ok=True)
        kept = [p for p in self.vault.dirty_paths() if p not in written]
        lines = [f"gave up the interrupted sync to {new[:7]}, which git refuses to check "
                 f"out: the vault stays {f'at {old[:7]}' if old else 'with no commit'}"]
        if written:
            lines.append(f"{len(written)} file{'s' * (len(written) != 1)} that sync had "
                         f"written put back: {', '.join(sorted(written)[:5])}"
                         f"{', ...' if len(written) > 5 else ''}")
        if kept:
            lines.append(f"{len(kept)} changed file{'s' * (len(kept) != 1)} kept, to be "
                         f"committed as your edits: {', '.join(sorted(kept)[:5])}"
                         f"{', ...' if len(kept) > 5 else ''}")
        return lines

    def _holds(self, rel: str, commit: str) -> bool:
        """Whether the work tree's `rel` is exactly `commit`'s version (both absent counts)."""
        entry = self.vault.git("ls-tree", "-z", commit, "--", rel).split("\0")[0]
        path = self.root / rel
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return not entry
        if not entry:
            return False
        mode, _, oid = entry.split("\t", 1)[0].split()
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(path).encode("utf-8", "surrogateescape")
            return mode == "120000" and self.vault.git(
                "hash-object", "--stdin", input=data.decode("utf-8", "surrogateescape")
            ).strip() == oid
        if not stat.S_ISREG(st.st_mode) or mode == "120000":
            return False
        return self.vault.git("hash-object", "--no-filters", "--", rel).strip() == oid

    # ---- the write journal: what this process writes, and as which change -----------

    def include(self, paths: list[str]) -> list[str]:
        """Count `paths` (changed on disk by a command this turn ran) as this process's
        writes; the kinds of secret scrubbed out of them."""
        kept = redact.scrub_files(self.root, [self.vault.rel(rel) for rel in paths])
        for rel in paths:
            # As git lists it, not resolved: a symlink is the link, never its target.
            rel = os.path.normpath(rel).replace(os.sep, "/")
            if rel.startswith(("/", "../")) or rel == ".." or is_off_limits(rel):
                raise VaultError(f"{rel} is not a path the vault commits.")
            self.note(rel)
        return kept

    def _pending_file(self) -> Path:
        return self.state / PENDING_JOURNAL

    def _read_journal(self) -> dict[str, Any]:
        try:
            data = json.loads(self._pending_file().read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return {}
        if isinstance(data, list):                  # the journal's first form: paths only
            data = {"paths": data}
        return data if isinstance(data, dict) else {}

    def pending_paths(self) -> set[str]:
        paths = self._read_journal().get("paths")
        return {p for p in paths if isinstance(p, str)} if isinstance(paths, list) else set()

    def intended(self) -> Change | None:
        """The change an interrupted command was making (see intend), or None."""
        c = self._read_journal().get("change")
        if not isinstance(c, dict) or not isinstance(c.get("kind"), str) \
                or not isinstance(c.get("subject"), str):
            return None
        trailers = c.get("trailers")
        trailers = trailers if isinstance(trailers, dict) else {}
        return Change(c["kind"], c["subject"], scope=c.get("scope") if isinstance(
            c.get("scope"), str) else None, body=str(c.get("body") or ""),
            trailers={str(k): str(v) for k, v in trailers.items()})

    def intend(self, change: Change, *, with_next_path: bool = False) -> None:
        """Journal the agent change about to be written, so that a kill before its commit
        is recovered as that change (its kind, scope and trailers, which undo reads).

        `with_next_path`: a path not yet journalled is written next, and the change is
        journalled with it, in one write (a command that restates its change before
        each of many new files, as an import does, pays one fsync for both)."""
        self.intent = change
        if not with_next_path:
            self._write_journal()

    def _write_journal(self) -> None:
        self.state.mkdir(exist_ok=True)
        data: dict[str, Any] = {"paths": self.touched}
        change = self.intent
        if change is not None and change.author is None:
            data["change"] = {"kind": change.kind, "subject": change.subject,
                              "scope": change.scope, "body": change.body,
                              "trailers": dict(change.trailers)}
        atomic.write_text(self._pending_file(), json.dumps(data))

    def note(self, rel: str) -> None:
        """Journal a path before writing it, so a crash's leftovers are known as ours."""
        if rel in self.touched:
            return
        self.touched.append(rel)
        self.state.mkdir(exist_ok=True)
        self._write_journal()

    def clear(self) -> None:
        self.intent = None
        with contextlib.suppress(FileNotFoundError):
            self._pending_file().unlink()
