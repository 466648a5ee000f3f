"""A conversation's active window: the messages after its last compact marker, read
from where the marker says the window starts, or from the end back only as far as
needed, so the cost follows the window, not the session's history (see read_window)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.fs import boundedjson

from agent.stores.sessions import (Session, SessionError, is_marker_raw, raw_backward,
                                   read_backward, read_forward, session_dir)


@dataclass
class Window:
    messages: list[dict]            # the active window, oldest first (no marker lines)
    files: list[str]                # the vault-relative file of each message
    marker: dict | None             # the last compact marker
    last_turn: int                  # the session's last turn number (0 when none)
    offsets: list[int] = field(default_factory=list)   # each message's byte offset in its file


def read_window(root: Path, key: str) -> Window:
    """The active window: the messages after the last marker's `through` message.

    Compaction archives the window's oldest part and appends its marker after the kept
    rest, so the window is what follows the `through` message (marker lines skipped),
    or what follows the marker when `through` is not found. A marker that records where
    the kept part starts (`start`: file, byte offset and first id) is read from there
    forward; older markers are found by reading lines from the end back only as far as
    needed. Either way the cost follows the window, not the session's history.
    """
    root = Path(root)
    files = Session(root, key).files()
    found = last_marker(root, files)
    if found is not None:
        window = _window_from_start(root, key, files, found)
        if window is not None:
            return window
    picked: list[tuple[str, dict, int]] = []        # newest first
    marker: dict | None = None
    through: str | None = None
    done = False
    for rel, off, obj in _backward(root, files):
        if obj.get("type") == "compact":
            if marker is None and _covered_ids(obj) is not None:
                return _window_by_ids(root, key, files)
            if marker is None:
                marker = obj
                through = None if obj.get("through") is None else str(obj["through"])
                if through is None:
                    done = True
                    break
            continue
        if marker is not None and str(obj.get("id")) == through:
            done = True
            break
        picked.append((rel, obj, off))
    if marker is not None and not done:
        # `through` is not in the session (a hand edit): the window starts after the marker.
        picked = _after_marker(root, files)
    return _window(root, key, picked, marker)


def last_marker(root: Path, files: list[Path] | None = None, key: str | None = None):
    """(marker, its file, its offset) of the session's last compact marker, or None.

    Lines are not parsed on the way back (a marker line is known by its bytes), so this
    costs the bytes of the window, whatever the history."""
    root = Path(root)
    files = Session(root, key).files() if files is None else files
    for f in reversed(files):
        rel = f"{f.parent.relative_to(root).as_posix()}/{f.name}"
        for off, raw in raw_backward(root, rel):
            if is_marker_raw(raw):
                try:
                    obj = boundedjson.loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("type") == "compact":
                    return obj, rel, off
    return None


def start_of(marker: dict) -> dict | None:
    """A marker's record of where the window it left starts: {file, offset, id}."""
    start = marker.get("start")
    if (isinstance(start, dict) and isinstance(start.get("file"), str)
            and isinstance(start.get("offset"), int) and not isinstance(start["offset"], bool)
            and start["offset"] >= 0):
        return start
    return None


def _window_from_start(root: Path, key: str, files: list[Path], found) -> Window | None:
    """The window read forward from where the last marker says it starts; None when the
    record no longer fits the files (a hand edit, or a sync that reordered lines): then
    the window is found by ids as before."""
    marker, _, _ = found
    start = start_of(marker)
    if start is None:
        return None
    # Names, not relative_to (a million messages are some 300 month files).
    folder = session_dir(key)
    rels = [f"{folder}/{f.name}" for f in files]
    if start["file"] not in rels:
        return None
    i = rels.index(start["file"])
    picked: list[tuple[str, dict, int]] = []
    covered: set[str] = set()
    first = True
    for rel in rels[i:]:
        offset = start["offset"] if rel == start["file"] else 0
        try:
            lines = list(read_forward(root, rel, offset))
        except (FileNotFoundError, SessionError):
            return None       # not at a line's start any more: found by ids instead
        for off, obj in lines:
            if first:
                first = False
                want = start.get("id")
                if off != offset or (want is not None and str(obj.get("id")) != str(want)):
                    return None
            if obj.get("type") == "compact":
                covered.update(_covered_ids(obj) or [])
                continue
            picked.append((rel, obj, off))
    if first and start.get("id") is not None:
        return None          # the first kept message is gone
    picked = [p for p in picked if p[1].get("id") is None or str(p[1]["id"]) not in covered]
    return _window(root, key, picked[::-1], marker)


def _window(root: Path, key: str, picked: list[tuple[str, dict, int]],
            marker: dict | None) -> Window:
    """The Window of the (file, message, offset) triples read newest first."""
    picked = picked[::-1]
    turns = [o["turn"] for _, o, _ in picked if isinstance(o.get("turn"), int)]
    last_turn = max(turns) if turns else Session(root, key).last_turn()
    return Window([o for _, o, _ in picked], [r for r, _, _ in picked], marker, last_turn,
                  [off for _, _, off in picked])


def _covered_ids(marker: dict) -> list[str] | None:
    """The ids of the messages a compact marker covers (None for a marker of before
    markers listed them)."""
    ids = marker.get("ids")
    if isinstance(ids, list) and ids:
        return [str(i) for i in ids]
    return None


def _window_by_ids(root: Path, key: str, files: list[Path]) -> Window:
    """The window when the last marker lists the ids it covers: every message no marker
    covers. Two machines that wrote to one session and compacted it before they synced
    leave interleaved lines (agent/stores/merge.py orders them by time), so a marker may
    follow messages it does not cover: those stay in the window.

    Read from the end back past the first message of every marker seen (where its
    compacted part began), then to the next marker line: what lies before was the
    window of an earlier compaction. A marker without ids covers everything up to its
    `through`, as before."""
    picked: list[tuple[str, dict, int]] = []        # newest first
    covered: set[str] = set()
    need: set[str] = set()                     # first ids of the markers seen, not yet reached
    marker: dict | None = None
    boundary: str | None = None                # an older marker's `through`: all before is covered
    tail = True                                # still after the last marker's `through`
    through: str | None = None
    for rel, off, obj in _backward(root, files):
        if obj.get("type") == "compact":
            if marker is not None and not need:
                break
            ids = _covered_ids(obj)
            if marker is None:
                marker = obj
                through = str(obj.get("through"))
            if ids is None:
                if boundary is None and obj.get("through") is not None:
                    boundary = str(obj["through"])
                continue
            covered.update(ids)
            need.add(ids[0])
            continue
        if obj.get("id") is None:
            if tail:                       # a line without an id goes with the window
                picked.append((rel, obj, off))  # only after the last compaction
            continue
        mid = str(obj["id"])
        if boundary is not None and mid == boundary:
            break
        if marker is not None and mid == through:
            tail = False
        need.discard(mid)
        if mid not in covered:
            picked.append((rel, obj, off))
    return _window(root, key, picked, marker)


def _after_marker(root: Path, files: list[Path]) -> list[tuple[str, dict, int]]:
    """(file, message, offset) after the last marker, newest first."""
    out: list[tuple[str, dict, int]] = []
    for rel, off, obj in _backward(root, files):
        if obj.get("type") == "compact":
            return out
        out.append((rel, obj, off))
    return out


def _backward(root: Path, files: list[Path]):
    """(file, offset, line) of a session's lines from its last to its first, across its
    month files: the one backward scan the window readers stop where they need."""
    for f in reversed(files):
        rel = f.relative_to(root).as_posix()
        for off, obj in read_backward(f, rel, root):
            yield rel, off, obj
