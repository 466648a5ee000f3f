"""Where a line of a file came from, in git: the primitives `agent why` walks with.

Each function is one or two `git` commands whose output only this module parses:

- `blame_line`: the commit that last wrote line N of a file (of the work tree, or of a
  commit), with where the line was in that commit;
- `commit_record`: a commit's parents, author, date, subject, body and trailers;
- `hunk_at`: in a commit's diff of a file, the lines the hunk that added a given line
  removed (a line's earlier version, when the commit changed rather than added it);
- `merge_bringing`: the merge that brought a commit into HEAD's first-parent line (a
  sync merge), if one did;
- `changed_paths`: the files a commit changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

UNCOMMITTED = "0" * 40
_FIELD, _RECORD = "\x1f", "\x1e"


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
        head = self.subject.split(": ", 1)[0]
        if "(" in head and head.endswith(")"):
            return head[head.index("(") + 1:-1]
        return None


def blame_line(vault, rel: str, line: int, rev: str | None = None) -> Blame | None:
    """Who wrote line `line` (1-based) of `rel`: in the work tree, or as of commit `rev`."""
    args = ["blame", "--porcelain", "-L", f"{line},{line}"]
    if rev:
        args.append(rev)
    out = vault.git(*args, "--", rel, check=False)
    first = out.split("\n", 1)[0].split()
    if len(first) < 3 or not re.fullmatch(r"[0-9a-f]{40}", first[0]):
        return None
    sha, orig = first[0], int(first[1])
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


def commit_record(vault, sha: str) -> CommitRecord:
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


def changed_paths(vault, sha: str) -> list[str]:
    out = vault.git("show", "--no-renames", "--name-only", "--format=", "-z", sha)
    return [p for p in out.split("\0") if p.strip()]


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def hunk_at(vault, sha: str, parent: str | None, rel: str, new_line: int,
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


def merge_bringing(vault, sha: str, head: str = "HEAD") -> str | None:
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


def _is_ancestor(vault, a: str, b: str) -> bool:
    from agent.vault.repo import _run
    return _run(["merge-base", "--is-ancestor", a, b], cwd=vault.root).returncode == 0


def show_file(vault, rev: str, rel: str) -> str | None:
    out = vault.git("show", f"{rev}:{rel}", check=False)
    return out if out else None
