"""Reading the vault's history: every commit the product reads back is read here.

(Writing is agent.vault.change: a `Change` record is the one way to make a commit
message; `vault.commit(change)` commits it.)

What the product asks of history: the agent's recent commits with their
trailers (`recent`), one commit (`find`), `undo` (the last agent change, or the last
turn of a session), which files changed since a commit (`changed_since`), how many
commits lie between two (`count_between`), the head in a line (`head_line`) and how
files changed (`file_log`, for `agent log`). Each is one `git` command whose output
this module alone parses; nothing outside agent/vault runs git.

Why the git binary and not GitPython's object model: here each read is one git process
whose output is parsed once; GitPython walks commit objects one by one and is slower on
every path a user waits for. On a vault of 100,000 messages and 2,000 turn commits
(scripts/bench_history.py): undo's search over 1,000 commits 114 ms against 297 ms,
over 50 (what undo reads first) 19 ms against 32 ms, `agent log -n 20` 20 ms against
193 ms, and importing GitPython alone costs a command about 0.3-0.5 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from agent.errors import UserError
from agent.vault.change import REVERTS, SESSION, Change
from agent.vault.repo import GitError, Vault

# How far back `undo` looks for the change to revert; it reads the newest few first, as
# the change it reverts is nearly always among them.
UNDO_DEPTH = 1000
UNDO_FIRST = 50

_FIELD, _RECORD = "\x1f", "\x1e"


# ---- reading ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """A commit as history reads it: who made it, its subject line and its trailers."""

    sha: str
    email: str
    subject: str
    trailers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def short(self) -> str:
        return self.sha[:7]

    @property
    def kind(self) -> str:
        """`chat` of `chat(cli/default): hello` (the word before `(` or `:`)."""
        head = self.subject.split(":", 1)[0]
        return head.split("(", 1)[0]

    @property
    def scope(self) -> str | None:
        """`cli/default` of `chat(cli/default): hello`, None when there is none."""
        head = self.subject.split(": ", 1)[0]
        if "(" in head and head.endswith(")"):
            return head[head.index("(") + 1:-1]
        return None

    def trailer(self, key: str) -> str | None:
        """The value of trailer `key` (the last one, when it repeats), or None."""
        values = self.trailers.get(key)
        return values[-1] if values else None


_TRAILER_KEYS = (SESSION, REVERTS)


def _format(keys) -> str:
    trailers = "".join(f"{_FIELD}%(trailers:key={k},valueonly,separator=%x1d)" for k in keys)
    return f"%H{_FIELD}%ae{_FIELD}%s{trailers}{_RECORD}"


def _parse(out: str, keys) -> list[Commit]:
    commits = []
    for rec in out.split(_RECORD):
        rec = rec.strip("\n")
        if not rec:
            continue
        sha, email, subject, *values = rec.split(_FIELD)
        trailers = {}
        for key, value in zip(keys, values):
            found = tuple(v.strip() for v in value.split("\x1d") if v.strip())
            if found:
                trailers[key] = found
        commits.append(Commit(sha, email, subject, trailers))
    return commits


def recent(vault: Vault, limit: int = UNDO_DEPTH, keys=_TRAILER_KEYS) -> list[Commit]:
    """The newest `limit` commits, newest first, with trailers `keys` read."""
    if vault.head() is None:
        return []
    return _parse(vault.git("log", "-n", str(limit), f"--format={_format(keys)}"), keys)


def find(vault: Vault, ref: str, keys=_TRAILER_KEYS) -> Commit | None:
    """The commit `ref` names (a sha, a short sha, HEAD~2, ...), or None."""
    full = vault.git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False).strip()
    if not full:
        return None
    return _parse(vault.git("log", "-1", f"--format={_format(keys)}", full), keys)[0]


def head_line(vault: Vault) -> str | None:
    """`1a2b3c4 note: add 1 line to memory/2026-11-20.md (2 minutes ago)`, None if empty."""
    return vault.git("log", "-1", "--format=%h %s (%ar)", check=False).strip() or None


def file_log(vault: Vault, paths: list[str], *, max_count: int | None = None,
             since: str | None = None, oneline: bool = False, color: bool = False) -> str:
    """How `paths` changed, newest first: each commit's line and its diff (or one line)."""
    args = ["log", "--no-renames", "--no-ext-diff", "--no-textconv"]
    args += ["--oneline"] if oneline else ["-p", "--format=commit %h  %ad  %an%n%n    %s%n",
                                            "--date=format:%Y-%m-%d %H:%M"]
    if max_count:
        args += ["-n", str(max_count)]
    if since:
        args += [f"--since={since}"]
    if color:
        args += ["--color=always"]
    return vault.git(*args, "--", *paths)


def changed_since(vault: Vault, since: str, head: str | None) -> list[str] | None:
    """Paths that differ between commit `since` and `head`; None when `since` is gone."""
    if not head or since == head:
        return []
    try:
        out = vault.git("diff", "--name-only", "-z", "--no-renames", since, head)
    except GitError:
        return None
    return [p for p in out.split("\0") if p]


