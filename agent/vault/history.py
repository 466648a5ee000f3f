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

import re
from dataclasses import dataclass, field
from typing import Any, Mapping
from collections.abc import Iterable, Sequence

from agent.errors import UserError
from agent.vault.change import REVERTS, SESSION, Change
from agent.vault import git
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
        return _scope(self.subject)

    def trailer(self, key: str) -> str | None:
        """The value of trailer `key` (the last one, when it repeats), or None."""
        values = self.trailers.get(key)
        return values[-1] if values else None


_TRAILER_KEYS = (SESSION, REVERTS)


def _format(keys: Iterable[str]) -> str:
    trailers = "".join(f"{_FIELD}%(trailers:key={k},valueonly,separator=%x1d)" for k in keys)
    return f"%H{_FIELD}%ae{_FIELD}%s{trailers}{_RECORD}"


def _parse(out: str, keys: Sequence[str]) -> list[Commit]:
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


def recent(vault: Vault, limit: int = UNDO_DEPTH, keys: Sequence[str] = _TRAILER_KEYS) -> list[Commit]:
    """The newest `limit` commits, newest first, with trailers `keys` read."""
    if vault.head() is None:
        return []
    return _parse(vault.git("log", "-n", str(limit), f"--format={_format(keys)}"), keys)


def find(vault: Vault, ref: str, keys: Sequence[str] = _TRAILER_KEYS) -> Commit | None:
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


def added_lines(vault: Vault, paths: list[str], since: str) -> list[tuple[str, str, str]]:
    """Lines commits since `since` (a date git understands) added to `paths`, oldest
    first: (date `YYYY-MM-DD HH:MM`, path, line)."""
    out = vault.git("log", f"--since={since}", "--no-renames", "--reverse", "-p", "-U0",
                    f"--format={_RECORD}%ad", "--date=format:%Y-%m-%d %H:%M", "--", *paths)
    added, when, rel = [], "", ""
    for row in out.splitlines():
        if row.startswith(_RECORD):
            when = row[1:]
        elif row.startswith("+++ "):
            rel = row[6:] if row.startswith("+++ b/") else ""
        elif row.startswith("+") and rel:
            added.append((when, rel, row[1:]))
    return added


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


@dataclass(frozen=True)
class Entry:
    """A commit as the timeline shows it."""
    sha: str
    author: str
    email: str
    date: str               # ISO 8601, the author's
    subject: str

    @property
    def kind(self) -> str:
        return Commit(self.sha, self.email, self.subject).kind


def timeline(vault: Vault, *, limit: int = 50, path: str | None = None,
             kinds: set[str] | None = None, before: str | None = None,
             scan: int = 5000) -> tuple[list[Entry], str | None]:
    """Commits newest first (those touching `path`, of the `kinds` given, older than
    commit `before`): at most `limit`, and the sha to pass as `before` for the next
    ones (None: no more). At most `scan` commits are read for one page of a kind."""
    if vault.head() is None:
        return [], None
    start = "HEAD" if before is None else f"{before}^"
    if before is not None and find(vault, before) is None:
        raise UserError(f"No commit {before} in the vault.")
    out: list[Entry] = []
    skip = 0
    batch = limit if not kinds else max(limit * 4, 200)
    while len(out) < limit and skip < scan:
        args = ["log", "-n", str(batch), "--skip", str(skip),
                f"--format=%H{_FIELD}%an{_FIELD}%ae{_FIELD}%aI{_FIELD}%s{_RECORD}", start]
        if path:
            args += ["--", path]
        raw = vault.git(*args, check=False)
        got = [r.strip("\n").split(_FIELD) for r in raw.split(_RECORD) if r.strip("\n")]
        for fields in got:
            if len(fields) != 5:
                continue
            e = Entry(*fields)
            if kinds and e.kind not in kinds:
                continue
            out.append(e)
            if len(out) == limit:
                return out, e.sha
        if len(got) < batch:
            return out, None
        skip += batch
    return out, (out[-1].sha if out else None)


def show(vault: Vault, sha: str, max_bytes: int = 400_000) -> str:
    """`git show` of a commit (its message, the files' stat and the diff), plain."""
    c = find(vault, sha)
    if c is None:
        raise UserError(f"No commit {sha} in the vault.")
    out = vault.git("show", "--no-color", "--no-ext-diff", "--no-textconv", "--stat", "-p",
                    "--format=fuller", c.sha)
    out = out.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if len(out) > max_bytes:
        out = out[:max_bytes] + "\n[... cut here: the diff goes on; see agent git show]\n"
    return out


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
NEVER_UNDONE = _NEVER


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


