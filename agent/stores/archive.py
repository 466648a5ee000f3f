"""The archive: compacted history, `archive/YYYY/MM/<id>.md`.

Each entry has frontmatter (`id`, `session`, `created`, `source` — the session file and
the id range of the messages it covers —, `topic`, `importance`, `tokens`) and a summary
body. Ids are integers that only grow; `.dream_cursor` holds the last one consolidated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

from agent.stores import frontmatter_io
from agent.errors import UserError

ARCHIVE = "archive"
CURSOR = ".dream_cursor"
_NAME = re.compile(r"^(\d+)\.md$")
_PATH = re.compile(r"^archive/\d{4}/\d{2}/\d+\.md$")
_SOURCE = re.compile(r"^\s*(\S+?\.jsonl)\s*[#:@ ]\s*(\S+?)\s*(?:\.\.|-|–|to)\s*(\S+)\s*$")


class ArchiveError(UserError):
    pass


@dataclass
class Entry:
    id: int
    path: str                      # vault-relative
    meta: dict = field(default_factory=dict)
    summary: str = ""

    @property
    def session(self) -> str:
        return str(self.meta.get("session", ""))

    @property
    def topic(self) -> str:
        return str(self.meta.get("topic", ""))

    @property
    def importance(self) -> float:
        try:
            return float(self.meta.get("importance", 0) or 0)
        except (TypeError, ValueError):
            return 0.0

    @property
    def created(self) -> str | None:
        """`created` as an ISO 8601 string (YAML may have read it as a date)."""
        c = self.meta.get("created")
        return c.isoformat() if isinstance(c, (datetime, date)) else (str(c) if c else None)

    def sources(self) -> list[tuple[str | None, str | None, str | None]]:
        """(session file, first id, last id) of the messages the entry covers."""
        return source_ranges(self.meta.get("source"))


def is_entry_path(rel: str) -> bool:
    return bool(_PATH.match(rel))


def source_ranges(source) -> list[tuple[str | None, str | None, str | None]]:
    """(session file, first id, last id) triples from an entry's `source`.

    Accepts a mapping (file/path, from/first/start, to/through/last/end), a list of
    those, or a string `FILE#FIRST..LAST` (also `FILE:FIRST-LAST`).
    """
    if isinstance(source, list):
        return [r for s in source for r in source_ranges(s)]
    if isinstance(source, dict):
        def pick(*keys):
            for k in keys:
                if source.get(k) is not None:
                    return str(source[k])
            return None
        ids = source.get("ids")
        if isinstance(ids, list) and ids:
            return [(pick("file", "path", "session_file"), str(ids[0]), str(ids[-1]))]
        return [(pick("file", "path", "session_file"), pick("from", "first", "start", "since"),
                 pick("to", "through", "last", "end", "until"))]
    if isinstance(source, str):
        m = _SOURCE.match(source)
        if m:
            return [(m.group(1), m.group(2), m.group(3))]
        return [(source.strip(), None, None)] if source.strip().endswith(".jsonl") else []
    return []


def entry_path(entry_id: int, created: datetime) -> str:
    return f"{ARCHIVE}/{created:%Y}/{created:%m}/{entry_id}.md"


def entry_ids(root: Path) -> list[tuple[int, str]]:
    """(id, vault-relative path) of every entry, by id."""
    base = Path(root) / ARCHIVE
    out = []
    if base.is_dir():
        for p in base.glob("*/*/*.md"):
            m = _NAME.match(p.name)
            if m:
                out.append((int(m.group(1)), p.relative_to(root).as_posix()))
    return sorted(out)


def newest_id(root: Path) -> int:
    ids = entry_ids(root)
    return ids[-1][0] if ids else 0


def load(root: Path, rel: str) -> Entry:
    meta, body = frontmatter_io.load(Path(root) / rel, rel, root=root)
    m = _NAME.match(Path(rel).name)
    return Entry(int(m.group(1)) if m else int(meta.get("id", 0)), rel, meta, body.strip())


def entries_after(root: Path, cursor: int, limit: int | None = None) -> list[Entry]:
    """Entries with id > cursor, oldest first (FrontmatterError names a broken one)."""
    picked = [(i, rel) for i, rel in entry_ids(root) if i > cursor]
    if limit is not None:
        picked = picked[:limit]
    return [load(root, rel) for _, rel in picked]


def render(entry_id: int, meta: dict, summary: str) -> str:
    return frontmatter_io.dump({"id": entry_id, **{k: v for k, v in meta.items() if k != "id"}},
                               summary)


def read_cursor(root: Path) -> int:
    """The id of the last entry the dream consolidated (0 when it never ran)."""
    from agent.vault import safe

    try:
        text = safe.read_text(root, CURSOR, limit=4096)
    except UserError as e:
        raise ArchiveError(str(e)) from None
    text = (text or "").strip()
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ArchiveError(f"{CURSOR}: expected an archive id (a whole number), "
                           f"found {text[:40]!r}") from None
