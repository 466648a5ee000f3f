"""What a remote may bring in: a fetched commit is checked before anything is journalled.

A sync (and a clone) takes commits someone else made. Before the vault merges, moves
or checks out any of them, every commit new to this machine is walked (only the paths
it changed: one `git log --raw` and one `git cat-file --batch-check`, so the cost
follows what came in, not the vault's size), and the whole fetch is refused, with one
line naming the commit, the path and the problem, when a commit holds:

- a path git or the vault refuses: an empty component, `.` or `..`, `.git` in any
  case (and its 8.3 and trailing-dot spellings), a backslash or a control character,
  or anything under `.agent/` (this machine's own state: approvals, journals, locks);
- a symlink whose target leads out of the vault (absolute, or `..` past its root);
- a submodule (a commit of another repository: the vault has none);
- a file over the vault's size limit for a file it commits on its own;
- a `.gitattributes` naming a filter, a merge driver the vault did not install, or a
  diff driver that is not one of git's built-in ones (each runs a command of the
  config, and the vault's git calls must never run one a remote chose).

Nothing in the vault changes: HEAD, the work tree, the index and the checkout journal
are as they were, and the remote-tracking ref is put back (sync.py).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from agent.vault import attributes
from agent.fs import offlimits
from agent.fs.offlimits import STATE_DIR
from agent.stores import memory
from agent.vault import git
from agent.vault.repo import GitError, VaultError
from agent.fs.safe import COMMIT_BYTES, _size
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

EMPTY = "0" * 40
# What a proposal branch may change (the fact files): one from a remote that
# changes anything else, or these as anything but regular files, is not taken.
FILES = memory.MEMORY_FILES
SYMLINK = "120000"
GITLINK = "160000"

# git's own merge behaviours and diff function patterns: naming one runs nothing.
_BUILTIN_MERGE = {"text", "binary", "union"}
_BUILTIN_DIFF = {"ada", "bash", "bibtex", "cpp", "csharp", "css", "dts", "elixir",
                 "fortran", "fountain", "golang", "html", "java", "kotlin", "markdown",
                 "matlab", "objc", "pascal", "perl", "php", "python", "r", "ruby", "rust",
                 "scheme", "tex"}
_ATTR = re.compile(r"^([!-]?)(filter|merge|diff)(?:=(.*))?$")
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


class IncomingRefused(VaultError):
    """An incoming commit the vault will not take; nothing was changed."""


@dataclass
class Incoming:
    commit: str
    path: str
    mode: str
    oid: str


def check(root: Path, ours: str | None, theirs: str, source: str) -> None:
    """Refuse (IncomingRefused) when a commit reachable from `theirs` and not from `ours` holds
    something the vault will not take; `source` names where it came from."""
    check_entries(root, new_changes(root, ours, theirs), source)


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


def check_entries(root: Path, changes: list[Incoming], source: str) -> None:
    for c in changes:
        problem = path_problem(c.path)
        if problem is None and c.mode == GITLINK:
            problem = "is a submodule (a commit of another repository)"
        if problem:
            _refuse(source, c, problem)
    blobs = [c for c in changes if c.mode not in (GITLINK,)]
    if not blobs:
        return
    sizes = _sizes(root, {c.oid for c in blobs})
    for c in blobs:
        if c.mode != SYMLINK and sizes.get(c.oid, 0) > COMMIT_BYTES:
            _refuse(source, c, f"is {_size(sizes[c.oid])}, over the {_size(COMMIT_BYTES)} "
                               f"limit for a file the vault takes in")
    for c in blobs:
        if c.mode == SYMLINK:
            target = _blob(root, c.oid).decode("utf-8", "surrogateescape")
            problem = link_problem(c.path, target)
            if problem:
                _refuse(source, c, problem)
        elif posixpath.basename(c.path) == ".gitattributes":
            text = _blob(root, c.oid).decode("utf-8", "replace")
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


def path_problem(path: str) -> str | None:
    """Why the vault will not take a file at `path` (None: it will)."""
    if not path or path.startswith("/"):
        return "is not a relative path"
    if _BAD_CHARS.search(path):
        return "holds a backslash or a control character"
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return f"has a path component {part!r}"
        bare = part.rstrip(". ").lower()
        if bare in (".git", "git~1"):
            return "names git's own folder (.git)"
    if parts[0].rstrip(". ").lower() == STATE_DIR:      # .AGENT is .agent on macOS
        return f"is inside {STATE_DIR}/, this machine's own state"
    return None


def link_problem(path: str, target: str) -> str | None:
    """Why the symlink at `path` pointing to `target` is refused (None: it stays inside):
    the vault's one rule for links, also applied to what a turn commits."""
    problem = offlimits.link_problem(path, target)
    return f"is {problem}" if problem else None


def attributes_problem(text: str) -> str | None:
    """Why a .gitattributes is refused: it names a command the vault did not install."""
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        for word in words[1:]:
            m = _ATTR.match(word)
            if not m or m.group(1):
                continue              # not a driver, or one switched off (-merge, !diff)
            kind, name = m.group(2), m.group(3)
            if name is None:
                continue              # `merge`, `diff`: git's built-in behaviour
            if kind == "filter":
                return f"line {n} names a filter ({word}), which would run a command"
            if kind == "merge" and name not in _BUILTIN_MERGE | set(attributes.DRIVERS):
                return f"line {n} names a merge driver the vault did not install ({word})"
            if kind == "diff" and name not in _BUILTIN_DIFF:
                return f"line {n} names a diff driver the vault did not install ({word})"
    return None


def _refuse(source: str, c: Incoming, problem: str) -> None:
    raise IncomingRefused(f"Refused what {source} sent: commit {c.commit[:7]} has {c.path!r}, which "
                  f"{problem}. Nothing was changed here; fix or remove that commit on the "
                  f"remote, then sync again.")


def _git(root: Path, *args: str, input: bytes | None = None) -> bytes:
    p = git.run(args, root, input=input, text=False)
    if p.returncode:
        raise GitError(list(args), p.returncode, p.stderr.decode("utf-8", "replace"))
    return p.stdout


def _sizes(root: Path, oids: set[str]) -> dict[str, int]:
    out = _git(root, "cat-file", "--batch-check=%(objectname) %(objectsize)",
               input=("\n".join(sorted(oids)) + "\n").encode())
    sizes = {}
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    return sizes


def _blob(root: Path, oid: str) -> bytes:
    return _git(root, "cat-file", "blob", oid)


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