# ---- provenance: where a line came from (`agent why`) -----------------------------------
#
# blame_line: the commit that last wrote line N of a file (of the work tree, or as of a
# commit); commit_record: a commit's parents, author, date, subject, body, trailers;
# hunk_at: the lines the hunk that added a line removed (its earlier version);
# merge_bringing: the merge that brought a commit in from another clone;
# changed_paths: the files a commit changed. The story is told by agent.ops.why.

UNCOMMITTED = "0" * 40


@dataclass
class Blame:
    sha: str                 # UNCOMMITTED for a line changed in the work tree
    path: str                # the file's path in that commit
    line: int                # the line's number in that commit's version of the file
    previous: str | None     # the commit before `sha` that touched the file (its parent side)
    previous_path: str | None


@dataclass
class CommitRecord:
    sha: str
    parents: list[str]
    author: str
    email: str
    date: str                # ISO 8601 with offset
    subject: str
    body: str
    trailers: dict[str, str] = field(default_factory=dict)

    @property
    def short(self) -> str:
        return self.sha[:7]

    @property
    def kind(self) -> str:
        """`chat` of `chat(cli/default): hello`."""
        return self.subject.split(":", 1)[0].split("(", 1)[0].strip()

    @property
    def scope(self) -> str | None:
        return _scope(self.subject)


def blame_line(vault: Vault, rel: str, line: int, rev: str | None = None) -> Blame | None:
    """Who wrote line `line` (1-based) of `rel`: in the work tree, or as of commit `rev`."""
    args = ["blame", "--porcelain", "-L", f"{line},{line}"]
    if rev:
        args.append(rev)
    out = vault.git(*args, "--", rel, check=False)
    first = out.split("\n", 1)[0].split()
    if len(first) < 3 or not re.fullmatch(r"[0-9a-f]{40}(?:[0-9a-f]{24})?", first[0]):
        return None
    # The work tree's line: git names it by a null id (40 or 64 zeros, as the format is).
    sha = UNCOMMITTED if set(first[0]) == {"0"} else first[0]
    orig = int(first[1])
    path, previous, previous_path = rel, None, None
    for row in out.splitlines()[1:]:
        if row.startswith("\t"):
            break
        if row.startswith("filename "):
            path = row[9:]
        elif row.startswith("previous "):
            parts = row.split(" ", 2)
            previous, previous_path = parts[1], parts[2] if len(parts) > 2 else rel
    return Blame(sha, path, orig, previous, previous_path)


def ensure_path_filters(vault: Vault) -> bool:
    """Whether the commit-graph holds changed-path Bloom filters, which make a
    path-limited walk like `blame_line` several times faster on a long history (measured
    in scripts/bench_mcp.py). When it does not, one is written in the background (derived
    data in .git: git's own gc keeps the filters from then on) and False is returned."""
    info = vault.git_dir / "objects" / "info"
    graphs = [info / "commit-graph"]
    chain = info / "commit-graphs" / "commit-graph-chain"
    try:
        tips = chain.read_text().split()
        graphs += [info / "commit-graphs" / f"graph-{tip}.graph" for tip in tips[-1:]]
    except OSError:
        pass
    for graph in graphs:
        try:
            with open(graph, "rb") as f:
                head = f.read(8 + 12 * 16)        # the header and the chunk table
        except OSError:
            continue
        if b"BIDX" in head:
            return True
    if vault.head() is not None:
        git.background(["commit-graph", "write", "--reachable", "--changed-paths"], vault.root)
    return False


def commit_record(vault: Vault, sha: str) -> CommitRecord:
    fmt = _FIELD.join(["%H", "%P", "%an", "%ae", "%aI", "%s", "%b",
                       "%(trailers:only,unfold)"]) + _RECORD
    out = vault.git("log", "-1", f"--format={fmt}", sha)
    parts = out.split(_RECORD)[0].lstrip("\n").split(_FIELD)
    full, parents, author, email, date, subject, body, trailer_text = parts
    trailers = {}
    for row in trailer_text.splitlines():
        key, sep, value = row.partition(": ")
        if sep:
            trailers[key.strip()] = value.strip()
    return CommitRecord(full, parents.split(), author, email, date, subject, body.strip(),
                        trailers)


