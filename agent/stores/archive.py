"""The archive: compacted history, `archive/YYYY/MM/<id>.md`.

Each entry has frontmatter (`id`, `session`, `created`, `source` — the session file and
the id range of the messages it covers —, `topic`, `importance`, `tokens`) and a summary
body.

Ids are whole numbers that sort by time and are unique across machines: the time the
entry was made (`YYYYMMDDHHMMSS`) and four random digits, so two machines compacting at
once never make the same id and a sync never brings in an entry that sorts before the
ones already there by accident. (Vaults from before used 1, 2, 3...; those stay valid
and sort first.)

`.dream_cursor` records which entries the dream has consolidated, as a set that two
machines' records merge into by union (see `Consolidated`); an older vault's single
number N means "every entry up to N" and is read as such.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from agent.stores import frontmatter_io
from agent.errors import UserError

if TYPE_CHECKING:
    import random

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
    # `archive/YYYY/MM/<id>.md`, read with scandir and plain strings: `agent status`
    # lists every entry, and pathlib's glob cost 90 ms at 4,000 entries (3 ms this way).
    out = []
    for year in _subdirs(os.path.join(root, ARCHIVE)):
        for month in _subdirs(year.path):
            try:
                files = os.scandir(month.path)
            except OSError:
                continue
            with files:
                for f in files:
                    m = _NAME.match(f.name)
                    if m:
                        out.append((int(m.group(1)),
                                    f"{ARCHIVE}/{year.name}/{month.name}/{f.name}"))
    return sorted(out)


def find(root: Path, entry_id: int) -> str | None:
    """The vault-relative path of entry `entry_id`, or None when the archive has none."""
    name = f"{int(entry_id)}.md"
    for year in sorted(_subdirs(os.path.join(root, ARCHIVE)), key=lambda e: e.name):
        for month in sorted(_subdirs(year.path), key=lambda e: e.name):
            if os.path.isfile(os.path.join(month.path, name)):
                return f"{ARCHIVE}/{year.name}/{month.name}/{name}"
    return None


def _subdirs(path: str) -> list[os.DirEntry]:
    """The folders in `path` (as `glob("*")` finds them: no hidden names)."""
    try:
        with os.scandir(path) as it:
            return [e for e in it if not e.name.startswith(".") and e.is_dir()]
    except OSError:
        return []


def newest_id(root: Path) -> int:
    ids = entry_ids(root)
    return ids[-1][0] if ids else 0


def new_id(root: Path, now: datetime, rand: random.Random | None = None) -> int:
    """An id for a new entry: its time and four random digits, above every id here."""
    import random
    stamp = int(f"{now:%Y%m%d%H%M%S}") * 10_000 + (rand or random).randrange(10_000)
    return max(stamp, newest_id(root) + 1)


_HEADER = "# Archive entries the dream has consolidated: ids and id ranges, one per line."


@dataclass(frozen=True)
class Consolidated:
    """Which archive entries the dream has consolidated: ranges of ids, inclusive.

    Written as a set (a header line, then `1-41` and single ids), so the records of two
    machines merge by union and an entry dreamed on either is dreamed once."""
    ranges: tuple[tuple[int, int], ...] = ()

    def __contains__(self, entry_id: int) -> bool:
        return any(a <= entry_id <= b for a, b in self.ranges)

    def count_in(self, sorted_ids: list[int]) -> int:
        """How many of `sorted_ids` (ascending) are consolidated: a bisection per range,
        not a test per id (`agent status` counts thousands of entries)."""
        from bisect import bisect_left, bisect_right

        return sum(bisect_right(sorted_ids, b) - bisect_left(sorted_ids, a)
                   for a, b in self.ranges)

    @property
    def high(self) -> int:
        """The highest consolidated id (0 when none): the old cursor's number."""
        return max((b for _, b in self.ranges), default=0)

    def add(self, ids) -> "Consolidated":
        return Consolidated(_normalise([*self.ranges, *((i, i) for i in ids)]))

    def union(self, other: "Consolidated") -> "Consolidated":
        return Consolidated(_normalise([*self.ranges, *other.ranges]))

    def render(self) -> str:
        lines = [f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges]
        return "\n".join([_HEADER, *lines]) + "\n"

    @classmethod
    def parse(cls, text: str, where: str = CURSOR) -> "Consolidated":
        """The record in `text`; an old single number N is every entry up to N."""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not lines:
            return cls()
        if len(lines) == 1 and lines[0].isdigit():          # an older vault's cursor
            n = int(lines[0])
            return cls(((1, n),) if n > 0 else ())
        ranges = []
        for n, line in enumerate(lines, 1):
            if line.startswith("#"):
                continue
            a, dash, b = line.partition("-")
            if not a.strip().isdigit() or (dash and not b.strip().isdigit()):
                raise ArchiveError(f"{where}:{n}: expected an archive id or a range like "
                                   f"1-41, found {line[:40]!r}")
            lo, hi = int(a), int(b) if dash else int(a)
            ranges.append((min(lo, hi), max(lo, hi)))
        return cls(_normalise(ranges))


def _normalise(ranges) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def load(root: Path, rel: str) -> Entry:
    return parse(rel, frontmatter_io.read_text(Path(root) / rel, rel, root=root))


def parse(rel: str, text: str) -> Entry:
    """The entry at `rel` from its file's text (FrontmatterError names a broken one)."""
    meta, body = frontmatter_io.loads(text, rel)
    m = _NAME.match(Path(rel).name)
    return Entry(int(m.group(1)) if m else int(meta.get("id", 0)), rel, meta, body.strip())


def pending(root: Path, done: "Consolidated", limit: int | None = None) -> list[Entry]:
    """Entries not yet consolidated, oldest first (FrontmatterError names a broken one)."""
    picked = [(i, rel) for i, rel in entry_ids(root) if i not in done]
    if limit is not None:
        picked = picked[:limit]
    return [load(root, rel) for _, rel in picked]


def render(entry_id: int, meta: dict, summary: str) -> str:
    return frontmatter_io.dump({"id": entry_id, **{k: v for k, v in meta.items() if k != "id"}},
                               summary)


def read_consolidated(root: Path) -> Consolidated:
    """What `.dream_cursor` says the dream has consolidated (nothing when it never ran)."""
    from agent.fs import safe

    try:
        text = safe.read_text(root, CURSOR, limit=4 * 1024 * 1024)
    except UserError as e:
        raise ArchiveError(str(e)) from None
    return Consolidated.parse(text or "")


def read_what_parses(root: Path) -> tuple[Consolidated, str | None]:
    """`.dream_cursor` as far as it is valid, and what is wrong with it (None: nothing):
    for the commands that only show where the dream stands, which a broken cursor must
    not stop (the dream itself reads it strictly and says how to fix it)."""
    from agent.fs import safe

    try:
        text = safe.read_text(root, CURSOR, limit=4 * 1024 * 1024) or ""
    except UserError as e:
        return Consolidated(), str(e)
    try:
        return Consolidated.parse(text), None
    except ArchiveError as e:
        good = [line for line in text.splitlines()
                if not line.strip() or line.strip().startswith("#")
                or all(p.strip().isdigit() for p in line.strip().split("-", 1))]
        return Consolidated.parse("\n".join(good)), str(e)
