"""`agent why --last` / `--reply ID`: the memories a reply was shown, each with its story.

A turn keeps, on its reply's transcript line, a record of what memory it put in front
of the model (agent.stores.used: blob ids, message ids, archive ids, skill names). This
module finds a reply (the newest, or by its id) and tells that record back: each line
of USER.md, MEMORY.md and the daily notes with its text and the commit that wrote it
(the head of its `agent why` story), each retrieved message with its words, each
archive entry with its topic, each skill loaded.

The record is in a synced file, so it is read as data: a path that is not a memory
file or a session, an id that is not an id, or a list over the caps is left out and
said so; nothing is read outside the vault.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from agent.errors import UserError
from agent.oneline import shorten
from agent.stores import memory, sessions
from agent.stores import used as record
from agent.vault import objects

if TYPE_CHECKING:
    from agent.vault.repo import Vault

READ_CAP = 64                      # entries of one kind read from a record, at most
TEXT = 240                         # characters of a message or line shown
_ID = re.compile(r"[A-Za-z0-9._:-]{1,80}")
_HEX = re.compile(r"[0-9a-f]{4,64}")     # an id abbreviated, of SHA-1 or SHA-256
_DAILY = re.compile(r"memory/\d{4}-\d{2}-\d{2}\.md")
_SESSION_FILE = re.compile(r"sessions/([^/]+/[^/]+)/[0-9]{4}-[0-9]{2}\.jsonl")


class NoReply(UserError):
    """No reply by that id, or no reply yet."""


class NoRecord(UserError):
    """A reply written before replies recorded the memories they used."""


@dataclass
class Reply:
    id: str
    session: str
    file: str
    turn: int | None
    ts: str
    text: str
    record: Any                     # the line's `used` field (None: no record)


@dataclass
class Item:
    kind: str            # memory (USER.md, MEMORY.md), note, message, archive, skill
    where: str           # USER.md:3, sessions/...jsonl#4.1-ab12cd, archive 2026..., skill x
    text: str
    detail: dict[str, Any] = field(default_factory=dict)
    taught: dict[str, Any] | None = None      # the commit that wrote the line (its story's head)


@dataclass
class Report:
    reply: Reply
    items: list[Item]
    count: int                      # what the record says it used (`n`)
    left_out: int = 0               # left out by the record's caps when it was made
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        r = self.reply
        return {"reply": {"id": r.id, "session": r.session, "file": r.file, "turn": r.turn,
                          "ts": r.ts, "text": r.text},
                "count": self.count, "left_out": self.left_out,
                "items": [asdict(i) for i in self.items], "problems": self.problems}


# ---- finding the reply ----------------------------------------------------------------


def _session_of(rel: str) -> str | None:
    """The session key of a session file's path (None: not a session file)."""
    m = _SESSION_FILE.fullmatch(rel)
    if m is None or ".." in rel:
        return None
    try:
        return sessions.check_key(m.group(1))
    except UserError:
        return None


def _reply(root: Path, rel: str, obj: dict[str, Any]) -> Reply:
    line = sessions.Line.read(obj)
    assert line is not None
    return Reply(str(line.id), _session_of(rel) or "", rel, line.turn, line.ts_text or "",
                 shorten(line.text, TEXT), line.extra.get("used"))