def changed_paths(vault: Vault, sha: str) -> list[str]:
    out = vault.git("show", "--no-renames", "--name-only", "--format=", "-z", sha)
    return [p for p in out.split("\0") if p.strip()]


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def hunk_at(vault: Vault, sha: str, parent: str | None, rel: str, new_line: int,
            parent_rel: str | None = None) -> list[tuple[int, str]]:
    """The lines (number in `parent`, text) removed by the hunk of commit `sha` that
    added line `new_line` of `rel`; [] when the hunk only added lines."""
    if parent is None:
        return []
    old = parent_rel or rel
    out = vault.git("diff", "--no-renames", "-U0", parent, sha, "--", *sorted({old, rel}),
                    check=False)
    removed: list[tuple[int, str]] = []
    inside = False
    old_no = 0
    for row in out.splitlines():
        m = _HUNK.match(row)
        if m:
            if inside:
                break
            o_start, n_start = int(m.group(1)), int(m.group(3))
            n_count = int(m.group(4)) if m.group(4) is not None else 1
            inside = n_start <= new_line < n_start + n_count
            old_no = o_start
            removed = []
            continue
        if inside and row.startswith("-") and not row.startswith("---"):
            removed.append((old_no, row[1:]))
            old_no += 1
    return removed if inside else []


def made_here(vault: Vault) -> set[str]:
    """The commits this machine made: the new values of HEAD's reflog entries for a
    commit (`commit: ...`, written by the agent's commits and by git's own). A sync's
    fast-forward, checkout or pull records the remote's tip under another message,
    so nothing a remote sends is counted."""
    out = vault.git("reflog", "show", "--format=%H%x00%gs", "HEAD", "--", check=False)
    return {sha for sha, _, msg in (row.partition("\0") for row in out.splitlines())
            if msg.startswith("commit")}


def merge_bringing(vault: Vault, sha: str, head: str = "HEAD") -> str | None:
    """The merge on HEAD's first-parent line that brought commit `sha` in, or None when
    `sha` is on that line itself (it was made here, not merged from another clone)."""
    out = vault.git("rev-list", "--first-parent", "--merges", f"{sha}..{head}", check=False)
    merges = out.split()
    if not merges:
        return None
    # Oldest first: the first merge whose first parent does not have `sha` brought it.
    for merge in reversed(merges):
        if not _is_ancestor(vault, sha, f"{merge}^1"):
            return merge
    return None


def _is_ancestor(vault: Vault, a: str, b: str) -> bool:
    return git.run(["merge-base", "--is-ancestor", a, b], vault.root).returncode == 0


def _scope(subject: str) -> str | None:
    """`cli/default` of `chat(cli/default): hello`, None when there is none."""
    head = subject.split(": ", 1)[0]
    if "(" in head and head.endswith(")"):
        return head[head.index("(") + 1:-1]
    return None


def file_log_records(vault: Vault, paths: list[str], *, max_count: int | None = None,
                     since: str | None = None) -> list[dict[str, Any]]:
    """How `paths` changed, newest first, as records for `agent log --json`: the commit,
    its time, author and subject, and the lines it added and removed in each file."""
    args = ["log", "--no-renames", "--no-ext-diff", "--no-textconv", "--no-color", "-p", "-U0",
            f"--format={_RECORD}%H{_FIELD}%aI{_FIELD}%an{_FIELD}%ae{_FIELD}%s"]
    if max_count:
        args += ["-n", str(max_count)]
    if since:
        args += [f"--since={since}"]
    out: list[dict[str, Any]] = []
    rel = ""
    for row in vault.git(*args, "--", *paths).split("\n"):   # (splitlines splits at \x1e)
        if row.startswith(_RECORD):
            sha, when, name, email, subject = (row[1:].split(_FIELD) + [""] * 5)[:5]
            out.append({"commit": sha, "date": when, "author": name, "email": email,
                        "subject": subject, "files": {}})
            rel = ""
        elif row.startswith("--- "):
            rel = row[6:] if row.startswith("--- a/") else ""
        elif row.startswith("+++ "):
            rel = row[6:] if row.startswith("+++ b/") else rel
        elif out and rel and row[:1] in ("+", "-"):
            f = out[-1]["files"].setdefault(rel, {"added": [], "removed": []})
            f["added" if row[0] == "+" else "removed"].append(row[1:])
    return out
