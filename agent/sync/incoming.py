"""What a remote may bring in: a fetched commit is checked before anything is journalled.

A sync (and a clone) takes commits someone else made. Before the vault merges, moves
or checks out any of them, every commit new to this machine is walked (only the paths
it changed: one `git log --raw` and one `git cat-file --batch-command` session, read
once for the whole sync by agent.sync.arrived, so the cost follows what came in, not
the vault's size), and the whole fetch is refused, with one
line naming the commit, the path and the problem, when a commit holds:

- a path git or the vault refuses: an empty component, `.` or `..`, `.git` in any
  case (and its 8.3 and trailing-dot spellings), a backslash or a control character,
  or anything under `.agent/` (this machine's own state: approvals, journals, locks);
- a symlink whose target leads out of the vault (absolute, or `..` past its root), to a
  folder holding it, to a file that is not plain data (settings, skills, heartbeats,
  memory), or standing where one of those belongs (`skills` as a link);
- a file name longer than a disk takes (255 bytes);
- a submodule (a commit of another repository: the vault has none);
- a file over the vault's size limit for a file it commits on its own, or over what a
  prompt holds for a file every prompt holds whole (MEMORY.md, USER.md);
- one of the agent's own records (`.dream_cursor`) in a form it does not read;
- a `.gitattributes` naming a filter, a merge driver the vault did not install, or a
  diff driver that is not one of git's built-in ones (each runs a command of the
  config, and the vault's git calls must never run one a remote chose).

These are the rules of agent.stores.kinds, which a commit made here obeys too. Nothing
in the vault changes: HEAD, the work tree, the index and the checkout journal
are as they were, and the remote-tracking ref is put back (sync.py).
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from agent import stores
from agent.stores import memory
from agent.stores import kinds
from agent.vault import git
from agent.vault.repo import GitError, VaultError
from agent.fs.safe import COMMIT_BYTES, _size
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from agent.sync.arrived import Arrived
    from agent.vault.repo import Vault

EMPTY = "0" * 40
# What a proposal branch may change (the fact files): one from a remote that
# changes anything else, or these as anything but regular files, is not taken.
FILES = memory.MEMORY_FILES
SYMLINK = "120000"
GITLINK = "160000"



class IncomingRefused(VaultError):
    """An incoming commit the vault will not take; nothing was changed."""


class Incoming(NamedTuple):
    commit: str
    path: str
    mode: str
    oid: str


def check(root: Path, ours: str | None, theirs: str, source: str,
          arrived: Arrived | None = None) -> None:
    """Refuse (IncomingRefused) when a commit reachable from `theirs` and not from `ours` holds
    something the vault will not take; `source` names where it came from. `arrived`:
    those commits as a sync read them (its objects are read through its session)."""
    if arrived is None:
        check_entries(root, new_changes(root, ours, theirs), source)
        return
    check_entries(root, arrived_changes(arrived), source, arrived.objects)


def arrived_changes(arrived: Arrived) -> list[Incoming]:
    """new_changes, from the commits a sync read already."""
    out: list[Incoming] = []
    seen: set[tuple[str, str]] = set()
    for e in arrived.entries:
        if e.status.startswith("D") or e.oid == EMPTY or (e.path, e.oid) in seen:
            continue
        seen.add((e.path, e.oid))
        out.append(Incoming(e.commit, e.path, e.mode, e.oid))
    return out


def check_tree(root: Path, commit: str, source: str) -> None:
    """Refuse (IncomingRefused) when the tree of `commit` holds something the vault will not take
    (a clone checks out only the newest tree)."""
    p = _git(root, "ls-tree", "-r", "-z", "--full-tree", commit)
    out = []
    for item in p.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        mode, _, oid = meta.decode().split()
        out.append(Incoming(commit, path.decode("utf-8", "surrogateescape"), mode, oid))
    check_entries(root, out, source)


def check_entries(root: Path, changes: list[Incoming], source: str,
                  objects: git.Objects | None = None) -> None:
    """Refuse (IncomingRefused) the first of `changes` the vault will not take; their
    objects are read through `objects` (None: a session of this check's own)."""
    for c in changes:
        problem = path_problem(c.path)
        if problem is None and c.mode == GITLINK:
            problem = "is a submodule (a commit of another repository)"
        if problem:
            _refuse(source, c, problem)
    blobs = [c for c in changes if c.mode not in (GITLINK,)]
    if not blobs:
        return
    if objects is None:
        with git.Objects(root) as own:
            _check_blobs(blobs, source, own)
    else:
        _check_blobs(blobs, source, objects)


def _check_blobs(blobs: list[Incoming], source: str, objects: git.Objects) -> None:
    """The checks of what the blobs hold: sizes first, then the bytes of the few kinds
    of file whose content is checked (read only once their size passed)."""
    sizes = _sizes(objects, {c.oid for c in blobs})
    for c in blobs:
        if c.mode != SYMLINK and sizes.get(c.oid, 0) > COMMIT_BYTES:
            _refuse(source, c, f"is {_size(sizes[c.oid])}, over the {_size(COMMIT_BYTES)} "
                               f"limit for a file the vault takes in")
        problem = kinds.size_problem(c.path, sizes.get(c.oid, 0)) if c.mode != SYMLINK else None
        if problem:
            _refuse(source, c, problem)
    formats = stores.intake_checks()
    for c in blobs:
        check = formats.get(c.path) if c.mode != SYMLINK else None
        if check is not None:
            problem = check(_blob(objects, c.oid).decode("utf-8", "replace"))
            if problem:
                _refuse(source, c, problem)
    for c in blobs:
        if c.mode == SYMLINK:
            target = _blob(objects, c.oid).decode("utf-8", "surrogateescape")
            problem = link_problem(c.path, target)
            if problem:
                _refuse(source, c, problem)
        elif posixpath.basename(c.path).lower() == ".gitattributes":
            text = _blob(objects, c.oid).decode("utf-8", "replace")
            problem = attributes_problem(text)
            if problem:
                _refuse(source, c, problem)


def new_changes(root: Path, ours: str | None, theirs: str) -> list[Incoming]:
    """The paths added or changed by the commits reachable from `theirs` and not `ours`
    (a merge against each of its parents), each with the commit that brought it."""
    spec = [theirs] + (["--not", ours] if ours else [])
    stdout = _git(root, "log", "--format=%x01%H", "--raw", "-z", "-m", "--root",
                  "--no-renames", "--no-abbrev", *spec)
    out: list[Incoming] = []
    seen: set[tuple[str, str]] = set()
    commit = ""
    fields = stdout.split(b"\0")
    i = 0
    while i < len(fields):
        f = fields[i]
        i += 1
        f = f.lstrip(b"\n")
        if f.startswith(b"\x01"):
            commit = f[1:].decode()
            continue
        if not f.startswith(b":"):
            continue
        meta = f.decode().split()
        path = fields[i].decode("utf-8", "surrogateescape") if i < len(fields) else ""
        i += 1
        _, mode, _, oid, status = meta[0], meta[1], meta[2], meta[3], meta[4]
        if status.startswith("D") or oid == EMPTY:
            continue
        if (path, oid) in seen:
            continue
        seen.add((path, oid))
        out.append(Incoming(commit, path, mode, oid))
    return out


# The rules themselves live with the kinds of file (agent.stores.kinds), where a commit
# made here applies them too.
path_problem = kinds.path_problem
attributes_problem = kinds.attributes_problem


def link_problem(path: str, target: str) -> str | None:
    """Why the symlink at `path` pointing to `target` is refused (None: it stays inside)."""
    problem = kinds.link_problem(path, target)
    return f"is {problem}" if problem else None


def _refuse(source: str, c: Incoming, problem: str) -> None:
    raise IncomingRefused(f"Refused what {source} sent: commit {c.commit[:7]} has {c.path!r}, which "
                  f"{problem}. Nothing was changed here; fix or remove that commit on the "
                  f"remote, then sync again.")


def _git(root: Path, *args: str, input: bytes | None = None) -> bytes:
    p = git.run(args, root, input=input, text=False)
    if p.returncode:
        raise GitError(list(args), p.returncode, p.stderr.decode("utf-8", "replace"))
    return p.stdout


def _sizes(objects: git.Objects, oids: set[str]) -> dict[str, int]:
    return objects.sizes(sorted(oids))


def _blob(objects: git.Objects, oid: str) -> bytes:
    data = objects.read(oid)
    if data is None:
        raise GitError(["cat-file", "blob", oid], 128, f"fatal: Not a valid object name {oid}")
    return data


# ---- the dream's proposal branches (dream/*) a remote offers ---------------------------


def check_proposal(vault: Vault, sha: str) -> str | None:
    """Why the commit `sha` a remote offers as a proposal branch is not taken (None: it
    is as the dream makes one): one parent, on this vault's branch (HEAD), and a change
    of MEMORY.md or USER.md as regular files only (and this module's checks)."""
    parents = vault.git("rev-list", "--parents", "-n", "1", sha, check=False).split()[1:]
    if len(parents) != 1 or not _ancestor(vault, parents[0]):
        if vault.git("merge-base", sha, "HEAD", check=False).strip():
            return ("it is not one commit on top of this vault's branch (as a proposal "
                    "is)")
        return "it is not built on this vault's history (it shares no commit with it)"
    out = vault.git("diff-tree", "-r", "-z", "--no-renames", parents[0], sha).split("\0")
    changes = []
    for meta, path in zip(out[0::2], out[1::2]):
        if not meta.startswith(":"):
            continue
        _, new_mode, _, oid, status = meta[1:].split()
        if path not in FILES:
            return f"it changes {path} (a proposal changes only {' and '.join(FILES)})"
        if status == "D" or new_mode != "100644":
            return (f"it {'deletes' if status == 'D' else 'makes'} {path}"
                    f"{'' if status == 'D' else ' a link or an executable'} (a proposal "
                    f"changes only the text of {' and '.join(FILES)})")
        changes.append(Incoming(sha, path, new_mode, oid))
    try:
        check_entries(vault.root, changes, f"proposal {sha[:7]}")
    except IncomingRefused as e:
        return str(e)
    return None


def _ancestor(vault: Vault, sha: str) -> bool:
    """Whether `sha` is HEAD or one of its ancestors."""
    return git.run(["merge-base", "--is-ancestor", sha, "HEAD"], vault.root).returncode == 0