def _replies(root: Path, path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The assistant lines of a turn in one session file, newest first."""
    rel = path.relative_to(root).as_posix()
    for _, obj in sessions.read_backward(path, rel, root):
        if sessions.is_message(obj) and obj.get("role") == "assistant" and "turn" in obj:
            yield rel, obj


def last_reply(vault: Vault, session: str | None = None) -> Reply:
    """The newest reply of `session`, or of the conversation whose turn was committed last."""
    root = vault.root
    if session is None:
        session = _latest_session(vault)
    else:
        sessions.check_key(session)
    if session:
        for path in reversed(sessions.Session(root, session).files()):
            for rel, obj in _replies(root, path):
                return _reply(root, rel, obj)
    where = f" in {session}" if session else ""
    raise NoReply(f"No reply{where} yet: `agent chat` first, or name a reply with --reply ID.")


def _latest_session(vault: Vault) -> str | None:
    """The session of the newest chat turn's commit (its `Session:` trailer)."""
    out = objects.newest_trailer(vault, "^chat\\(", "Session")
    try:
        sessions.check_key(out)
    except UserError:
        return None
    return out


def turn_reply(vault: Vault, session: str, turn: int) -> Reply:
    """The reply of turn `turn` of `session` (its last assistant line)."""
    sessions.check_key(session)
    root = vault.root
    for path in reversed(sessions.Session(root, session).files()):
        for rel, obj in _replies(root, path):
            if obj.get("turn") == turn:
                return _reply(root, rel, obj)
    raise NoReply(f"No reply to turn {turn} in {session}.")


def find_reply(vault: Vault, reply_id: str, session: str | None = None) -> Reply:
    """The reply whose transcript line has id `reply_id` (in `session`, else in any)."""
    reply_id = reply_id.strip()
    if not _ID.fullmatch(reply_id):
        raise NoReply(f"{reply_id!r} is not a reply id (ids look like 3.2-a1b2c3: "
                      f"`agent why --last` shows the newest).")
    root = vault.root
    if session is not None:
        sessions.check_key(session)
        files = [p.relative_to(root).as_posix()
                 for p in reversed(sessions.Session(root, session).files())]
    else:
        needle = f'"id":"{reply_id}"'
        files = sorted((f for f in objects.files_holding(vault, needle, "sessions/")
                        if _session_of(f)), reverse=True)
    for rel in files:
        for _, obj in _replies(root, root / rel):
            if obj.get("id") == reply_id:
                return _reply(root, rel, obj)
    where = f" in {session}" if session else ""
    raise NoReply(f"No reply {reply_id}{where}: the id is the transcript line's \"id\" "
                  f"(`agent why --last` shows the newest reply's).")


# ---- telling the record back ----------------------------------------------------------


def used(vault: Vault, reply: Reply) -> Report:
    """What `reply` was shown, each item resolved (NoRecord: a reply from before)."""
    rec = reply.record
    if not isinstance(rec, dict):
        raise NoRecord(f"Reply {reply.id} ({reply.session}, {reply.ts[:16]}) has no record of "
                       f"the memories it used: it was written before agent kept one.")
    problems: list[str] = []
    items: list[Item] = []
    c = rec.get(record.COMMIT)
    commit = c if isinstance(c, str) and _HEX.fullmatch(c) else None
    for entry in _capped(rec.get(record.FILES), "memory files", problems):
        items += _file_items(vault, entry, commit, problems)
    for entry in _capped(rec.get(record.MESSAGES), "retrieved messages", problems):
        items += _message_items(vault, entry, problems)
    for entry in _capped(rec.get(record.ARCHIVE), "archive entries", problems):
        items += _entry_items(vault, entry, problems)
    for entry in _capped(rec.get(record.SKILLS), "skills", problems):
        items += _skill_items(vault, entry, problems)
    n, x = rec.get(record.COUNT), rec.get(record.LEFT_OUT)
    count = n if isinstance(n, int) else len(items)
    left = x if isinstance(x, int) else 0
    return Report(reply, items, count, left, problems)


def _capped(value: Any, what: str, problems: list[str]) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"the record's {what} are not a list: left out")
        return []
    if len(value) > READ_CAP:
        problems.append(f"the record lists {len(value)} {what}; the first {READ_CAP} are shown")
    return value[:READ_CAP]


def _file_items(vault: Vault, entry: Any, commit: str | None, problems: list[str]) -> list[Item]:
    if not (isinstance(entry, list) and len(entry) in (2, 3) and isinstance(entry[0], str)
            and isinstance(entry[1], str) and _HEX.fullmatch(entry[1])
            and (entry[0] in memory.MEMORY_FILES or _DAILY.fullmatch(entry[0]))):
        problems.append(f"not a memory file in the record: {str(entry)[:80]}")
        return []
    rel, blob = entry[0], entry[1]
    wanted = entry[2] if len(entry) == 3 else None
    if wanted is not None and not (isinstance(wanted, list)
                                   and all(isinstance(n, int) and n > 0 for n in wanted)):
        problems.append(f"not line numbers in the record: {str(wanted)[:80]}")
        return []
    full = objects.object_id(vault, blob, "blob")
    if full is None:
        problems.append(f"{rel} as shown ({blob}) is in no commit here: an edit never "
                        f"committed, or a sync not pulled yet")
        return []
    lines = objects.blob_text(vault, full).splitlines()
    numbers = record.memory_lines("\n".join(lines)) if wanted is None else wanted[:READ_CAP]
    at = objects.commit_holding(vault, rel, full,
                                objects.object_id(vault, commit, "commit") if commit else None)
    authors = objects.blame_all(vault, rel, at) if at else {}
    kind = "memory" if rel in memory.MEMORY_FILES else "note"
    from agent.ops import why
    teller = why.Teller.of(vault) if authors else None
    steps: dict[tuple[str, int], dict[str, Any]] = {}
    out = []
    for n in numbers:
        if n > len(lines):
            continue
        text = lines[n - 1]
        detail = {"file": rel, "line": n, "blob": full, "commit": at}
        taught = None
        if n in authors:
            sha, orig_path, orig_line = authors[n]
            if (sha, orig_line) not in steps:
                step = why.taught_by(vault, sha, orig_path, orig_line, text, teller)
                steps[(sha, orig_line)] = {k: v for k, v in asdict(step).items()
                                           if k in ("sha", "kind", "author", "date", "subject",
                                                    "source", "here")}
            taught = steps[(sha, orig_line)]
        out.append(Item(kind, f"{rel}:{n}", text, detail, taught))
    return out


