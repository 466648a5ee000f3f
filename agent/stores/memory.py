"""Memory files: `MEMORY.md`, `USER.md` (facts as bullets under headings) and the
daily notes `memory/YYYY-MM-DD.md` (append-only bullets with times).

Pure functions over text: they say what to append or which lines to change, and the
caller writes through the vault, so a hand-edited file keeps every byte it had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime

MEMORY = "MEMORY.md"
USER = "USER.md"
FACT = re.compile(r"^\s*[-*+]\s+\S")
_MARKER = re.compile(r"^(\s*[-*+]\s+)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
MEMORY_FILES = (MEMORY, USER)
TITLES = {MEMORY: "# Memory", USER: "# User"}      # the heading a new file starts with
_FOLDED = {name.casefold(): name for name in MEMORY_FILES}
_DAILY = re.compile(r"^memory/(?:.*/)?(\d{4}-\d{2}-\d{2})\.md$")
_BULLET = re.compile(r"^\s*[-*+]\s+(?:\[[ xX]\]\s+)?(.*\S)\s*$")   # its text, no checkbox
_NOTE_TIME = re.compile(r"^(\d{1,2}):(\d{2})\s+(.*)$")


def memory_file(rel: str) -> str | None:
    """MEMORY.md or USER.md when the vault path `rel` names one, else None. Case is
    folded, as a macOS or Windows disk folds it: there `Memory.md` and `USER.MD` are
    those files, so every rule about the memory files (the review holds first) asks
    this, never compares names itself."""
    return _FOLDED.get(rel.strip("/").removeprefix("./").casefold())


@dataclass
class Fact:
    """A bullet of MEMORY.md or USER.md with its continuation lines, under its heading."""
    line: int                  # 1-based
    text: str
    section: str | None = None


@dataclass
class Note:
    """A line of a daily note; a `- HH:MM text` bullet carries its time."""
    line: int
    text: str
    ts: str | None             # the day (YYYY-MM-DD), with the time when the line has one


def daily_path(day: date) -> str:
    return f"memory/{day:%Y-%m-%d}.md"


def is_daily_note(rel: str) -> bool:
    return rel.startswith("memory/") and rel.endswith(".md")


def note_day(rel: str) -> str | None:
    """The day (YYYY-MM-DD) a daily note's path names, or None."""
    m = _DAILY.match(rel)
    return m.group(1) if m else None


def daily_header(day: date) -> str:
    return f"# {day:%Y-%m-%d}\n\n"


_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` without terminal escape sequences and control characters (NUL makes git
    take a note for binary; an escape sequence rewrites the screen of whoever reads it)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def note_line(text: str, when: datetime) -> str:
    """A daily-note bullet: `- 14:05 text`, the text folded onto one line, printable."""
    one = " ".join(printable(text).split())
    return f"- {when:%H:%M} {one}"


def facts(text: str) -> list[tuple[int, str]]:
    """The bullets of a memory file as (line number, line)."""
    return [(i, line) for i, line in enumerate(text.splitlines(), 1) if FACT.match(line)]


def count_facts(text: str) -> int:
    return len(facts(text))


def read_facts(text: str) -> list[Fact]:
    """The facts of a memory file: each bullet (a checkbox left out) with the indented
    lines that continue it, and the heading it is under."""
    out: list[Fact] = []
    heading = ""
    current: Fact | None = None
    for n, line in enumerate(text.splitlines(), 1):
        h = HEADING.match(line)
        if h:
            heading, current = h.group(2), None
            continue
        b = _BULLET.match(line)
        if b:
            current = Fact(n, b.group(1), heading or None)
            out.append(current)
        elif current is not None and line.strip() and line[:1] in " \t":
            current.text += " " + line.strip()
        else:
            current = None
    return out


def read_note(rel: str, text: str) -> list[Note]:
    """Each non-heading, non-blank line of the daily note `rel`, with its time."""
    day = note_day(rel)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or HEADING.match(line):
            continue
        b = _BULLET.match(line)
        body = b.group(1) if b else line.strip()
        ts = day
        t = _NOTE_TIME.match(body)
        if t and day and int(t.group(1)) < 24:
            ts = f"{day}T{int(t.group(1)):02d}:{t.group(2)}"
            body = t.group(3)
        out.append(Note(n, body, ts))
    return out


# ---- facts: one rule for what counts as the same fact -------------------------------------


def normalise(fact: str) -> str:
    """A fact's text for comparison: no bullet marker, folded spaces, case and final dot.

    Two facts with the same normalised text are the same fact: `remember` does not add
    it twice and the dream refuses to add it again.
    """
    text = _MARKER.sub("", fact, count=1)
    return " ".join(text.split()).casefold().rstrip(".")


def find_fact(text: str, fact: str) -> int | None:
    """The line number (1-based) of a bullet of `text` that is the same fact, or None."""
    key = normalise(fact)
    return next((n for n, line in facts(text) if normalise(line) == key), None)


def _level(line: str) -> int | None:
    m = HEADING.match(line)
    return len(m.group(1)) if m else None


def add_fact(text: str | None, fact: str, section: str | None, title: str = "") -> str:
    """`text` with the bullet `- fact` added under heading `section`, other lines untouched.

    The bullet goes after the section's last line (the section is created at the end
    when missing); with no section, after the file's last bullet. A fact the file
    already has (by `normalise`) is not added twice.
    """
    bullet = f"- {fact}"
    text = text or (f"{title}\n" if title else "")
    lines = text.splitlines()
    if find_fact(text, fact) is not None:
        return text if text.endswith("\n") or not text else text + "\n"

    def insert_into(idx: int) -> None:
        """Insert under the heading at lines[idx]."""
        lvl = _level(lines[idx])
        end = next((j for j in range(idx + 1, len(lines))
                    if (_level(lines[j]) or 99) <= lvl), len(lines))
        last = next((j for j in range(end - 1, idx, -1) if lines[j].strip()), None)
        if last is not None:
            lines.insert(last + 1, bullet)
            return
        # An empty section: heading, blank line, bullet (and a blank before the next heading).
        if idx + 1 < len(lines) and not lines[idx + 1].strip():
            lines[idx + 2:idx + 2] = [bullet] + ([""] if idx + 2 < len(lines)
                                                 and lines[idx + 2].strip() else [])
        else:
            lines[idx + 1:idx + 1] = ["", bullet] + ([""] if idx + 1 < len(lines) else [])

    if section:
        wanted = section.strip().lstrip("#").strip().lower()
        idx = next((i for i, line in enumerate(lines)
                    if (m := HEADING.match(line)) and m.group(2).strip().lower() == wanted),
                   None)
        if idx is not None:
            insert_into(idx)
        else:
            if lines and lines[-1].strip():
                lines.append("")
            lines += [f"## {section.strip().lstrip('#').strip()}", "", bullet]
    else:
        bullets = [i for i, line in enumerate(lines) if FACT.match(line)]
        headings = [i for i, line in enumerate(lines) if _level(line) and _level(line) > 1]
        if bullets:
            lines.insert(bullets[-1] + 1, bullet)
        elif headings:
            insert_into(headings[-1])
        else:
            if lines and lines[-1].strip():
                lines.append("")
            lines.append(bullet)
    return "\n".join(lines) + "\n"
