"""How a search hit is labelled wherever it is shown (`agent search`, the web page), and
the dates --since/--until take: one place, so both front-ends agree."""

from __future__ import annotations

import re
from datetime import date, datetime

from agent import clock
from agent.errors import UserError
from agent.vault import gitcmd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.search.query import Hit
    from agent.vault.repo import Vault


def when(ts: str | None) -> str:
    if not ts:
        return ""
    return ts[:16].replace("T", " ")


def where(hit: Hit) -> str:
    return f"{hit.path}:{hit.line}" if hit.line else hit.path


def who(hit: Hit) -> str:
    if hit.kind == "sessions":
        return hit.speaker or ""
    if hit.kind == "memory":
        return f"fact ({hit.topic})" if hit.topic else "fact"
    if hit.kind == "archive":
        return f"archive: {hit.topic}" if hit.topic else "archive"
    return "note"


def bound(day: date) -> str:
    return day.isoformat(timespec="seconds") if isinstance(day, datetime) else f"{day:%Y-%m-%d}"


def parse_day(vault: Vault, text: str | None, flag: str) -> date | None:
    """A day from the forms `agent log --since` takes ("2 weeks ago", "yesterday",
    "2025-03-01", "last monday"), read by git's own date parser so both agree; an ISO
    time with its hour (2026-11-24T01:48:27+00:00) is that moment, not its day."""
    if text is None:
        return None
    t = text.strip()
    try:
        return date.fromisoformat(t)
    except ValueError:
        pass
    ymd = re.fullmatch(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})", t)
    if ymd:                             # git would take 2026-13-45 as some other day
        try:
            return date(*(int(x) for x in ymd.groups()))
        except ValueError as e:
            raise UserError(f"{flag} {text!r}: not a date ({e}); use e.g. 2025-03-01, "
                            f"yesterday, '2 weeks ago', 'last monday'.") from None
    if "T" in t or ":" in t:
        try:                            # a moment (2026-11-24T01:48:27+00:00): kept whole
            moment = datetime.fromisoformat(t)
            return moment if moment.tzinfo else moment.astimezone()
        except ValueError:
            pass
    now = clock.now()
    stamp = gitcmd.date_stamp(vault, t, now.timestamp())
    if stamp is None:
        raise UserError(f"{flag} {text!r}: not a date git understands; use e.g. "
                        f"2025-03-01, yesterday, '2 weeks ago', 'last monday'.")
    return datetime.fromtimestamp(stamp, now.tzinfo).date()
