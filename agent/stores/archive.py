"""The archive: compacted history, `archive/YYYY/MM/<id>.md`.

Each entry has frontmatter (`id`, `session`, `created`, `source` — the session file and
the id range of the messages it covers —, `topic`, `importance`, `tokens`) and a summary
body. Ids are integers that only grow; `.dream_cursor` holds the last one consolidated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from agent.stores import frontmatter_io
from agent.errors import UserError

ARCHIVE = "archive"
CURSOR = ".dream_cursor"
_NAME = re.compile(r"^(\d+)\.md$")


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
    meta, body = frontmatter_io.load(Path(root) / rel, rel)
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
    path = Path(root) / CURSOR
    if not path.exists():
        return 0
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ArchiveError(f"{CURSOR}: expected an archive id (a whole number), "
                           f"found {text[:40]!r}") from None
