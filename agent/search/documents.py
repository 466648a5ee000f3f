"""The vault's files as search documents: one per session message, per fact of
`MEMORY.md` and `USER.md`, per line of a daily note, per archive entry (topic and
summary), and per paragraph (under its headings) of every other Markdown file a person
keeps in the vault (`projects/shed.md`, the notes of an adopted folder), outside the
agent's own folders and whatever git ignores. Every file is read through its store (agent/stores/), so search reads each
format exactly as the rest of the agent does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from collections.abc import Sequence
from typing import NamedTuple

from agent.stores import memory, sessions
from agent.fs import safe
from agent.fs import boundedjson


class Doc(NamedTuple):
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
    if rel.startswith("archive/"):
        # Loaded only here: a pull of turns indexes session lines, no archive entry.
        from agent.stores import archive
        if archive.is_entry_path(rel):
            return "archive"
    if is_person_note(rel):
        return "notes"
    return None


# The agent's own folders: what they hold is indexed by its own kind, or not at all.
AGENT_FOLDERS = ("sessions/", "archive/", "memory/", "skills/", "heartbeat/")


def is_person_note(rel: str) -> bool:
    """A Markdown file a person keeps anywhere in the vault (not the agent's own)."""
    return (rel.lower().endswith(".md") and not rel.startswith(AGENT_FOLDERS)
            and rel not in memory.MEMORY_FILES and rel != "AGENTS.md"    # always in the prompt
            and not any(part.startswith(".") for part in rel.split("/")))


def message_doc(line_no: int, raw: bytes) -> Doc | None:
    try:
        msg = sessions.Line.read(boundedjson.loads(raw))
    except (ValueError, RecursionError):   # a line nested too deeply is no message
        return None
    if msg is None:
        return None
    text = msg.text
    if not text.strip():
        return None
    return Doc(line_no, text, ts=msg.ts_text, speaker=msg.speaker,
               msg=str(msg.id) if msg.id is not None else None)


def memory_docs(rel: str, text: str) -> list[Doc]:
    return [Doc(f.line, f.text, weight=1.0, topic=f.section) for f in memory.read_facts(text)]


def note_docs(rel: str, text: str) -> list[Doc]:
    if not memory.is_daily_note(rel):
        return markdown_docs(text)
    return [Doc(n.line, n.text, ts=n.ts) for n in memory.read_note(rel, text)]


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_docs(text: str) -> list[Doc]:
    """One document per paragraph (a list item counts as one) of a Markdown file, under
    the headings it sits in (its topic, searched too); a heading with nothing under it
    is a document of its own. Front matter is left out."""
    lines = text.splitlines()
    start = 0
    if lines and lines[0].strip() == "---":
        for i in range(1, min(len(lines), 200)):
            if lines[i].strip() in ("---", "..."):
                start = i + 1
                break
    docs: list[Doc] = []
    trail: list[tuple[int, str]] = []     # (level, heading)
    para: list[str] = []
    first = 0
    bare: tuple[int, str] | None = None   # a heading not yet followed by text
    fence = False

    def topic() -> str | None:
        return " › ".join(h for _, h in trail) or None

    def flush():
        nonlocal para, bare
        body = " ".join(" ".join(para).split())
        if body:
            docs.append(Doc(first, body, topic=topic()))
            bare = None
        para = []

    for n, line in enumerate(lines[start:], start + 1):
        if _FENCE.match(line):
            fence = not fence
        h = None if fence else _HEADING.match(line)
        if h:
            flush()
            if bare is not None:
                docs.append(Doc(bare[0], bare[1], topic=topic()))
            level = len(h.group(1))
            trail = [(lv, t) for lv, t in trail if lv < level] + [(level, h.group(2))]
            bare = (n, h.group(2))
            continue
        if not line.strip() or (not fence and _ITEM.match(line)):
            flush()
        if line.strip():
            if not para:
                first = n
            para.append(_ITEM.sub("", line, count=1) if not fence else line)
    flush()
    if bare is not None:
        docs.append(Doc(bare[0], bare[1], topic=" › ".join(h for _, h in trail[:-1]) or None))
    return docs


def archive_doc(rel: str, data: bytes) -> tuple[Doc | None, str | None]:
    """The document of an archive entry from its file's bytes, or why there is none."""
    from agent.stores import archive
    from agent.stores.frontmatter_io import FrontmatterError
    try:
        entry = archive.parse(rel, safe.decode(data, rel, errors="strict"))
    except (FrontmatterError, safe.BadBytes) as e:
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


def walk(root: Path, markdown: Sequence[str] = ()) -> list[str]:
    """Every indexable file on disk (a full build; refreshes never walk the vault).

    `markdown`: the vault's Markdown files git does not ignore (tracked or not)."""
    out = [name for name in memory.MEMORY_FILES if (root / name).is_file()]
    out += [rel for rel in markdown if is_person_note(rel) and (root / rel).is_file()]
    for top, pattern in (("sessions", "*.jsonl"), ("memory", "*.md"), ("archive", "*.md")):
        base = root / top
        if base.is_dir():
            for p in base.rglob(pattern):
                rel = p.relative_to(root).as_posix()
                if kind_of(rel) and p.is_file():
                    out.append(rel)
    return sorted(out)
