"""The dream ledger, `.dream_ledger.jsonl`: which findings and archive entries produced
each edit a dream made to MEMORY.md and USER.md.

One JSON object per applied operation, appended in the dream's own commit (so the
commit that wrote a fact and the record of why are the same commit), never rewritten:

    {"run": "40..52", "at": "2026-11-21T03:00:12+01:00", "op": "update",
     "file": "MEMORY.md", "line": "- The Kyoto trip is on 2027-04-10",
     "old": "- The Kyoto trip is on 2027-04-03", "reason": "moved (archive:44)",
     "archive": [44], "exact": true,
     "findings": [{"kind": "update", "statement": "...", "evidence": ["archive:44"]}]}

`run` is the archive range of the dream (as in its subject), `archive` the entries the
edit stands on; `exact` is false when they could not be told apart from the whole run's.
It is kept out of MEMORY.md's own history, so `git log -p MEMORY.md` shows facts only.
Merged by union across clones (each line stands alone).
"""

from __future__ import annotations

import json
from pathlib import Path

LEDGER = ".dream_ledger.jsonl"
LEDGER_BYTES = 256 * 1024 * 1024     # years of dreams, read whole


def dumps(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def read(root: Path) -> list[dict]:
    """Every record; a line that is not JSON (a torn or hand-mangled one) is skipped."""
    from agent.vault import safe
    out = []
    text = safe.read_text(root, LEDGER, limit=LEDGER_BYTES, errors="replace") or ""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def for_line(root: Path, run: str | None, file: str, line: str) -> dict | None:
    """The newest record of dream `run` (any run when None) that wrote `line` to `file`."""
    want = line.strip()
    for rec in reversed(read(root)):
        if run is not None and rec.get("run") != run:
            continue
        if rec.get("file") == file and str(rec.get("line", "")).strip() == want:
            return rec
    return None