def count_between(vault: Vault, older: str, newer: str) -> int | None:
    """How many commits `newer` has that `older` has not; None if either is unknown."""
    out = vault.git("rev-list", "--count", f"{older}..{newer}", check=False).strip()
    return int(out) if out.isdigit() else None


# ---- undo -------------------------------------------------------------------------------


class NothingToUndo(UserError):
    pass


class UndoConflict(UserError):
    """Reverting the commit conflicts with later changes; nothing was changed."""

    def __init__(self, commit: Commit, paths: list[str]):
        self.commit = commit
        self.paths = paths
        where = f" in {', '.join(paths)}" if paths else ""
        super().__init__(f"Cannot undo {commit.short} ({commit.subject}): reverting it "
                         f"conflicts with later changes{where}. Nothing was changed; edit "
                         f"the files by hand instead.")


@dataclass(frozen=True)
class Undone:
    commit: Commit          # the change reverted
    sha: str | None         # the undo commit; None when reverting changed nothing


# Never undone: the vault's birth, undos themselves, and crash leftovers.
_NEVER = ("init", "undo", "recover")


def undoable(commits: list[Commit], agent_email: str, session: str | None = None) -> Commit | None:
    """The newest agent change not undone yet (of `session`'s turns, when given).

    `commits` is newest first, as `recent` returns them, so every revert is seen
    before the commit it reverts.
    """
    reverted: set[str] = set()
    for c in commits:
        reverted.update(c.trailers.get(REVERTS, ()))
        if c.email != agent_email or c.sha in reverted or c.kind in _NEVER:
            continue
        if session is not None and (c.scope != session or c.kind == "archive"
                                    or c.trailer(SESSION) != session):
            continue
        return c
    return None


def _nothing_left(commits: list[Commit], agent_email: str, session: str | None) -> str:
    """Why there is nothing to undo, truthfully: nothing was done, or all was undone."""
    mine = [c for c in commits if c.email == agent_email
            and (session is None or c.trailer(SESSION) == session)]
    made = [c for c in mine if c.kind not in _NEVER]
    undos = [c for c in mine if c.kind == "undo"]
    if session:
        if made and undos:
            return (f"Nothing to undo in {session}: every turn of it has been undone "
                    f"(the last by {undos[0].short}).")
        return f"Nothing to undo in {session}: it has no turn the agent could undo."
    if made and undos:
        return (f"Nothing to undo: every agent change since the vault was made has been "
                f"undone (the last by {undos[0].short}).")
    return "Nothing to undo: the agent has changed nothing since the vault was made."


def conflict_paths(git_output: str) -> list[str]:
    """The files named by git's CONFLICT lines (content, modify/delete, add/add, ...)."""
    import re

    paths: list[str] = []
    for line in git_output.splitlines():
        if "CONFLICT" not in line:
            continue
        m = (re.search(r"Merge conflict in (.+?)\s*$", line)
             or re.search(r"CONFLICT \([^)]*\): (.+?) (?:deleted|modified|added|renamed) in ", line))
        if m and m.group(1) not in paths:
            paths.append(m.group(1))
    return paths


def undo(vault: Vault, ref: str | None = None, session: str | None = None) -> Undone:
    """Revert an agent change with a new commit `undo: revert "<subject>"`.

    `ref`: that commit (it must be the agent's, and not the init commit); else the
    newest agent change not undone yet, of `session`'s turns when a session is given.
    Raises NothingToUndo, or UndoConflict when later changes touch the same lines.
    """
    agent_email = vault.agent_identity().email
    with vault.locked():
        if ref:
            target = find(vault, ref)
            if target is None:
                raise NothingToUndo(f"No commit {ref} in the vault.")
            if target.email != agent_email:
                raise NothingToUndo(
                    f"{target.short} ({target.subject}) was not made by the agent but by "
                    f"{target.email}: `agent undo` only reverts agent commits. Use "
                    f"`agent git revert {target.short}` if you mean it.")
            if target.kind == "init":
                raise NothingToUndo(f"{target.short} is the vault's init commit; it cannot be undone.")
        else:
            # Newest first, a revert comes before what it reverts: a change found among
            # the first commits is the one a longer read would find.
            target = undoable(recent(vault, UNDO_FIRST), agent_email, session)
            if target is None:
                commits = recent(vault, UNDO_DEPTH)
                target = undoable(commits, agent_email, session)
                if target is None:
                    raise NothingToUndo(_nothing_left(commits, agent_email, session))
        short = target.subject if len(target.subject) <= 60 else target.subject[:57] + "..."
        trailers = {REVERTS: target.sha}
        if session:
            trailers[SESSION] = session
        try:
            sha = vault.revert(target.sha, Change("undo", f'revert "{short}"', trailers=trailers))
        except GitError as e:
            raise UndoConflict(target, conflict_paths(str(e))) from None
    return Undone(target, sha)
