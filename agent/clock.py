"""What time it is for every command: the local time, or the instant `AGENT_NOW` names.

`AGENT_NOW=2030-01-01T10:00:00+00:00 agent note x` writes to memory/2030-01-01.md: tests
(and a person replaying a day) fix the clock instead of racing midnight. Only the edges
(CLI commands, the gateway's default clock, the MCP server) read it; everything below
takes the time as a parameter.
"""

from __future__ import annotations

import os
from datetime import datetime

from agent.errors import UserError

VARIABLE = "AGENT_NOW"
FORM = "ISO 8601 with an offset, as in 2030-01-01T10:00:00+00:00"


def now() -> datetime:
    """The time with its offset: $AGENT_NOW when set, else the local time."""
    fixed = parse(os.environ.get(VARIABLE, ""))
    return fixed or datetime.now().astimezone()


def parse(text: str) -> datetime | None:
    """The instant `text` names (None for empty); a UserError naming AGENT_NOW otherwise."""
    text = text.strip()
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"{VARIABLE}={text!r} is not a time: give {FORM} "
                        f"(or unset {VARIABLE} to use the real clock).") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise UserError(f"{VARIABLE}={text!r} has no offset: give {FORM} "
                        f"(or unset {VARIABLE} to use the real clock).")
    return when
