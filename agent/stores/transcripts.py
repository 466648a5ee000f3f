"""A transcript imported as JSON lines (`agent import FILE.jsonl`): each line read and
checked (every malformed line named at once), then planned as the lines to append to
each session's month file, leaving out the ids a session holds already."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from agent.stores.sessions import (FIELDS, IMPORTED, IMPORTS, ROLES, SESSION_BYTES, Line, Session,
                                   SessionError, check_key, dumps, month_file, parse_line,
                                   parse_ts)


def message_id(session: str, ts: str, role: str, content) -> str:
    """A stable id for an imported message that has none (so re-imports add nothing)."""
    import hashlib
    h = hashlib.sha1(dumps([session, ts, role, content]).encode()).hexdigest()
    return f"imp-{h[:12]}"


def parse_import(path: Path) -> list[tuple[str, datetime, dict[str, Any]]]:
    """Read a transcript to import: one JSON object per line.

    Each line has `session`, `role`, `content`, `ts` and optionally `id` and `speaker`.
    Raises SessionError listing every malformed line by number; nothing is returned
    from a file with any.
    """
    from agent.fs import safe

    records, problems = [], []
    seen_ids: dict[tuple[str, str], int] = {}
    data = safe.read_given(path, SESSION_BYTES)
    if data.startswith(b"\xef\xbb\xbf"):      # a UTF-8 byte-order mark is fine
        data = data[3:]
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = parse_line(raw, str(path), n)
        except SessionError as e:
            problems.append(str(e).replace("; fix or remove the line", "").replace(
                "a session line must be a JSON object", "expected a JSON object"))
            continue
        if "type" in obj:
            problems.append(f"{where}: a line with \"type\" ({str(obj['type'])[:20]!r}) is a "
                            f"marker the agent writes itself, not a message to import")
            continue
        missing = [k for k in ("session", "role", "content", "ts") if k not in obj]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
            continue
        try:
            key = obj["session"]
            if not isinstance(key, str):
                raise SessionError(f"{where}: session must be a string")
            if "/" not in key:
                key = f"{IMPORTS}{key}"
            check_key(key)
            if obj["role"] not in ROLES:
                raise SessionError(f"{where}: role must be one of {', '.join(ROLES)}")
            if not isinstance(obj["content"], (str, list)):
                raise SessionError(f"{where}: content must be a string or a list of blocks")
            ts = parse_ts(obj["ts"], where)
            mid = obj.get("id")
            if mid is not None and not isinstance(mid, (str, int)):
                raise SessionError(f"{where}: id must be a string")
        except SessionError as e:
            msg = str(e)
            problems.append(msg if msg.startswith(str(path)) else f"{where}: {msg}")
            continue
        if mid is not None:
            if (key, str(mid)) in seen_ids:
                problems.append(f"{where}: id {str(mid)!r} is already used by line "
                                f"{seen_ids[(key, str(mid))]}; give each message its own id")
                continue
            seen_ids[(key, str(mid))] = n
        rec = {k: v for k, v in obj.items() if k not in ("session", "turn", IMPORTED)}
        rec[IMPORTED] = True        # whatever the file says: it is not the person's chat
        rec["ts"] = ts.isoformat()
        rec["id"] = str(mid) if mid is not None else message_id(key, rec["ts"], obj["role"],
                                                                  obj["content"])
        records.append((key, ts, rec))
    if problems:
        raise SessionError("\n".join(problems))
    return records


def plan_import(root: Path, records: list) -> dict[str, list[str]]:
    """The lines to append per session file, leaving out ids the session already has.

    A new turn starts at each user message, numbered on from the session's last turn.
    """
    by_session: dict[str, list] = {}
    for key, ts, rec in records:
        by_session.setdefault(key, []).append((ts, rec))
    plan: dict[str, list[str]] = {}
    for key, items in by_session.items():
        session = Session(Path(root), key)
        existing = {str(o.get("id")) for o in session.lines()}
        turn = session.last_turn()
        for ts, rec in items:
            if rec["id"] in existing:
                continue
            existing.add(rec["id"])
            if rec["role"] == "user" or turn == 0:
                turn += 1
            line = Line(rec["id"], rec["ts"], rec["role"], rec["content"], turn,
                        {k: v for k, v in rec.items() if k not in FIELDS})
            plan.setdefault(month_file(key, ts), []).append(line.dumps())
    return plan
