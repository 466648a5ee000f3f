"""Memory files: `MEMORY.md`, `USER.md` (facts as bullets under headings) and the
daily notes `memory/YYYY-MM-DD.md` (append-only bullets with times).

Pure functions over text: they say what to append or which lines to change, and the
caller writes through the vault, so a hand-edited file keeps every byte it had.
"""

from __future__ import annotations

import re
from datetime import date, datetime

MEMORY = "MEMORY.md"
USER = "USER.md"
FACT = re.compile(r"^\s*[-*+]\s+\S")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def daily_path(day: date) -> str:
    return f"memory/{day:%Y-%m-%d}.md"


def daily_header(day: date) -> str:
    return f"# {day:%Y-%m-%d}\n\n"


def note_line(text: str, when: datetime) -> str:
    """A daily-note bullet: `- 14:05 text`, the text folded onto one line."""
    one = " ".join(text.split())
    return f"- {when:%H:%M} {one}"


def facts(text: str) -> list[tuple[int, str]]:
    """The bullets of a memory file as (line number, line)."""
    return [(i, line) for i, line in enumerate(text.splitlines(), 1) if FACT.match(line)]


def count_facts(text: str) -> int:
    return len(facts(text))
