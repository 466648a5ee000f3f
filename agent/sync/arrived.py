"""What a fetch brought: the commits reachable from the fetched branch and not from HEAD,
read once for every step of a sync that asks about them.

One `git log --raw` gives each new commit (its tree, parents, author and Host trailer)
and every path it changed against each parent; one `git cat-file --batch-command`
session (agent.vault.git.Objects) gives the sizes and bytes of the objects those
name. The intake checks (agent.sync.incoming), the proposals noted as from elsewhere
(agent.sync.arrivals), the tombstones (agent.sync.tombstones), the held changes and
the facts merge (agent.sync.remotes) all read from it, so a pull costs the same few
git processes however many commits came in.

Every path a merge or a fast-forward can change from HEAD is one an arrived commit
changed (`paths`): a path no new commit touched has, at the fetched branch, the
version of the commits where the new ones meet HEAD's history, which are the merge
bases, so the merge keeps HEAD's. A step that cares only about some paths (held
files, the fact files, the search index) asks git nothing when none of them came in.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from agent.vault import git
from agent.vault.git import GitError

EMPTY = "0" * 40
# %x01 opens a commit; its fields are separated by %x02 (no field holds either byte:
# git writes a commit's header fields on one line each and the trailer joined by ",").
_FORMAT = "%x01%H%x02%T%x02%P%x02%an <%ae>%x02%(trailers:key=Host,valueonly,separator=%x2C)"


class Commit(NamedTuple):
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: str              # "name <email>"
    host: str                # its Host trailer (the remote's own word), or ""

    def by(self) -> str:
        """Who the commit names: `host (author)`, or the author alone."""
        return f"{self.host} ({self.author})" if self.host else self.author


class Entry(NamedTuple):
    """One path a commit changed against one of its parents (`git log --raw -m`)."""
    commit: str
    path: str
    old_mode: str
    mode: str
    old_oid: str             # EMPTY: the parent had no such path
    oid: str                 # EMPTY: the commit deleted it
    status: str


class Arrived:
    """The commits of `theirs` that `ours` lacks (newest first, as git log lists them),
    what each changed, and a session reading their objects (close it)."""

    def __init__(self, root: Path, ours: str | None, theirs: str,
                 objects: git.Objects | None = None) -> None:
        self.root, self.ours, self.theirs = root, ours, theirs
        self.commits: list[Commit] = []
        self.entries: list[Entry] = []
        self.objects = objects

    @classmethod
    def read(cls, root: Path, ours: str | None, theirs: str) -> Arrived:
        spec = [theirs] + (["--not", ours] if ours else [])
        # Whatever the person's config says, every change is listed whole: submodules
        # too (the intake refuses them), and no signature check writes into the output.
        p = git.run(["log", f"--format={_FORMAT}", "--raw", "-z", "-m", "--root",
                     "--no-renames", "--no-abbrev", "--ignore-submodules=none",
                     "--no-show-signature", *spec], root, text=False)
        if p.returncode:
            raise GitError(["log", *spec], p.returncode, p.stderr.decode("utf-8", "replace"))
        out = cls(root, ours, theirs, objects=git.Objects(root))
        out._parse(p.stdout)
        return out

    def _parse(self, stdout: bytes) -> None:
        seen: set[str] = set()
        fields = stdout.split(b"\0")
        commit = ""
        i = 0
        while i < len(fields):
            f = fields[i].lstrip(b"\n")
            i += 1
            if f.startswith(b"\x01"):
                sha, tree, parents, author, host = (
                    f[1:].decode("utf-8", "surrogateescape").split("\x02") + [""] * 5)[:5]
                commit = sha
                if sha not in seen:          # -m: a merge is listed once per parent
                    seen.add(sha)
                    self.commits.append(Commit(sha, tree, tuple(parents.split()), author,
                                               host.strip().split(",")[0].strip()))
                continue
            if not f.startswith(b":") or i >= len(fields):
                continue
            old_mode, mode, old_oid, oid, status = f[1:].decode().split()[:5]
            path = fields[i].decode("utf-8", "surrogateescape")
            i += 1
            self.entries.append(Entry(commit, path, old_mode, mode, old_oid, oid, status))

    @property
    def paths(self) -> set[str]:
        """Every path an arrived commit added, changed or deleted."""
        return {e.path for e in self.entries}

    def tree(self, sha: str) -> str | None:
        return next((c.tree for c in self.commits if c.sha == sha), None)

    def commit(self, sha: str) -> Commit | None:
        return next((c for c in self.commits if c.sha == sha), None)

    def read_blob(self, oid: str) -> bytes:
        """The bytes of a blob an arrived commit names (b"" for EMPTY)."""
        if oid == EMPTY:
            return b""
        assert self.objects is not None
        data = self.objects.read(oid)
        if data is None:
            raise GitError(["cat-file", "blob", oid], 128, f"no object {oid}")
        return data

    def close(self) -> None:
        if self.objects is not None:
            self.objects.close()
