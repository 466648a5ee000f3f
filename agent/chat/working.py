"""A session's working set: the memories retrieved for its last message that found any
(MemOS's working memory), kept across the session's turns.

A follow-up with no word to search for ("why?", "when was that?", "tell me more")
shows the working set again, so the model still has the memories the conversation is
about; small talk shows nothing but keeps the set alive; a search that finds memories
*replaces* it, never adds to it, so the block stays small. It lives in `.agent/working/<session>.json`:
derived state, never committed, safe to delete. It lapses after `IDLE` without a turn
and is cleared by `/new`.

Each memory is kept as the record the prompt quotes (agent.chat.prompt.hit_record),
plus the message ids it stands for (`ids`, never shown to the model).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from agent.stores import sessions
from agent.fs import atomic

FOLDER = ".agent/working"
IDLE = timedelta(hours=2)


def _path(root: Path, session: str) -> Path:
    sessions.check_key(session)          # channel/chat: no "..", no absolute path
    return Path(root) / FOLDER / f"{session}.json"


def load(root: Path, session: str, now: datetime) -> list[dict]:
    """The session's working set, or [] when there is none, it lapsed, or the file is
    not one (a torn or hand-mangled file is derived state: ignored, rebuilt next time)."""
    data = atomic.read_json(_path(root, session))
    if not isinstance(data, dict) or not isinstance(data.get("memories"), list):
        return []
    try:
        at = datetime.fromisoformat(data["at"])
        if now - at > IDLE or at > now + IDLE:
            return []
    except (KeyError, TypeError, ValueError):
        return []
    return [m for m in data["memories"] if isinstance(m, dict) and isinstance(m.get("quote"), str)]


def save(root: Path, session: str, now: datetime, memories: list[dict]) -> None:
    """Make `memories` the session's working set, as of `now`."""
    path = _path(root, session)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, {"at": now.isoformat(), "memories": memories})


def touch(root: Path, session: str, now: datetime, memories: list[dict]) -> None:
    """Keep the working set alive as of `now` (a turn used it)."""
    if memories:
        save(root, session, now, memories)


def clear(root: Path, session: str) -> None:
    try:
        _path(root, session).unlink()
    except FileNotFoundError:
        pass
