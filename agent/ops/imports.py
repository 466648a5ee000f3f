"""`agent import PATH`: another assistant's export (ChatGPT, Claude) or our own JSONL
brought into the vault, one session per conversation.

    done = import_path(vault, Path("chatgpt-export.zip"), now=now)
    print(done.added, done.conversations, done.skipped)

Each conversation becomes the session `import/chatgpt-<id>` or `import/claude-<uuid>`:
its messages keep their original times and their ids in the export (so importing again
adds only what is new, and `agent why` names the message), and its first line keeps
the conversation's title and times. The whole conversation waits to be archived
(agent.chat.compact.mark_imported), so `agent archive`, `agent serve` and then the
dream learn from it. Claude's memories.json becomes an archive entry the dream turns
into proposals for review.

The export is read twice, streamed: first to check it whole (a truncated file, bytes
that are not UTF-8, a zip that escapes or is a bomb, JSON past the bounds of
agent.stores.exports: nothing is written) and count it for the progress bar, then to
write it, one commit per chunk of whole conversations, each under the vault lock and
journalled conversation by conversation, so a kill leaves a consistent vault whose
next command commits what was written under its true counts, and a rerun finishes the
job. Asked to stop (`stop()` true: the CLI's Ctrl-C), it stops between two
conversations, commits those written, and says so (`ImportResult.stopped`).

Memory is bounded whatever the export holds: one conversation at a time is parsed
(within exports' bounds), a chunk holds at most `CHUNK_CHARS` of text, and a message
longer than `MAX_MESSAGE_CHARS` is kept up to there, with a line saying how much the
export has beyond it (no model reads more at once; the export keeps the whole).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TYPE_CHECKING

from agent.chat.compact import mark_imported
from agent.oneline import shorten
from agent.stores import archive, chatgpt, claude, exports, sessions, window
from agent.stores.exports import (
    CHATGPT,
    CLAUDE,
    JSONL,
    MEMORIES_SESSION,
    NAMES,
    ExportError,
    Imported,
    Part,
    Skipped,
)
from agent.vault.change import Change

if TYPE_CHECKING:
    from agent.vault.repo import Vault

CHUNK_CONVERSATIONS = 500       # conversations a commit holds at most
CHUNK_MESSAGES = 20_000         # ... and messages
CHUNK_CHARS = 64_000_000        # ... and characters of text
MAX_MESSAGE_CHARS = 1_000_000   # of one message kept (a model's whole context is less)
_KEYCHARS = re.compile(r"[^A-Za-z0-9._@+-]")


@dataclass
class Progress:
    done: int                   # conversations gone through
    total: int


@dataclass
class ImportResult:
    formats: list[str] = field(default_factory=list)
    conversations: int = 0      # in the export (readable)
    messages: int = 0           # visible messages in the export
    added: int = 0              # messages added now
    sessions: int = 0           # conversations that got new messages
    new_sessions: int = 0       # ... of them new to the vault
    commits: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    memories: int | None = None     # archive entry made of memories.json
    cut: int = 0                    # messages kept only up to MAX_MESSAGE_CHARS
    stopped: bool = False           # asked to stop (Ctrl-C) before the end
    done: int = 0                   # conversations gone through before the stop


def session_key(source: str, conv_id: str) -> str:
    """`import/chatgpt-<id>`: the id as it is when it fits a session name, else its
    readable part and a hash (two ids never meet in one session)."""
    clean = _KEYCHARS.sub("-", conv_id)[:80]
    if clean != conv_id or not clean[:1].isalnum():
        clean = f"{clean.strip('-.')[:60]}-{hashlib.sha1(conv_id.encode()).hexdigest()[:10]}"
    return sessions.check_key(f"import/{source}-{clean.lstrip('-.')}")


def import_path(vault: Vault, path: Path, *, now: datetime, fmt: str | None = None,
                on_progress: Callable[[Progress], None] | None = None,
                stop: Callable[[], bool] | None = None) -> ImportResult:
    """Import the export at `path` (a folder, a zip or a file); see the module."""
    path = Path(path)
    stop = stop or (lambda: False)
    found = exports.parts(path)
    result = ImportResult()
    jsonl = [p for p in found if p.kind == "jsonl" or fmt == JSONL]
    convs = [p for p in found if p.kind == "conversations" and p not in jsonl]
    mems = [p for p in found if p.kind == "memories" and fmt in (None, CLAUDE)]
    kinds = [(p, kind) for p in convs for kind in [_format_of(p, fmt)] if kind]
    memories = [m for p in mems for m in claude.memories(exports.read_json(p))]
    result.formats = sorted({k for _, k in kinds} | ({JSONL} if jsonl else set())
                            | ({CLAUDE} if memories else set()))
    # First pass: the whole export checked and counted before anything is written.
    total = 0
    for p, kind in kinds:
        read = 0
        for item in _conversations(p, kind, result):
            if stop():
                result.stopped = True
                return result
            total += 1
            read += 1
            result.messages += len(item.messages)
        _check_read(p, kind, read, result.skipped)
    result.conversations = total
    for p in jsonl:
        _import_jsonl(vault, p, path, result)
    batch: list[Imported] = []
    chars = 0
    for p, kind in kinds:
        for item in _conversations(p, kind, None):
            if stop():                  # what is read but not written: the rerun's
                result.stopped = True
                return result
            batch.append(item)
            chars += sum(len(m.text) for m in item.messages)
            if len(batch) >= CHUNK_CONVERSATIONS or chars >= CHUNK_CHARS or sum(
                    len(c.messages) for c in batch) >= CHUNK_MESSAGES:
                _write(vault, batch, path, result, now, stop)
                batch, chars = [], 0
            if result.stopped:
                return result
            if on_progress is not None:
                on_progress(Progress(result.done + len(batch), total))
    if batch:
        _write(vault, batch, path, result, now, stop)
        if result.stopped:
            return result
    if memories:
        result.memories = _memories(vault, memories, path, result, now)
    return result


def _format_of(part: Part, fmt: str | None) -> str:
    """The format of a conversations file: what its content says; `fmt` (--format) when
    the content says nothing, and an ExportError when it says the other one; "" for a
    file with no conversation in it."""
    found = exports.sniff(part)
    if found == exports.EMPTY:
        return ""                       # no conversation in it to read
    if fmt is None:
        if found is None:
            raise ExportError(f"{part.name}: not a ChatGPT or Claude export (no mapping or "
                              f"chat_messages in it); give --format chatgpt|claude|jsonl "
                              f"if it is one.")
        return found
    if found is not None and found != fmt:
        raise ExportError(f"{part.name} is {NAMES[found]}'s export, not {NAMES[fmt]}'s: "
                          f"give --format {found}, or no --format (the content tells it).")
    return fmt


def _check_read(part: Part, kind: str, read: int, skipped: list[Skipped]) -> None:
    """A file none of whose conversations can be read as `kind` (all of them missing
    what that format has) is not that format: an ExportError, not a list of skips."""
    unreadable = [s for s in skipped if s.where.startswith(f"{part.name} conversation ")
                  and s.why in (_NO_ID[kind], "not a conversation (an object expected)")]
    if not read and unreadable:
        raise ExportError(f"{part.name}: none of its {len(unreadable):,} conversations reads "
                          f"as {NAMES[kind]}'s export ({unreadable[0].why}); it is not "
                          f"one. Give another --format, or none.")


_NO_ID = {CHATGPT: "it has no id", CLAUDE: "it has no uuid"}


def _conversations(part: Part, kind: str, result: ImportResult | None
                   ) -> Iterator[Imported]:
    """The readable conversations of one file, each with at least one message; the
    others named in `result.skipped`. A message past MAX_MESSAGE_CHARS is cut there
    (and counted in `result.cut`)."""
    skipped = result.skipped if result is not None else []
    read = chatgpt.conversation if kind == CHATGPT else claude.conversation
    for n, obj in enumerate(exports.items(part), 1):
        title = (obj.get("title") or obj.get("name")) if isinstance(obj, dict) else None
        where = f"{part.name} conversation {n}" + (
            f" ({shorten(title, 60)!r})" if isinstance(title, str) and title else "")
        try:
            item = read(obj)
        except exports.Unreadable as e:
            skipped.append(Skipped(where, str(e)))
            continue
        if not item.messages:
            skipped.append(Skipped(where, "no message with text in its visible thread"))
            continue
        for m in item.messages:
            if len(m.text) > MAX_MESSAGE_CHARS:
                more = len(m.text) - MAX_MESSAGE_CHARS
                m.text = (f"{m.text[:MAX_MESSAGE_CHARS]}\n\n[{more:,} characters more are "
                          f"in the export; an import keeps {MAX_MESSAGE_CHARS:,} of a message]")
                if result is not None:
                    result.cut += 1
        yield item


def _import_jsonl(vault: Vault, part: Part, path: Path, result: ImportResult) -> None:
    from agent.chat.importer import import_file

    file = path if path.is_file() else path / part.name.split("/", 1)[-1]
    if not file.is_file():
        raise ExportError(f"{part.name}: a transcript inside a zip; unzip it and import "
                          f"the .jsonl file itself.")
    added, keys, sha = import_file(vault, file)
    result.added += added
    result.sessions += keys
    if sha:
        result.commits.append(sha)


# ---- writing a chunk -----------------------------------------------------------------------


def _write(vault: Vault, batch: list[Imported], path: Path, result: ImportResult,
           now: datetime, stop: Callable[[], bool]) -> None:
    """One commit for a chunk of whole conversations: only messages the vault lacks.

    The change is journalled again before each conversation with the counts written by
    then, so a kill mid-chunk is committed by the next command under its true counts
    (give or take the conversation it was writing); asked to stop, the chunk ends after
    the conversation being written, and is committed so."""
    source, trailers = NAMES[batch[0].source], {"Import": batch[0].source}
    with vault.locked():
        plans = [(key, *_plan(vault.root, key, c))
                 for c in batch for key in [session_key(c.source, c.id)]]
        _mark_unmarked(vault, [key for key, plan, _ in plans if not plan])
        added = touched = new = 0
        change = None
        for key, plan, fresh in plans:
            if stop():
                result.stopped = True
                break
            result.done += 1
            if not plan:
                continue
            added += sum(len(lines) for lines in plan.values())
            touched, new = touched + 1, new + fresh
            change = _change(added, touched, source, path, trailers)
            # A kill from here is committed as this change (journalled with the
            # conversation's first new file, when it has one: one write, not two).
            vault.intend(change, with_next_path=any(
                rel not in vault.journal.touched for rel in plan))
            before = {}
            for rel, lines in plan.items():
                dest = vault.root / rel
                before[rel] = dest.stat().st_size if dest.exists() else 0
                vault.append_lines(rel, lines)
            mark_imported(vault, key, before)
        if change is None:
            return
        sha = vault.commit(change)
    result.added += added
    result.sessions += touched
    result.new_sessions += new
    if sha:
        result.commits.append(sha)


def _change(added: int, touched: int, source: str, path: Path,
            trailers: dict[str, str]) -> Change:
    return Change("import", f"add {added} message{'s' * (added != 1)} in {touched} "
                            f"conversation{'s' * (touched != 1)} from {source} "
                            f"({path.name})", trailers=trailers)


def _mark_unmarked(vault: Vault, keys: list[str]) -> None:
    """The sessions a killed import wrote but had not yet marked for archiving (their
    messages are all in, so the rerun adds none): marked now, in their own commit."""
    keys = [k for k in keys if window.last_marker(vault.root, key=k) is None]
    if not keys:
        return
    change = Change("import", f"{len(keys)} conversation{'s' * (len(keys) != 1)} an "
                              f"interrupted import left wait to be archived")
    vault.intend(change)
    for key in keys:
        first = sessions.Session(vault.root, key).files()[0]
        mark_imported(vault, key, {first.relative_to(vault.root).as_posix(): 0})
    vault.commit(change)


def _plan(root: Path, key: str, conv: Imported) -> tuple[dict[str, list[str]], bool]:
    """The lines to append per month file for the messages the session lacks, and
    whether the session is new."""
    session = sessions.Session(root, key)
    files = session.files()
    have: set[str] = set()
    turn = 0
    if files:
        for obj in session.lines():
            if obj.get("id") is not None:
                have.add(str(obj["id"]))
        turn = session.last_turn()
    plan: dict[str, list[str]] = {}
    first = not files
    for m in conv.messages:
        if m.id in have:
            continue
        have.add(m.id)
        if m.role == "user" or turn == 0:
            turn += 1
        extra: dict[str, Any] = {}
        if m.speaker:
            extra["speaker"] = m.speaker
        if first:
            extra["conversation"] = _about(conv)
            first = False
        content: str | list[dict[str, str]] = m.text
        if m.attached:
            # Each attachment a block of its own after the words, and the line says how
            # many came attached: nobody typed them (agent.dream.learning).
            content = [{"type": "text", "text": t}
                       for t in ([m.text] if m.text.strip() else []) + m.attached]
            extra[sessions.ATTACHED] = len(m.attached)
        line = sessions.Line(m.id, m.ts.isoformat(timespec="seconds"), m.role, content, turn,
                             extra)
        plan.setdefault(sessions.month_file(key, m.ts), []).append(line.dumps())
    return plan, not files


def _about(conv: Imported) -> dict[str, Any]:
    """What the session's first line keeps of the conversation it came from."""
    out = {"from": conv.source, "id": conv.id, "title": conv.title}
    if conv.created:
        out["created"] = conv.created.isoformat(timespec="seconds")
    if conv.updated:
        out["updated"] = conv.updated.isoformat(timespec="seconds")
    if conv.model:
        out["model"] = conv.model
    return out


# ---- memories.json ---------------------------------------------------------------------


def _memories(vault: Vault, memories: list[str], path: Path, result: ImportResult,
              now: datetime) -> int | None:
    """An archive entry of what Claude remembered, unless one with these words is there:
    the dream makes proposals of it for review (never lines written as they are)."""
    text = "\n\n".join(memories)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    for _, rel in archive.entry_ids(vault.root):
        if archive.load(vault.root, rel).meta.get("imported") == f"claude-memories {digest}":
            return None
    with vault.locked():
        entry_id = archive.new_id(vault.root, now)
        meta = {"session": MEMORIES_SESSION, "created": now.isoformat(timespec="seconds"),
                "topic": "What Claude remembered of the person (memories.json)",
                "importance": 0.9, "imported": f"claude-memories {digest}"}
        change = Change("import", f"Claude's memories ({path.name}) for the dream to "
                                  f"propose from", trailers={"Import": CLAUDE,
                                                              "Archive": str(entry_id)})
        vault.intend(change)
        vault.write_text(archive.entry_path(entry_id, now), archive.render(entry_id, meta, text))
        sha = vault.commit(change)
    if sha:
        result.commits.append(sha)
    return entry_id
