"""What memory a turn put in front of the model: the format of its record, kept on the
reply's line of the session transcript, and `Used`, which gathers it.

A turn shows the model USER.md, MEMORY.md and the last two daily notes (whole), the
memories retrieved for the new message, and what its tools found (memory_search hits,
skills loaded). `Used` gathers these as it goes and `record()` gives them as one small
JSON object, the `used` field of the turn's reply line in the session transcript:

    {"n": 9, "c": "5be1a0c9d2f3", "f": [["USER.md", "1f0c2d3e4a5b"], ["memory/2026-11-01.md", "77aa01bc22de", [3]]],
     "m": [["sessions/cli/default/2026-11.jsonl", ["4.1-ab12cd", "4.2-ef34aa"]]],
     "a": [202611011200000001], "s": ["trip-planning"]}

- `c`: the commit HEAD was at when the prompt was built (abbreviated): where those
  files most likely stood, so their lines' stories are told from there;
- `f`: a memory file by its git blob id (what git names those exact bytes, in the
  repository's object format, SHA-1 or SHA-256; abbreviated), whole (every line of it
  was shown) or, with a third element, only those lines;
- `m`: retrieved messages, by session file and message ids (the hit's first);
- `a`: archive entries, by id; `s`: skills loaded; `n`: how many memories in all (a
  fact or note line, a retrieved message, an entry, a skill) and `x` how many were left
  out by the caps below.

Ids, never text: the record stays small (scripts/bench_why_used.py measures it) and says
nothing a transcript does not already hold. It is never sent to a model (the window is
built from a line's role and content only). agent.ops.used tells it back, reading the
keys named below.
"""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any, Iterable

from agent.stores import memory

# The record's keys: one letter each, as the record is on every reply's line.
COUNT, LEFT_OUT, COMMIT, FILES, MESSAGES, ARCHIVE, SKILLS = "n", "x", "c", "f", "m", "a", "s"

BLOB_CHARS = 12          # hex digits of a blob id kept (git resolves the abbreviation)
# A commit or object id in full, in either of git's object formats (SHA-1, SHA-256).
FULL_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
OBJECT_FORMATS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256}
MAX_FILES = 8
MAX_LINES = 16           # lines of one file found by a search
MAX_GROUPS = 16          # retrieved messages
MAX_IDS = 3              # message ids of one retrieved memory (the hit, then its neighbours)
MAX_ENTRIES = 12
MAX_SKILLS = 8

_ARCHIVE = re.compile(r"^archive/\d{4}/\d{2}/(\d+)\.md$")
_WHERE = re.compile(r"^(.*?)(?::(\d+))?$")


def blob_id(data: bytes, object_format: str = "sha1") -> str:
    """The id git gives a file of these bytes (`git hash-object`) in a repository of
    `object_format` (git's extensions.objectFormat: "sha1" or "sha256"), abbreviated."""
    digest = OBJECT_FORMATS[object_format]
    return digest(b"blob %d\0" % len(data) + data).hexdigest()[:BLOB_CHARS]


def memory_lines(text: str) -> list[int]:
    """The line numbers of a memory file that hold a memory: its bullets (a heading or
    the file's own words about itself is no memory), as the web's Memory page counts."""
    return [n for n, line in enumerate(text.splitlines(), 1) if memory.FACT.match(line)]


