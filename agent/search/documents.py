"""The vault's files as search documents: one per session message, per fact of
`MEMORY.md` and `USER.md`, per line of a daily note, per archive entry (topic and
summary). Every file is read through its store (agent/stores/), so search reads each
format exactly as the rest of the agent does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agent.stores import archive, memory, sessions
from agent.stores.frontmatter_io import FrontmatterError


@dataclass
class Doc:
    """One document: what is shown, plus what ranking and filters need."""
    line: int | None
    text: str
    ts: str | None = None
    speaker: str | None = None
    msg: str | None = None
    weight: float = 0.0
    covers: str | None = None      # archive: JSON {session, ranges of message ids}
    topic: str | None = None       # archive topic, or the heading a fact is under


def kind_of(rel: str) -> str | None:
    """Which kind of document a vault path holds, or None if it is not indexed."""
    if sessions.is_session_file(rel):
        return "sessions"
    if rel in memory.MEMORY_FILES:
        return "memory"
    if memory.is_daily_note(rel):
        return "notes"
    if archive.is_entry_path(rel):
        return "archive"
    return None


def message_doc(line_no: int, raw: bytes) -> Doc | None:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):   # a line nested too deeply is no message
        return None
    if not sessions.is_message(obj):
        return None
    text = sessions.message_text(obj.get("content"))
    if not text.strip():
        return None
    speaker = obj.get("speaker") if isinstance(obj.get("speaker"), str) else None
    who = speaker or (obj.get("role") if isinstance(obj.get("role"), str) else None)
    ts = obj.get("ts") if isinstance(obj.get("ts"), str) else None
    mid = obj.get("id")
    return Doc(line_no, text, ts=ts, speaker=who, msg=str(mid) if mid is not None else None)


def memory_docs(rel: str, text: str) -> list[Doc]:
    return [Doc(f.line, f.text, weight=1.0, topic=f.section) for f in memory.read_facts(text)]


def note_docs(rel: str, text: str) -> list[Doc]:
    return [Doc(n.line, n.text, ts=n.ts) for n in memory.read_note(rel, text)]


def archive_doc(rel: str, root: Path) -> tuple[Doc | None, str | None]:
    try:
        entry = archive.load(root, rel)
    except FrontmatterError as e:
        return None, str(e)
    topic = str(entry.meta.get("topic") or "").strip() or None
    importance = entry.importance
    if importance > 1:          # a 1-10 scale
        importance /= 10
    importance = min(max(importance, 0.0), 1.0)
    session = str(entry.meta.get("session") or "") or None
    doc = Doc(1, entry.summary, ts=entry.created, weight=importance, topic=topic,
              covers=json.dumps({"session": session, "ranges": entry.sources()}))
    return doc, None


def walk(root: Path) -> list[str]:
    """Every indexable file on disk (a full build; refreshes never walk the vault)."""
    out = [name for name in memory.MEMORY_FILES if (root / name).is_file()]
    for top, pattern in (("sessions", "*.jsonl"), ("memory", "*.md"), ("archive", "*.md")):
        base = root / top
        if base.is_dir():
            for p in base.rglob(pattern):
                rel = p.relative_to(root).as_posix()
                if kind_of(rel) and p.is_file():
                    out.append(rel)
    return sorted(out)
