"""Statements a person rejected in review, `.dream_rejected.jsonl`: the dream does not
propose them again.

One JSON object per rejection, appended in the review's commit, merged by union across
clones (each line stands alone):

    {"text": "lives in lisbon", "op": "update", "file": "USER.md",
     "line": "- Lives in Lisbon", "reason": "I moved back", "run": "40..52",
     "at": "2026-11-21T08:10:00+01:00", "by": "Alice <alice@example.org>"}

`text` is the statement normalised (agent.stores.memory.normalise): an add or update to
that text is dropped before review. For a rejected delete, `text` is the line the dream
wanted gone, and a later delete of that line is dropped. A person may delete a line of
this file to let the dream propose it again.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.stores.memory import normalise
from agent.fs import boundedjson

FILE = ".dream_rejected.jsonl"


def record(op: str, file: str, line: str, reason: str, run: str, at: str, by: str) -> dict:
    return {"text": normalise(line), "op": op, "file": file, "line": line.strip(),
            "reason": reason, "run": run, "at": at, "by": by}


def dumps(rec: dict) -> str:
    return json.dumps(rec, ensure_ascii=False, separators=(",", ":"))


def read(root: Path) -> list[dict]:
    """Every rejection, oldest first; a line that is not a JSON object is skipped."""
    from agent.fs import safe

    text = safe.read_text(root, FILE, errors="replace") or ""
    out = []
    for line in text.splitlines():
        try:
            obj = boundedjson.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("text"), str):
            out.append(obj)
    return out


def rejected(recs: list[dict], op: str, new: str, old: str) -> dict | None:
    """The rejection that rules out an editor operation, or None: an add or update to a
    rejected statement, or the delete of a line whose deletion was rejected."""
    for r in recs:
        if op in ("add", "update") and r.get("op") in ("add", "update") \
                and new.strip() and r["text"] == normalise(new):
            return r
        if op == "delete" and r.get("op") == "delete" and old.strip() \
                and r["text"] == normalise(old):
            return r
    return None