def _message_items(vault: Vault, entry: Any, problems: list[str]) -> list[Item]:
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
            and _session_of(entry[0]) and isinstance(entry[1], list)
            and entry[1] and all(isinstance(i, str) and _ID.fullmatch(i) for i in entry[1])):
        problems.append(f"not a retrieved message in the record: {str(entry)[:80]}")
        return []
    rel, ids = entry[0], entry[1][:READ_CAP]
    path = vault.root / rel
    found: dict[str, sessions.Line] = {}
    from agent.fs import safe
    try:
        for _, obj in sessions.read_backward(path, rel, vault.root):
            line = sessions.Line.read(obj)
            if line is not None and line.id in ids:
                found[str(line.id)] = line
                if len(found) == len(ids):
                    break
    except (FileNotFoundError, safe.UnsafeFile):
        pass
    first = found.get(ids[0])
    session = _session_of(rel) or ""
    if first is None:
        return [Item("message", f"{rel}#{ids[0]}", "", {"file": rel, "id": ids[0],
                                                          "session": session, "missing": True})]
    near = [{"id": i, "role": found[i].role, "text": shorten(found[i].text, 160)}
            for i in ids[1:] if i in found]
    detail = {"file": rel, "id": ids[0], "session": session, "turn": first.turn,
              "ts": first.ts_text, "speaker": first.speaker, "next_to_it": near}
    return [Item("message", f"{rel}#{ids[0]}", shorten(first.text, TEXT), detail)]


def _entry_items(vault: Vault, entry: Any, problems: list[str]) -> list[Item]:
    if not isinstance(entry, int) or isinstance(entry, bool) or entry < 0:
        problems.append(f"not an archive id in the record: {str(entry)[:80]}")
        return []
    from agent.ops import why
    found = why._entry(vault, entry)
    found["messages"] = found.get("messages", [])[:3]
    text = str(found.get("topic") or found.get("summary") or "")
    if found.get("missing"):
        text = "(not in the vault any more)"
    return [Item("archive", f"archive {entry}", text, found)]


def _skill_items(vault: Vault, entry: Any, problems: list[str]) -> list[Item]:
    if not isinstance(entry, str) or not _ID.fullmatch(entry):
        problems.append(f"not a skill name in the record: {str(entry)[:80]}")
        return []
    from agent.stores import skills
    try:
        skill = skills.find(vault.root, entry)
    except skills.SkillError:
        return [Item("skill", f"skill {entry}", "(no such skill any more)", {"name": entry})]
    where = (skill.path.relative_to(vault.root).as_posix() if skill.where == "vault"
             else "built-in")
    return [Item("skill", f"skill {entry}", skill.description,
                 {"name": entry, "path": where})]


# ---- telling it -----------------------------------------------------------------------


LABELS = {"memory": "Memory", "note": "Daily notes", "message": "Retrieved messages",
          "archive": "Archive entries", "skill": "Skills loaded"}


def render(report: Report) -> str:
    r = report.reply
    out = [f"Reply {r.id} ({r.session}, turn {r.turn}, {r.ts[:16].replace('T', ' ')}) "
           f"was shown {report.count} memor{'y' if report.count == 1 else 'ies'}:"]
    if r.text:
        out.append(f"  {r.text}")
    for kind, label in LABELS.items():
        picked = [i for i in report.items if i.kind == kind]
        if not picked:
            continue
        out += ["", f"{label}:"]
        for i in picked:
            out.append(f"  {i.where}  {' '.join(i.text.split())}")
            if i.taught:
                t = i.taught
                src = t.get("source") or {}
                via = (f", session {src.get('session')} turn {src.get('turn')}"
                       if t.get("kind") == "chat turn" else "")
                out.append(f"    taught by {str(t.get('sha'))[:7]} {str(t.get('date'))[:10]} "
                           f"{t.get('kind')}{via}: {t.get('subject')}")
    if report.left_out:
        out += ["", f"({report.left_out} more left out of the record by its caps.)"]
    out += [f"Note: {p}." for p in report.problems]
    out += ["", "Each line's whole story: agent why WORDS OF THE LINE."]
    return "\n".join(out) + "\n"