class Used:
    """The memories of one turn, gathered from its prompt and its tools (thread-safe: a
    reply's tool calls run at once)."""

    def __init__(self, object_format: str = "sha1") -> None:
        self._lock = threading.Lock()
        self.object_format = object_format      # the repository's: how blob ids are made
        self.files: dict[str, list[Any]] = {}     # path -> [blob, lines or None, count]
        self.groups: list[tuple[str, list[str]]] = []
        self.entries: list[int] = []
        self.skills: list[str] = []
        self.dropped = 0
        self.commit: str | None = None

    @classmethod
    def from_prompt(cls, seen: dict[str, bytes], retrieved: Iterable[dict[str, Any]],
                    root: Any = None, head: str | None = None,
                    object_format: str = "sha1") -> "Used":
        """What a prompt showed: the memory files of its system part (`seen`, their bytes)
        and the memories retrieved for the message (prompt.hit_record's records); `head`
        is gitstate.head_from_files(root) as the prompt was built, `object_format` the
        repository's (gitstate.object_format)."""
        used = cls(object_format)
        sha = (head or "").rsplit(":", 1)[-1]
        used.commit = sha[:BLOB_CHARS] if FULL_ID.fullmatch(sha) else None
        for rel, data in seen.items():
            text = data.decode("utf-8", errors="replace")
            count = len(memory_lines(text))
            if count:
                used.files[rel] = [blob_id(data, object_format), None, count]
        for record in retrieved:
            where = _WHERE.match(str(record.get("source") or ""))
            path, line = (where.group(1), where.group(2)) if where else ("", None)
            used.found(path, int(line) if line else None, list(record.get("ids") or []), root)
        return used

    def found(self, path: str, line: int | None, ids: list[str], root: Any = None) -> None:
        """One memory a search found: a message (its session file and ids), an archive
        entry (its path) or a line of a note (its path and line; the file read from
        `root` for its blob id)."""
        with self._lock:
            entry = _ARCHIVE.match(path)
            if entry:
                self._keep(self.entries, int(entry.group(1)), MAX_ENTRIES)
            elif path.startswith("sessions/") and ids:
                self._add_group(path, [str(i) for i in ids])
            elif line is not None and (path in memory.MEMORY_FILES or path.startswith("memory/")):
                self._add_line(path, line, root)

    def _keep(self, items: list[Any], item: Any, cap: int) -> None:
        """`item` added to `items` unless it is there; past `cap`, counted as dropped."""
        if item in items:
            return
        if len(items) >= cap:
            self.dropped += 1
            return
        items.append(item)

    def _add_group(self, path: str, ids: list[str]) -> None:
        if any(p == path and ids[0] in have for p, have in self.groups):
            return
        if len(self.groups) >= MAX_GROUPS:
            self.dropped += 1
            return
        self.groups.append((path, ids[:MAX_IDS]))

    def _add_line(self, path: str, line: int, root: Any) -> None:
        have = self.files.get(path)
        if have is not None:
            if have[1] is None or line in have[1]:
                return              # the whole file was shown, or this line already
            if len(have[1]) >= MAX_LINES:
                self.dropped += 1
                return
            have[1].append(line)
            have[2] += 1
            return
        if len(self.files) >= MAX_FILES or root is None:
            self.dropped += 1
            return
        from agent.fs import safe
        from agent.errors import UserError
        try:
            data = safe.read_bytes(root, path, limit=safe.PROMPT_BYTES)
        except UserError:
            data = None
        if data is None:
            self.dropped += 1
            return
        self.files[path] = [blob_id(data, self.object_format), [line], 1]

    def skill(self, name: str) -> None:
        with self._lock:
            self._keep(self.skills, name, MAX_SKILLS)

    def count(self) -> int:
        lines: int = sum(int(f[2]) for f in self.files.values())
        return lines + len(self.groups) + len(self.entries) + len(self.skills)

    def record(self) -> dict[str, Any]:
        """The record kept on the reply's line (see the module doc)."""
        with self._lock:
            out: dict[str, Any] = {COUNT: self.count()}
            if self.commit and self.files:
                out[COMMIT] = self.commit
            if self.files:
                out[FILES] = [[rel, blob] if lines is None else [rel, blob, sorted(lines)]
                              for rel, (blob, lines, _) in self.files.items()]
            if self.groups:
                out[MESSAGES] = [[path, ids] for path, ids in self.groups]
            if self.entries:
                out[ARCHIVE] = list(self.entries)
            if self.skills:
                out[SKILLS] = list(self.skills)
            if self.dropped:
                out[LEFT_OUT] = self.dropped
            return out
