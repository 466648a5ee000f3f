"""What each tracked file is, and what taking it needs: the one rule for everything that
arrives in the vault, whether a sync fetches it, a clone checks it out, a turn or a
command commits it, or a person edits it by hand.

Every path has a **kind** (`kind_of`). The kind says

- who decides: a change a remote sends to a file that makes the agent act (its
  settings, skills, heartbeats, scheduled jobs, forgotten phrases) waits for this
  machine's `agent sync accept`; a heartbeat or skill the model writes waits the same
  way (`model="hold"`); the files only the person or only the agent itself writes are
  refused to the model (`model="refuse"`);
- how it is validated: a size a prompt can hold (`limit`), and for the agent's own
  records a format (checked at intake by agent.stores.intake_checks, which knows them);
- how it merges when two machines changed it (`ATTRIBUTES`: the merge driver of each
  path, `DRIVERS`: what each driver merges; agent.sync.mergedriver runs them);
- where it may be: no kind but plain data may be a symlink, and no symlink may point at
  a folder that holds it.

Beside the kinds, the path rules every file obeys (`path_problem`, `link_problem`,
`attributes_problem`): what a sync refuses, a commit refuses (`disk_problem`), so no
turn, tool or command on this machine can commit a path another clone's sync would
then refuse. The checks ignore case where a disk may: `.GIT`, `.Agent` and
`.GitAttributes` are the same folders and files on macOS and Windows.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from agent.fs import offlimits, safe
from agent.fs.offlimits import STATE_DIR

NAME_BYTES = 255           # the longest file name (one path component) a disk takes


@dataclass(frozen=True)
class Kind:
    name: str
    what: str                      # said in a refusal: "the vault's settings"
    held: bool = False             # a remote's change waits for `agent sync accept`
    model: str = "write"           # what a model's write does: write | hold | refuse
    limit: int | None = None       # bytes it may hold (what a prompt takes whole)


CONTROL = Kind("control", "the person's settings and git rules", held=True, model="refuse")
ACTS = Kind("acts", "what the agent runs on its own (skills, heartbeats)", held=True,
            model="hold")
CRON = Kind("cron", "the scheduled jobs", held=True, model="refuse")
# A remote's tombstones are decided by forget's own flow (agent.sync.tombstones), not here.
FORGOTTEN = Kind("forgotten", "the forgotten phrases", model="refuse")
RECORD = Kind("record", "the dream's own records", model="refuse")
SESSION = Kind("session", "the conversation transcripts", model="refuse")
PROMPT = Kind("prompt", "a file every prompt holds whole", limit=safe.PROMPT_BYTES)
DATA = Kind("data", "a file of the vault")

_FILES = {"agent.toml": CONTROL, "AGENTS.md": CONTROL, "cron.json": CRON,
          ".forgotten": FORGOTTEN, ".dream_cursor": RECORD, ".dream_ledger.jsonl": RECORD,
          ".dream_rejected.jsonl": RECORD, "MEMORY.md": PROMPT, "USER.md": PROMPT}
_NAMES = (".gitattributes", ".gitignore", ".gitmodules")     # wherever they are
_FOLDERS = {"skills": ACTS, "heartbeat": ACTS, "sessions": SESSION}

# The merge driver of each of the agent's own formats: what a new vault's .gitattributes
# says, and what each driver merges (git's config names it so).
DRIVERS = {
    "agent-lines": "append-only lines (session transcripts, daily notes)",
    "agent-facts": "facts (MEMORY.md, USER.md)",
    "agent-cron": "cron.json, job by job",
    "agent-set": "a set of lines (.dream_cursor)",
}
# The drivers that settle a clash by keeping both versions of a fact (for the dream to
# sort out): right for a sync between machines, wrong for an undo, which must refuse.
KEEPS_BOTH = ("agent-facts",)
ATTRIBUTES = (
    "sessions/**/*.jsonl merge=agent-lines",
    "memory/*.md merge=agent-lines",
    "MEMORY.md merge=agent-facts",
    "USER.md merge=agent-facts",
    "cron.json merge=agent-cron",
    ".dream_cursor merge=agent-set",
    ".dream_ledger.jsonl merge=agent-lines",
    ".dream_rejected.jsonl merge=agent-lines",
)

_ATTR = re.compile(r"^([!-]?)(filter|merge|diff)(?:=(.*))?$")
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
# git's own merge behaviours and diff function patterns: naming one runs nothing.
_BUILTIN_MERGE = {"text", "binary", "union"}
_BUILTIN_DIFF = {"ada", "bash", "bibtex", "cpp", "csharp", "css", "dts", "elixir",
                 "fortran", "fountain", "golang", "html", "java", "kotlin", "markdown",
                 "matlab", "objc", "pascal", "perl", "php", "python", "r", "ruby", "rust",
                 "scheme", "tex"}


def kind_of(path: str) -> Kind:
    """The kind of the vault path `path` (case folded where a disk folds it)."""
    path = path.strip("/")
    if path.rsplit("/", 1)[-1].lower() in _NAMES:
        return CONTROL
    for name, kind in _FILES.items():
        if path.lower() == name.lower():
            return kind
    return _FOLDERS.get(path.split("/", 1)[0].lower(), DATA)


def held(path: str) -> bool:
    """Whether a remote's change to `path` waits for this machine's decision."""
    return kind_of(path).held


# ---- the path rules -------------------------------------------------------------------


def path_problem(path: str) -> str | None:
    """Why the vault takes no file at `path` (None: it does)."""
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
        if len(part.encode("utf-8", "surrogateescape")) > NAME_BYTES:
            return (f"has a name of {len(part.encode('utf-8', 'surrogateescape'))} bytes, "
                    f"over the {NAME_BYTES} a disk takes")
    if parts[0].rstrip(". ").lower() == STATE_DIR:      # .AGENT is .agent on macOS
        return f"is inside {STATE_DIR}/, this machine's own state"
    return None


def link_problem(path: str, target: str) -> str | None:
    """Why a symlink at `path` pointing to `target` is refused, as a noun phrase ("a
    symlink leading out ..."; None: it is plain data pointing inside the vault). A link
    where a settings, skill, heartbeat or memory file belongs would make a write of one
    file change another (MEMORY.md -> agent.toml: the dream would rewrite the settings);
    a link to a folder holding it (`workspace -> .`) makes a loop every walk of the
    vault follows. A link to such a file is data: a write through it resolves to the
    file it names, which is judged as itself."""
    problem = offlimits.link_problem(path, target)
    if problem:
        return problem
    kind = kind_of(path)
    if kind is not DATA:
        return f"a symlink where the vault keeps {kind.what} (a file or folder belongs there)"
    where = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if where == "." or path.startswith(where + "/"):
        return f"a symlink to a folder that holds it (to {target!r}), a loop"
    return None


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
            what, name = m.group(2), m.group(3)
            if name is None:
                continue              # `merge`, `diff`: git's built-in behaviour
            if what == "filter":
                return f"line {n} names a filter ({word}), which would run a command"
            if what == "merge" and name not in _BUILTIN_MERGE | set(DRIVERS):
                return f"line {n} names a merge driver the vault did not install ({word})"
            if what == "diff" and name not in _BUILTIN_DIFF:
                return f"line {n} names a diff driver the vault did not install ({word})"
    return None


def size_problem(path: str, size: int) -> str | None:
    """Why a file of `size` bytes is refused at `path` (over its kind's limit)."""
    limit = kind_of(path).limit
    if limit is not None and size > limit:
        return (f"is {safe._size(size)}, over the {safe._size(limit)} a prompt holds "
                f"whole for {path}")
    return None


# ---- what a commit made here may take ---------------------------------------------------


def disk_problem(root: Path, rel: str) -> str | None:
    """Why the changed file `rel` of the work tree at `root` must stay uncommitted (None:
    a commit may take it): the rules a sync applies to what arrives, so that nothing
    committed here is refused by another clone."""
    folder = rel.endswith("/")
    rel = rel.rstrip("/")
    problem = path_problem(rel)
    if problem:
        return problem
    full = os.path.join(root, rel)
    try:
        st = os.lstat(full)
    except OSError:
        return None                                   # deleted: nothing to take
    if stat.S_ISLNK(st.st_mode):
        return link_problem(rel, os.readlink(full))
    if folder or stat.S_ISDIR(st.st_mode):
        if os.path.lexists(os.path.join(full, ".git")):
            return ("is a git repository of its own (committed, it would be a submodule, "
                    "which no other clone takes)")
        return None
    if stat.S_ISREG(st.st_mode):
        problem = size_problem(rel, st.st_size)
        if problem:
            return problem
        if rel.rsplit("/", 1)[-1].lower() == ".gitattributes":
            with open(full, "rb") as f:
                return attributes_problem(f.read(safe.MAX_BYTES).decode("utf-8", "replace"))
    return None
